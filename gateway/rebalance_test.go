package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"net/http/httptest"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/testkit/phxtest"
	"github.com/relaygw/relay/internal/testkit/testenv"
	"github.com/relaygw/relay/internal/trace"
	"github.com/relaygw/relay/muster"
	"go.uber.org/zap/zaptest"
)

// addWith starts one more node in the cluster like add, with mut applied to
// its configuration last.
func (c *testCluster) addWith(name string, agent agent.Agent, mut func(*Config)) (*Node, *httptest.Server) {
	t := c.t
	t.Helper()
	cfg := DefaultConfig()
	cfg.NodeName = name
	cfg.JWTSecret = testSecret
	cfg.APIKeys = []string{testAPIKey}
	cfg.AdminToken = testAdmin
	cfg.EchoDelay = 5 * time.Millisecond
	cfg.DatabaseURL = c.dbURL
	cfg.RedisURL = testenv.RedisServerURL()
	cfg.NATSURL = testenv.NATSURL()
	cfg.Cluster = c.cluster
	cfg.Muster = fastMuster()
	if mut != nil {
		mut(&cfg)
	}
	log := zaptest.NewLogger(t)
	if c.observe != nil {
		log = zap.New(zapcore.NewTee(log.Core(), c.observe))
	}
	opts := Options{Logger: log.Named(name), Tracer: c.tr, Agent: agent}
	if c.tracing != nil {
		opts.TracerProvider = c.tracing(name)
	}
	n, err := New(context.Background(), cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(n.Handler())
	t.Cleanup(func() {
		srv.Close()
		n.Close()
	})
	c.nodes = append(c.nodes, n)
	c.srvs = append(c.srvs, srv)
	return n, srv
}

// remove drops node i from the cluster's list (after it has left).
func (c *testCluster) remove(i int) {
	c.nodes = slices.Delete(c.nodes, i, i+1)
	c.srvs = slices.Delete(c.srvs, i, i+1)
}

func posOf(ev phxtest.SessionEvent) agent.Position {
	return agent.Position{Epoch: ev.Epoch, Seq: ev.Seq}
}

func seqsOf(evs []phxtest.SessionEvent) []int64 {
	out := make([]int64, len(evs))
	for i, ev := range evs {
		out[i] = ev.Seq
	}
	return out
}

func equalSeqs(a, b []phxtest.SessionEvent) bool { return slices.Equal(seqsOf(a), seqsOf(b)) }

// assertContiguous fails unless each event's seq is the previous one's plus
// one (README "Gaps": seq is contiguous within a session).
func assertContiguous(t *testing.T, evs []phxtest.SessionEvent) {
	t.Helper()
	for i := 1; i < len(evs); i++ {
		if evs[i].Seq != evs[i-1].Seq+1 {
			t.Fatalf("events not contiguous at %d: %v then %v (all: %v)", i, posOf(evs[i-1]), posOf(evs[i]), seqsOf(evs))
		}
	}
}

// stepAgent streams one delta per value received on steps and finishes the
// turn when steps is closed, so a test decides how long a turn streams.
type stepAgent struct{ steps chan struct{} }

func (a stepAgent) Run(ctx context.Context, _ agent.Turn, emit agent.Emit) (agent.Message, error) {
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return agent.Message{}, ctx.Err()
		case _, ok := <-a.steps:
			if !ok {
				return agent.Message{Role: "assistant", Content: "done"}, nil
			}
			if err := emit(ctx, agent.TypeDelta, map[string]string{"text": "s" + strconv.Itoa(i) + " "}); err != nil {
				return agent.Message{}, err
			}
		}
	}
}

// gapFollower is a client that keeps its stream whole the way the README
// ("Gaps") tells clients to: it keeps the last contiguous event; an event
// whose seq is more than one past it is a gap, and the client rejoins the
// topic (phx_leave, then phx_join with last_event = the last contiguous
// event), drops whatever arrives before the new join reply, and goes on with
// the replay and the live stream that follow it.
type gapFollower struct {
	s     *phxtest.Socket
	topic string

	last    agent.Position
	events  []phxtest.SessionEvent // contiguous, after the initial join
	gaps    [][2]agent.Position
	rejoins []map[string]any // join replies of the rejoins
	dups    []agent.Position // events at or before last, after a join reply
}

// follow reads until the stream holds a turn_completed, rejoining on gaps.
func (f *gapFollower) follow(ctx context.Context) error {
	awaiting := "" // ref of a rejoin in flight
	for {
		fr, err := f.s.Read(ctx)
		if err != nil {
			return fmt.Errorf("%s: read: %w (have %v, gaps %v)", f.topic, err, seqsOf(f.events), f.gaps)
		}
		if awaiting != "" {
			if fr.IsReply(awaiting) {
				var r struct {
					Status   string         `json:"status"`
					Response map[string]any `json:"response"`
				}
				_ = json.Unmarshal(fr.Payload, &r)
				if r.Status != "ok" {
					return fmt.Errorf("%s: rejoin refused: %s", f.topic, fr.Payload)
				}
				f.rejoins = append(f.rejoins, r.Response)
				awaiting = ""
			}
			continue // the old join's frames, up to the new join's reply
		}
		ev, ok := fr.SessionEvent()
		if !ok {
			continue
		}
		switch {
		case ev.Seq <= f.last.Seq:
			f.dups = append(f.dups, posOf(ev))
		case ev.Seq == f.last.Seq+1:
			f.events = append(f.events, ev)
			f.last = posOf(ev)
			if ev.Type == agent.TypeTurnCompleted {
				return nil
			}
		default:
			f.gaps = append(f.gaps, [2]agent.Position{f.last, posOf(ev)})
			if awaiting, err = f.rejoin(ctx); err != nil {
				return err
			}
		}
	}
}

func (f *gapFollower) rejoin(ctx context.Context) (string, error) {
	if _, err := f.s.Send(ctx, "", f.topic, "phx_leave", map[string]any{}); err != nil {
		return "", err
	}
	return f.s.Send(ctx, "", f.topic, "phx_join", map[string]any{"last_event": f.last})
}

// waitReadyAmong waits until every one of nodes is ready with one view hash
// and a view of exactly those nodes.
func waitReadyAmong(t *testing.T, nodes []*Node) {
	t.Helper()
	want := make([]string, len(nodes))
	for i, n := range nodes {
		want[i] = n.name
	}
	slices.Sort(want)
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok := true
		for _, n := range nodes {
			if n.scope.Status() != muster.Ready || n.scope.ViewHash() != nodes[0].scope.ViewHash() || !slices.Equal(n.scope.Members(), want) {
				ok = false
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			for _, n := range nodes {
				t.Logf("%s: %v %x %v", n.name, n.scope.Status(), n.scope.ViewHash(), n.scope.Members())
			}
			t.Fatalf("nodes %v did not become ready", want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRebalanceGapClosedByRejoin (acceptance 3): a turn streams from its
// owner a to sockets on a and b while node d joins, b's NATS connection is
// cut for a moment (forcing a gap: a publishes while b cannot receive), and
// node cc leaves. Each socket's client keeps its stream whole by the README's
// rule: a seq jump is a gap, and a rejoin with last_event = the last
// contiguous event replays the missing events. Once the cluster is ready
// again the turn ends, and every socket that stayed joined holds every event
// published, exactly as the replay log has them: no gap, no duplicate. The
// socket on b must have learned of at least one gap and closed it by rejoin.
func TestRebalanceGapClosedByRejoin(t *testing.T) {
	natsProxy := testenv.Proxy(t, mustHostPort(t, testenv.NATSURL()))
	steps := make(chan struct{})
	ag := stepAgent{steps: steps}
	c := newTestCluster(t)
	c.addWith("a", ag, nil)
	c.addWith("b", ag, func(cfg *Config) { cfg.NATSURL = natsProxy.URL(testenv.NATSURL()) })
	c.addWith("cc", ag, nil)
	c.waitReady()
	a := c.nodes[0]
	tok := c.token()

	followers := make([]*gapFollower, 2)
	for i, srv := range c.srvs[:2] {
		ws := phxtest.DialT(t, phxtest.URL(srv.URL, tok))
		r := ws.Join("session:rb", map[string]any{"last_event": map[string]any{"epoch": 0, "seq": 0}})
		followers[i] = &gapFollower{s: ws.S, topic: "session:rb",
			last: agent.Position{Epoch: int64(r["epoch"].(float64)), Seq: int64(r["seq"].(float64))}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan error, len(followers))
	for _, f := range followers {
		go func() { done <- f.follow(ctx) }()
	}

	post(t, c.srvs[0], "rb", "stream") // a owns rb; the turn waits for steps
	step := func(n int) {
		t.Helper()
		for range n {
			select {
			case steps <- struct{}{}:
			case <-ctx.Done():
				t.Fatal("the turn stopped taking steps")
			}
		}
	}
	// The turn streams throughout: one delta per step, stepped between
	// every change of the cluster below. The ticker only paces the stream
	// (a rebalance takes a few Muster rounds), so the replay log's 1,000
	// events still reach back to the start of the turn.
	pace := time.NewTicker(5 * time.Millisecond)
	defer pace.Stop()
	pump := func(until func() bool) {
		t.Helper()
		for !until() {
			step(1)
			<-pace.C
		}
	}
	step(5)

	// A node joins while the turn streams.
	c.addWith("d", ag, nil)
	pump(func() bool { return a.scope.Status() == muster.Ready && len(a.scope.Members()) == 4 })

	// b is cut off from NATS: what a publishes now cannot reach b's socket.
	lastSeq := func() any {
		evs := c.tr.Filter(trace.Kind("session.emit"))
		return evs[len(evs)-1].Get("seq")
	}
	cutAt := lastSeq()
	natsProxy.Cut()
	step(10)
	natsProxy.Restore()
	t.Logf("b was cut off from NATS after seq %v until seq %v", cutAt, lastSeq())

	// Another node leaves while the turn streams.
	go func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer dcancel()
		_ = c.nodes[2].Drain(dctx)
		c.tr.Emit("test_node_left")
	}()
	pump(func() bool { return c.tr.Count(trace.Kind("test_node_left")) > 0 })
	c.nodes[2].Close()
	c.remove(2)
	pump(func() bool { return readyAmong(c.nodes) })
	waitReadyAmong(t, c.nodes)

	// The cluster is ready again: a few more live events reach every
	// socket (b learns of its gap from the first of them), then the turn ends.
	step(10)
	close(steps)
	for range followers {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}

	logged, complete, err := a.replay.Since(ctx, "rb", agent.Position{}, 0)
	if err != nil || !complete {
		t.Fatalf("replay log of rb: complete %v, %v", complete, err)
	}
	var want []int64
	for _, ev := range logged {
		want = append(want, ev.Seq)
	}
	for i, f := range followers {
		name := c.nodes[i].name
		if got := seqsOf(f.events); !slices.Equal(got, want) {
			t.Fatalf("socket on %s holds seqs %v, want every published event %v (gaps %v)", name, got, want, f.gaps)
		}
		if len(f.dups) != 0 {
			t.Errorf("socket on %s got duplicates %v after its joins (seam at %v)", name, f.dups, f.rejoins)
		}
		for _, r := range f.rejoins {
			if r["recovered"] != true {
				t.Errorf("rejoin on %s: %v", name, r)
			}
		}
		t.Logf("socket on %s: %d events, gaps %v, rejoins %v", name, len(f.events), f.gaps, f.rejoins)
	}
	fb := followers[1]
	if len(fb.gaps) == 0 || len(fb.rejoins) != len(fb.gaps) {
		t.Fatalf("socket on b saw gaps %v and rejoined %d times; the NATS cut must show as a gap closed by a rejoin", fb.gaps, len(fb.rejoins))
	}
	var replayed float64
	for _, r := range fb.rejoins {
		replayed += r["replayed"].(float64)
	}
	if replayed < 9 {
		t.Fatalf("b's rejoins replayed %v events, want at least the 9 published while b was cut off", replayed)
	}
	if f := c.tr.Failures(); len(f) != 0 {
		t.Fatal(f)
	}
}

// readyAmong reports whether nodes share one ready view of exactly them.
func readyAmong(nodes []*Node) bool {
	for _, n := range nodes {
		if n.scope.Status() != muster.Ready || n.scope.ViewHash() != nodes[0].scope.ViewHash() || len(n.scope.Members()) != len(nodes) {
			return false
		}
	}
	return true
}

func mustHostPort(t *testing.T, rawURL string) string {
	t.Helper()
	hp, err := testenv.HostPort(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	return hp
}
