package chaos

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relaygw/relay/internal/proctest"
)

// TestRollingRestart restarts three nodes one after the other (SIGTERM,
// drain, exit, start again under the same NODE_NAME and address) under a
// steady stream of events to 100 sessions. Clients send each event to some
// node and follow retry directives, moving on to another node when one
// does not answer at all. At the end every accepted event is in its
// session's history and replay log exactly once, no answer was an error
// without a retry directive, and no event waited a full lease TTL (the
// drain hands leases back instead of letting them lapse).
func TestRollingRestart(t *testing.T) {
	c := newCluster(t, map[string]string{"ECHO_DELAY": "1ms", "DRAIN_WINDOW": "5s"})
	nodes := []*proctest.Proc{c.Start("a", nil), c.Start("b", nil), c.Start("c", nil)}
	ttl := c.Duration("LEASE_TTL")
	const sessions, workers = 100, 12
	sessionID := func(i int) string { return fmt.Sprintf("roll-%03d", i) }

	type result struct {
		id, text string
		out      proctest.Outcome
	}
	var (
		mu        sync.Mutex
		results   []result
		completed atomic.Int64
		stop      = make(chan struct{})
		wg        sync.WaitGroup
	)
	client := c.Client()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				s := (w + n*workers) % sessions
				text := fmt.Sprintf("w%d-n%d", w, n)
				start := w + n
				pick := func(i int) string { return nodes[(start+i)%len(nodes)].URL() }
				out := client.Deliver(timeout(t, 30*time.Second), pick, sessionID(s), proctest.Event{Text: text, Key: text})
				mu.Lock()
				results = append(results, result{id: sessionID(s), text: text, out: out})
				mu.Unlock()
				completed.Add(1)
			}
		}()
	}
	// progress waits until the load has completed n more deliveries.
	progress := func(n int64) {
		t.Helper()
		target := completed.Load() + n
		ctx := timeout(t, 30*time.Second)
		for completed.Load() < target {
			select {
			case <-ctx.Done():
				t.Fatalf("load stalled at %d deliveries", completed.Load())
			case <-time.After(10 * time.Millisecond):
			}
		}
	}

	progress(300)
	for _, p := range nodes {
		termed := time.Now()
		if err := p.Terminate(); err != nil {
			t.Fatal(err)
		}
		st, err := p.Wait(timeout(t, 30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s drained and exited in %v (%v)", p.Name(), time.Since(termed).Round(time.Millisecond), st)
		if err := c.Restart(p); err != nil {
			t.Fatal(err)
		}
		progress(300)
	}
	close(stop)
	wg.Wait()

	// Tally: every delivery succeeded, none waited a full TTL.
	accepted := map[string]map[string]bool{} // session → texts
	var directives, noAnswer, duplicates int
	var slowest time.Duration
	for _, r := range results {
		if r.out.Err != nil {
			t.Errorf("%s %s: %v (attempts %+v)", r.id, r.text, r.out.Err, r.out.Attempts)
			continue
		}
		directives += r.out.Directives
		for _, a := range r.out.Attempts {
			if a.Err != nil {
				noAnswer++
			}
		}
		if r.out.Accepted.Duplicate {
			duplicates++
		}
		slowest = max(slowest, r.out.Elapsed)
		if accepted[r.id] == nil {
			accepted[r.id] = map[string]bool{}
		}
		accepted[r.id][r.text] = true
	}
	t.Logf("%d events to %d sessions: %d retry directives followed, %d attempts without an answer, %d answered as duplicates, slowest %v",
		len(results), len(accepted), directives, noAnswer, duplicates, slowest.Round(time.Millisecond))
	if slowest >= ttl {
		t.Errorf("an event waited %v, a full lease TTL is %v", slowest, ttl)
	}
	if t.Failed() {
		return
	}

	// Accounting: one more event per session makes every session's owner
	// run what earlier owners handed back; then each accepted event is in
	// the history and the replay log exactly once.
	for i := range sessions {
		id := sessionID(i)
		out := client.Deliver(timeout(t, 30*time.Second), func(k int) string { return nodes[(i+k)%len(nodes)].URL() }, id,
			proctest.Event{Text: "final", Key: "final"})
		if out.Err != nil {
			t.Fatalf("%s final event: %v", id, out.Err)
		}
	}
	for i := range sessions {
		id := sessionID(i)
		want := len(accepted[id]) + 1
		view := waitView(t, c, nodes[i%len(nodes)], id, fmt.Sprintf("%d turns", want), turnsDone(want))
		counts := userCounts(view.History)
		logged := loggedUserEvents(replayLog(t, c, id))
		for text := range accepted[id] {
			if counts[text] != 1 {
				t.Errorf("%s: accepted event %s is %d times in the history", id, text, counts[text])
			}
			if len(logged[text]) != 1 {
				t.Errorf("%s: accepted event %s is %d times in the replay log", id, text, len(logged[text]))
			}
		}
		if len(counts) != want {
			t.Errorf("%s: history holds %d distinct user events, %d were accepted", id, len(counts), want)
		}
	}
}
