package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/testkit/proctest"
)

// checkerSeeds are the seeds of the checker's runs in make test: two, whose
// schedules between them apply every fault kind (TestCheckerSeedsCoverEveryFault).
// make chaos runs random seeds, as many as asked.
var checkerSeeds = []uint64{1, 2}

// checkerConfig shapes one checker run.
type checkerConfig struct {
	Nodes    int
	Sessions int
	Writers  int
	Faults   int
	Think    time.Duration // a writer's pause between events, up to
	Env      map[string]string
}

var defaultCheckerConfig = checkerConfig{
	Nodes: 3, Sessions: 4, Writers: 6, Faults: 6, Think: 60 * time.Millisecond,
	Env: map[string]string{
		"LEASE_TTL":       "2s",
		"LEASE_RENEW":     "500ms",
		"ECHO_DELAY":      "25ms",
		"FORWARD_TIMEOUT": "1s",
		"DRAIN_WINDOW":    "3s",
		// The whole run stays in the replay log, which is the reference
		// the observers are compared with; a join from the start replays
		// it whole into the socket's queue.
		"REPLAY_MAX_LEN": "20000",
		"SOCKET_QUEUE":   "32768",
	},
}

// TestAcceptedEventChecker drives a 3-node cluster of real gateway processes
// on the real services, each node's Postgres and NATS links through a
// cuttable proxy. Writers post events to random nodes for a few sessions
// and follow the answers (retry directives; the same idempotency key after
// an answer that leaves the outcome open). An observer per session and
// node records every push and rejoins on a seq jump or a lost socket. A
// seeded schedule of faults (kill -9 and restart, SIGSTOP past the lease
// TTL, SIGTERM drain and restart, NATS and Postgres cuts) runs meanwhile.
// Once every fault is healed, the writers stopped, one last event per
// session run and the observers caught up, the run is checked:
//
//	(a) every event answered 202 is in its session's history exactly once
//	    (and once in the replay log), and its turn completed or failed;
//	(b) an event only ever refused (503 directive, 429) is in neither, and
//	    is never answered 202 duplicate after a refusal;
//	(c) no (session, epoch, seq) holds two different events, in the log,
//	    in any push, or in two 202 answers;
//	(d) each observer's events are contiguous and equal the replay log.
//
// It runs the seeds in checkerSeeds; CHAOS_SEED=n runs seed n alone and
// CHAOS_RUNS=n runs n random seeds (make chaos). Each run logs its schedule,
// a replay command and its counts.
//
// A run that fails names the property and the events that break it.
func TestAcceptedEventChecker(t *testing.T) {
	seeds := seedsFromEnv(t)
	var (
		mu      sync.Mutex
		reports []report
	)
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			r := runChecker(t, seed, defaultCheckerConfig)
			mu.Lock()
			reports = append(reports, r)
			mu.Unlock()
		})
	}
	t.Log(summarize(reports))
}

// seedsFromEnv returns the seeds to run: CHAOS_SEED alone, CHAOS_RUNS
// random ones, or checkerSeeds.
func seedsFromEnv(t *testing.T) []uint64 {
	if v := os.Getenv("CHAOS_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("CHAOS_SEED=%q: %v", v, err)
		}
		return []uint64{seed}
	}
	if v := os.Getenv("CHAOS_RUNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("CHAOS_RUNS=%q: want a positive count", v)
		}
		seeds := make([]uint64, n)
		for i := range seeds {
			seeds[i] = rand.Uint64() % 1_000_000_000
		}
		return seeds
	}
	return checkerSeeds
}

// runChecker runs one seeded checker run and reports its counts; each
// violated property fails t.
func runChecker(t *testing.T, seed uint64, cfg checkerConfig) report {
	fc := startFaultCluster(t, cfg.Nodes, cfg.Env)
	sch := newSchedule(seed, cfg.Faults, cfg.Nodes, fc.Duration("LEASE_TTL"))
	t.Logf("schedule %v", sch)
	t.Logf("replay: CHAOS_SEED=%d go test -race -count=1 -run '^TestAcceptedEventChecker$' ./chaos/", seed)

	sessions := make([]string, cfg.Sessions)
	for i := range sessions {
		sessions[i] = fmt.Sprintf("chk-%d", i)
	}
	observers := startObservers(t, fc, sessions)

	var l ledger
	w := writer{client: fc.Client(), nodes: fc.nodes, policy: defaultWriterPolicy}
	stop := make(chan struct{})
	wctx, cancelWriters := context.WithCancel(context.Background())
	waitWriters := runWriters(wctx, cfg.Writers, seed, cfg.Think, w, sessions, &l, stop)
	var once sync.Once
	stopWriters := func() { once.Do(func() { close(stop); waitWriters(); cancelWriters() }) }
	t.Cleanup(stopWriters)

	faultCtx := timeout(t, 5*time.Minute)
	for i, f := range sch.Faults {
		sleep(faultCtx, f.Gap)
		if err := fc.apply(faultCtx, f); err != nil {
			t.Fatalf("fault %d (%v): %v", i, f, err)
		}
	}
	stopWriters()
	if err := fc.waitReady(timeout(t, time.Minute)); err != nil {
		t.Fatalf("after the last fault: %v", err)
	}

	// One last event per session: its turn completing with nothing pending
	// means the session ran everything it had accepted and is quiet, and
	// its events show a missed tail to the observers as a seq jump.
	w.rng = rand.New(rand.NewPCG(seed, uint64(cfg.Writers)))
	for _, id := range sessions {
		dl := w.deliver(timeout(t, time.Minute), id, "probe-"+id, eventText("probe-"+id))
		l.add(dl)
		if dl.Accepted == nil {
			t.Fatalf("%s: the last event was not accepted: %s", id, answersString(dl.Answers))
		}
	}
	data := runData{Histories: map[string][]proctest.HistoryMessage{}, Logs: map[string][]agent.Event{}}
	for i, id := range sessions {
		probe := eventText("probe-" + id)
		p := fc.nodes[i%len(fc.nodes)]
		waitView(t, fc.Cluster, p, id, "the last event's turn, nothing pending", func(v proctest.SessionView) bool {
			h := v.History
			return !v.Running && len(v.Pending) == 0 && len(h) >= 2 &&
				h[len(h)-2] == proctest.Message{Role: "user", Content: probe} &&
				h[len(h)-1] == proctest.Message{Role: "assistant", Content: probe}
		})
		h, err := fc.Client().GetHistory(timeout(t, 30*time.Second), p.URL(), id)
		if err != nil {
			t.Fatal(err)
		}
		data.Histories[id] = h
		data.Logs[id] = waitLogEnd(t, fc.Cluster, id, probe)
	}
	data.Observers = observers.finish(t, data.Logs)
	data.Deliveries = l.all()

	r := check(seed, data)
	t.Log(r)
	props := make([]string, 0, len(r.Violations))
	for p := range r.Violations {
		props = append(props, p)
	}
	sort.Strings(props)
	for _, p := range props {
		vs := r.Violations[p]
		shown := vs
		if len(shown) > 10 {
			shown = shown[:10]
		}
		t.Errorf("%s violated %d times (seed %d):\n\t%s", p, len(vs), seed, strings.Join(shown, "\n\t"))
	}
	return r
}

// waitLogEnd reads session id's replay log until it ends with the reply to
// text and turn_completed: the history shows a reply before the actor has
// logged its message and turn_completed.
func waitLogEnd(t *testing.T, c *proctest.Cluster, id, text string) []agent.Event {
	t.Helper()
	ctx := timeout(t, 30*time.Second)
	for {
		log := replayLog(t, c, id)
		if n := len(log); n >= 2 && log[n-1].Type == agent.TypeTurnCompleted && log[n-2].Type == agent.TypeMessage &&
			strings.Contains(string(log[n-2].Data), fmt.Sprintf("%q", text)) {
			return log
		}
		select {
		case <-ctx.Done():
			last := "nothing"
			if n := len(log); n > 0 {
				last = fmt.Sprintf("%v %s %s", log[n-1].Pos(), log[n-1].Type, log[n-1].Data)
			}
			t.Fatalf("session %s: the replay log never ended with the reply to %q; it ends with %s", id, text, last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// observerSet is every observer of a run, one per (node, session).
type observerSet struct {
	list   []*observer
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startObservers starts an observer of every session on every node. They
// stop when finish is called or the test ends.
func startObservers(t *testing.T, fc *faultCluster, sessions []string) *observerSet {
	ctx, cancel := context.WithCancel(context.Background())
	s := &observerSet{cancel: cancel}
	tok := fc.Token()
	for _, p := range fc.nodes {
		for _, id := range sessions {
			o := &observer{node: p, session: id, token: tok}
			s.list = append(s.list, o)
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				o.run(ctx)
			}()
		}
	}
	t.Cleanup(s.stop)
	return s
}

func (s *observerSet) stop() {
	s.cancel()
	s.wg.Wait()
}

// finish has every observer rejoin once more (a client that suspects a
// missed event may, README "Gaps") and waits until each holds its
// session's last logged position or a deadline passes; then it stops them
// and returns what each holds. An observer that never catches up is
// logged; the gap check reports what it lacks.
func (s *observerSet) finish(t *testing.T, logs map[string][]agent.Event) []observed {
	ctx := timeout(t, 20*time.Second)
	var wg sync.WaitGroup
	for _, o := range s.list {
		log := logs[o.session]
		if len(log) == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := o.rejoinAndWait(ctx, log[len(log)-1].Pos()); err != nil {
				t.Log(err)
			}
		}()
	}
	wg.Wait()
	s.stop()
	out := make([]observed, 0, len(s.list))
	for _, o := range s.list {
		out = append(out, o.snapshot())
	}
	return out
}

// summarize tabulates the runs' reports.
func summarize(rs []report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d checker runs:\n", len(rs))
	var failed []string
	for _, r := range rs {
		fmt.Fprintf(&b, "\t%v\n", r)
		if len(r.Violations) > 0 {
			failed = append(failed, strconv.FormatUint(r.Seed, 10))
		}
	}
	fmt.Fprintf(&b, "runs with violations: %d of %d (seeds %s)", len(failed), len(rs), strings.Join(failed, ", "))
	return b.String()
}
