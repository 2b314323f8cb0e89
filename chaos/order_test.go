package chaos

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/relaygw/relay/internal/phxtest"
	"github.com/relaygw/relay/internal/proctest"
	"github.com/relaygw/relay/session"
)

// TestOrderAcrossRebalance: three nodes, a session owned by a, an
// observer on every node; 300 events are posted to b at about 200 a second
// while a fourth node joins the cluster and, later, drains and leaves, so
// senders flood while Muster rebalances and then route again. Every
// observer follows the client rule of README "Gaps". Per observer, every
// join's pushes (its replay, then its live events) strictly increase in
// (epoch, seq) — a node never hands a socket an event at or below one it
// already handed it — and, at the end, the observers on the nodes that
// stayed hold exactly the replay log: every gap was closed by a rejoin.
func TestOrderAcrossRebalance(t *testing.T) {
	const posts = 300
	c := newCluster(t, map[string]string{"REPLAY_MAX_LEN": "5000", "SOCKET_QUEUE": "5000"})
	a, b, cc := c.Start("a", nil), c.Start("b", nil), c.Start("c", nil)
	id := "order-1"
	mustAccept(t, c, a, id, proctest.Event{Text: "first"}) // a owns the session
	waitLogEnd(t, c, id, "first")

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	tok := c.Token()
	observe := func(ctx context.Context, p *proctest.Proc) *observer {
		o := &observer{node: p, session: id, token: tok}
		wg.Add(1)
		go func() {
			defer wg.Done()
			o.run(ctx)
		}()
		return o
	}
	waitJoined := func(o *observer) {
		t.Helper()
		wctx := timeout(t, 30*time.Second)
		for {
			o.mu.Lock()
			joins := o.joins
			o.mu.Unlock()
			if joins > 0 {
				return
			}
			select {
			case <-wctx.Done():
				t.Fatalf("observer on %s never joined", o.node.Name())
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	stable := []*observer{observe(ctx, a), observe(ctx, b), observe(ctx, cc)}
	for _, o := range stable {
		waitJoined(o)
	}

	d := c.Add("d", nil)
	dctx, dcancel := context.WithCancel(ctx)
	defer dcancel()
	dObserved := make(chan *observer, 1)
	dUp := make(chan error, 1)
	dGone := make(chan error, 1)

	// The writer: one event every 5 ms to b, re-sent while the session is
	// busy (429) or moving (503 with a retry directive).
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	client := c.Client()
	last := ""
	for i := 1; i <= posts; i++ {
		<-tick.C
		switch i {
		case posts / 3:
			go func() { dUp <- c.Restart(d) }() // the fourth node joins
		case 2 * posts / 3:
			if err := <-dUp; err != nil {
				t.Fatalf("node d did not start: %v", err)
			}
			go func() {
				if err := d.Terminate(); err != nil { // d drains and leaves
					dGone <- err
					return
				}
				_, err := d.Wait(timeout(t, 30*time.Second))
				dGone <- err
			}()
		}
		if i == posts/3+10 {
			// Observe on d as soon as it is up (the writer goes on).
			go func() {
				if err := d.WaitReady(timeout(t, 30*time.Second)); err == nil {
					dObserved <- observe(dctx, d)
					return
				}
				dObserved <- nil
			}()
		}
		last = fmt.Sprintf("e%d", i)
		ev := proctest.Event{Text: last, Key: last}
		for {
			r, err := client.PostEvent(timeout(t, 30*time.Second), b.URL(), id, ev)
			if err != nil {
				t.Fatalf("post %s: %v", last, err)
			}
			if r.Accepted != nil {
				break
			}
			if r.Status != http.StatusTooManyRequests && (r.Status != http.StatusServiceUnavailable || r.Retry == nil) {
				t.Fatalf("post %s: %v", last, r)
			}
			time.Sleep(10 * time.Millisecond) // the session's inbox is full, or it is moving
		}
	}
	if err := <-dGone; err != nil {
		t.Fatalf("node d did not leave: %v", err)
	}
	dcancel()
	waitLogEnd(t, c, id, last)
	// A gap at the very end of a turn shows with the next event (README
	// "Gaps"): one more turn reveals any.
	mustAccept(t, c, b, id, proctest.Event{Text: "end"})
	log := waitLogEnd(t, c, id, "end")
	top := log[len(log)-1].Pos()

	wctx := timeout(t, 60*time.Second)
	for _, o := range stable {
		for o.top().Less(top) {
			select {
			case <-wctx.Done():
				t.Fatalf("observer on %s holds up to %v, the log ends at %v", o.node.Name(), o.top(), top)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	cancel()
	wg.Wait()

	all := append([]*observer{}, stable...)
	dObs := <-dObserved
	if dObs != nil {
		all = append(all, dObs)
	}
	for _, o := range all {
		o.mu.Lock()
		streams, jumps, joins, stale, holes := o.streams, o.jumps, o.joins, o.stale, o.holes
		record := append([]phxtest.SessionEvent(nil), o.record...)
		o.mu.Unlock()
		pushes := 0
		for j, s := range streams {
			pushes += len(s)
			for k := 1; k < len(s); k++ {
				if prev, cur := pos(s[k-1]), pos(s[k]); !prev.Less(cur) {
					t.Errorf("observer on %s, join %d: push %d at %v after %v: not increasing", o.node.Name(), j+1, k, cur, prev)
				}
			}
		}
		t.Logf("observer on %s: %d joins, %d pushes, %d seq jumps closed by a rejoin, %d stale pushes, %d holes", o.node.Name(), joins, pushes, jumps, stale, len(holes))
		if o == dObs {
			continue // it left with d; its order is checked above
		}
		if len(holes) > 0 {
			t.Errorf("observer on %s kept holes the replay could not fill: %v", o.node.Name(), holes)
		}
		if err := sameAsLog(record, log); err != nil {
			t.Errorf("observer on %s: %v", o.node.Name(), err)
		}
	}
	for _, p := range []*proctest.Proc{a, b, cc} {
		t.Logf("%s: reorder held %v, dropped %v, gaps %v", p.Name(),
			metric(t, p, "relay_reorder_held_total"), metric(t, p, "relay_reorder_dropped_total"), metric(t, p, "relay_reorder_gaps_total"))
	}
}

// sameAsLog reports how record differs from the replay log's positions.
func sameAsLog(record []phxtest.SessionEvent, log []session.Event) error {
	if len(record) != len(log) {
		return fmt.Errorf("holds %d events, the log %d", len(record), len(log))
	}
	for i := range record {
		if pos(record[i]) != log[i].Pos() || record[i].Type != log[i].Type {
			return fmt.Errorf("event %d is %v %s, the log's is %v %s", i, pos(record[i]), record[i].Type, log[i].Pos(), log[i].Type)
		}
	}
	return nil
}
