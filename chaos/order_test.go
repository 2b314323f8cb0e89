package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/testkit/phxtest"
	"github.com/relaygw/relay/internal/testkit/proctest"
	"github.com/relaygw/relay/muster/ring"
	"github.com/relaygw/relay/session"
)

// TestOrderAcrossRebalance: three nodes, each reaching NATS through its
// own proxy; the session topic's router gets 30 ms of latency on what NATS
// brings it, the session is owned by another node, and an observer joins
// on every node. 300 events are posted to the third node at about 200 a
// second while a fourth node joins the cluster and, later, drains and
// leaves, so senders flood or send straight to every member while Muster
// rebalances, then route again. Every observer follows the client rule of
// README "Gaps". Per observer, every join's pushes (its replay, then its
// live events) strictly increase in (epoch, seq) — a node never hands a
// socket an event at or below one it already handed it — and, at the end,
// the observers on the nodes that stayed hold exactly the replay log: every
// gap was closed by a rejoin. The nodes' reorder counters are logged.
func TestOrderAcrossRebalance(t *testing.T) {
	const posts = 300
	fc := startFaultCluster(t, 3, map[string]string{"REPLAY_MAX_LEN": "5000", "SOCKET_QUEUE": "5000"})
	c := fc.Cluster
	// A session whose topic's router moves to the fourth node when it
	// joins: events routed through the old, delayed router are still on
	// their way when the next ones, routed through the new one, arrive.
	id := ""
	for i := 1; id == ""; i++ {
		cand := fmt.Sprintf("order-%d", i)
		if ring.New([]string{"a", "b", "c", "d"}, 0).Find(session.Topic(cand)) == "d" {
			id = cand
		}
	}

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
	var stable []*observer
	for _, p := range fc.nodes {
		stable = append(stable, observe(ctx, p))
	}
	for _, o := range stable {
		waitJoined(o)
	}
	// The topic's router gets 30 ms of latency on everything NATS brings
	// it, so an event routed through it arrives well after the next one
	// routed through the fourth node once it joined (or sent straight to
	// every member while Muster rebalances). The session's owner is another
	// node, and the writer posts to the third.
	r := topicRouter(t, fc, session.Topic(id))
	if want := ring.New([]string{"a", "b", "c"}, 0).Find(session.Topic(id)); fc.nodes[r].Name() != want {
		t.Fatalf("router of %s is %s, the ring says %s", id, fc.nodes[r].Name(), want)
	}
	var owner, writeTo *proctest.Proc
	for i, p := range fc.nodes {
		switch {
		case i == r:
		case owner == nil:
			owner = p
		default:
			writeTo = p
		}
	}
	fc.nats[r].SetDelay(30 * time.Millisecond)
	mustAccept(t, c, owner, id, proctest.Event{Text: "first"})
	waitLogEnd(t, c, id, "first")
	t.Logf("router %s (delayed), owner %s, posts to %s", fc.nodes[r].Name(), owner.Name(), writeTo.Name())

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
			r, err := client.PostEvent(timeout(t, 30*time.Second), writeTo.URL(), id, ev)
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
	mustAccept(t, c, writeTo, id, proctest.Event{Text: "end"})
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
	for _, p := range fc.nodes {
		t.Logf("%s: reorder held %v, dropped %v, gaps %v", p.Name(),
			metric(t, p, "relay_reorder_held_total"), metric(t, p, "relay_reorder_dropped_total"), metric(t, p, "relay_reorder_gaps_total"))
	}
}

// topicRouter returns the index in fc.nodes of topic's router: the node
// whose Muster occupancy table holds the topic's rows, once exactly one
// does.
func topicRouter(t *testing.T, fc *faultCluster, topic string) int {
	t.Helper()
	ctx := timeout(t, 30*time.Second)
	for {
		found := -1
		n := 0
		for i, p := range fc.nodes {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.URL()+"/admin/muster", nil)
			req.Header.Set("Authorization", "Bearer "+fc.AdminToken)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				continue
			}
			var d struct {
				Muster struct {
					Occupancy map[string][]string `json:"occupancy"`
				} `json:"muster"`
			}
			err = json.NewDecoder(resp.Body).Decode(&d)
			resp.Body.Close()
			if err == nil && len(d.Muster.Occupancy[topic]) == len(fc.nodes) {
				found, n = i, n+1
			}
		}
		if n == 1 {
			return found
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no single router holds %s's rows", topic)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// sameAsLog reports how record differs from the replay log's positions.
func sameAsLog(record []phxtest.SessionEvent, log []agent.Event) error {
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
