package gateway

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/testkit/phxtest"
	"github.com/relaygw/relay/internal/testkit/testenv"
	"github.com/relaygw/relay/session"
)

// TestRedisOutage: two cluster nodes whose replay log (Redis) sits behind a
// proxy. With Redis cut, turns still run and stream live to a socket on the
// other node, joins that ask for replay answer recovered:false with reason
// replay_unavailable (a join without a cursor is unaffected), and both nodes
// keep serving. With Redis back, replay works again: a join after a
// post-outage event replays exactly what followed it, and a join from before
// the outage reports that the log no longer reaches back (the events of the
// outage were never logged), never a silent gap.
func TestRedisOutage(t *testing.T) {
	hostport, err := testenv.HostPort(testenv.RedisServerURL())
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.Proxy(t, hostport)
	c := newTestCluster(t)
	viaProxy := func(cfg *Config) { cfg.RedisURL = proxy.URL(testenv.RedisServerURL()) }
	c.addWith("a", nil, viaProxy)
	c.addWith("b", nil, viaProxy)
	c.waitReady()
	srvA, srvB := c.srvs[0], c.srvs[1]
	tok := c.token()

	watcher := phxtest.DialT(t, phxtest.URL(srvB.URL, tok))
	watcher.Join("session:o1", map[string]any{})
	post(t, srvA, "o1", "before the outage") // a owns o1
	before := watcher.EventsUntil(agent.TypeTurnCompleted)
	assertContiguous(t, before)
	beforeLast := posOf(before[len(before)-1])

	// Sockets for the joins during the outage are opened before it: a node
	// whose replay store check fails refuses new sockets (below).
	type pair struct{ cursor, plain *phxtest.T }
	var open []pair
	for _, srv := range c.srvs {
		open = append(open, pair{phxtest.DialT(t, phxtest.URL(srv.URL, tok)), phxtest.DialT(t, phxtest.URL(srv.URL, tok))})
	}

	// Redis down: the turn still streams live, across nodes.
	proxy.Cut()
	post(t, srvA, "o1", "during the outage")
	during := watcher.EventsUntil(agent.TypeTurnCompleted)
	assertContiguous(t, append(append([]phxtest.SessionEvent(nil), before...), during...))
	if len(during) != 7 {
		t.Fatalf("watcher got %d live events during the outage, want 7 (user_event, turn_started, 3 deltas, message, turn_completed)", len(during))
	}
	duringLast := posOf(during[len(during)-1])

	for i, srv := range c.srvs {
		r := open[i].cursor.Join("session:o1", map[string]any{"last_event": beforeLast})
		if r["recovered"] != false || r["reason"] != "replay_unavailable" || r["replayed"] != float64(0) {
			t.Fatalf("join with last_event on %s during the outage: %v, want recovered:false reason replay_unavailable", c.nodes[i].name, r)
		}
		plain := open[i].plain.Join("session:o1", map[string]any{})
		if plain["recovered"] != true {
			t.Fatalf("join without last_event on %s during the outage: %v", c.nodes[i].name, plain)
		}
		if status, _, body := do(t, "GET", srv.URL+"/healthz", "", "", ""); status != 200 {
			t.Fatalf("healthz on %s during the outage: %d %v", c.nodes[i].name, status, body)
		}
	}
	if n := c.nodes[0].manager.Stats().LogAppendErrors; n < uint64(len(during)) {
		t.Fatalf("a counted %d replay append errors, want at least %d", n, len(during))
	}
	// Once the replay store check has failed, new sockets are refused.
	waitReadyz(t, srvB.URL, http.StatusServiceUnavailable, "replay_store:")
	status, h, body := waitRefused(t, srvB.URL, tok)
	checkNotReadyRefusal(t, "WebSocket upgrade during the Redis outage", status, h, body, "replay_store:")

	// Redis back: new events are logged and replayed again, and the nodes
	// take new sockets once ready.
	proxy.Restore()
	for _, srv := range c.srvs {
		waitReadyz(t, srv.URL, http.StatusOK, "")
	}
	post(t, srvA, "o1", "after it")
	afterEvs := watcher.EventsUntil(agent.TypeTurnCompleted)
	assertContiguous(t, append(append([]phxtest.SessionEvent(nil), during...), afterEvs...))
	for i, srv := range c.srvs {
		ws := phxtest.DialT(t, phxtest.URL(srv.URL, tok))
		r := ws.Join("session:o1", map[string]any{"last_event": duringLast})
		if r["recovered"] != true || r["replayed"] != float64(len(afterEvs)) {
			t.Fatalf("join from the last outage event on %s after restore: %v, want recovered:true replayed %d", c.nodes[i].name, r, len(afterEvs))
		}
		got := ws.Barrier()
		if !equalSeqs(got, afterEvs) {
			t.Fatalf("replay on %s after restore: %v, want %v", c.nodes[i].name, seqsOf(got), seqsOf(afterEvs))
		}

		old := phxtest.DialT(t, phxtest.URL(srv.URL, tok)).Join("session:o1", map[string]any{"last_event": beforeLast})
		if old["recovered"] != false || old["reason"] != "replay_truncated" {
			t.Fatalf("join from before the outage on %s: %v, want recovered:false reason replay_truncated (the outage's events are not in the log)", c.nodes[i].name, old)
		}
	}
	if f := c.tr.Failures(); len(f) != 0 {
		t.Fatal(f)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if st, owner := c.nodes[1].view(ctx, "o1", session.HistoryQuery{}); owner != c.nodes[0].Owner() || st.Seq != afterEvs[len(afterEvs)-1].Seq {
		t.Fatalf("b's view of o1: %+v owned by %q", st, owner)
	}
}
