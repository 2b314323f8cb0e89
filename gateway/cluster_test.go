package gateway

import (
	"context"
	"fmt"
	"go.uber.org/zap/zapcore"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/testkit/phxtest"
	"github.com/relaygw/relay/internal/testkit/testenv"
	"github.com/relaygw/relay/internal/trace"
	"github.com/relaygw/relay/muster"
	oteltrace "go.opentelemetry.io/otel/trace"
)

// fastMuster is a Muster timing preset for tests.
func fastMuster() muster.Config {
	return muster.Config{
		ViewHeartbeat: 200 * time.Millisecond, PingInterval: 50 * time.Millisecond,
		PeerDownAfter: time.Second, RPCTimeout: 500 * time.Millisecond, GatherTimeout: 2 * time.Second,
		Cooldown: 200 * time.Millisecond, VacantFlush: 100 * time.Millisecond,
		SingletonPromotion: 600 * time.Millisecond, DrainSettle: 100 * time.Millisecond,
	}
}

// testCluster is several in-process nodes, each with its own NATS
// connection, on one Postgres schema, one Redis key prefix and one NATS
// subject prefix.
type testCluster struct {
	t       *testing.T
	dbURL   string
	cluster string
	tr      *trace.Tracer
	nodes   []*Node
	srvs    []*httptest.Server
	observe zapcore.Core // when set, every node added also logs here
	// tracing, when set, gives each node added its OpenTelemetry
	// provider (Options.TracerProvider).
	tracing func(name string) oteltrace.TracerProvider
}

func newTestCluster(t *testing.T, names ...string) *testCluster {
	t.Helper()
	c := &testCluster{t: t, dbURL: testenv.PostgresURL(t), cluster: testenv.NATSPrefix(t), tr: trace.New()}
	rc, _ := testenv.Redis(t)
	t.Cleanup(func() {
		ctx := context.Background()
		keys, _ := rc.Keys(ctx, c.cluster+":*").Result()
		if len(keys) > 0 {
			rc.Del(ctx, keys...)
		}
	})
	for _, name := range names {
		c.add(name, nil)
	}
	return c
}

func (c *testCluster) add(name string, agent agent.Agent) (*Node, *httptest.Server) {
	c.t.Helper()
	return c.addWith(name, agent, nil)
}

// waitReady waits until every node's Muster scope is ready with one view
// hash and a view of all the nodes.
func (c *testCluster) waitReady() {
	c.t.Helper()
	waitReadyAmong(c.t, c.nodes)
}

func (c *testCluster) token() string {
	tok, err := c.nodes[0].Auth().Mint("u", []string{"*"}, time.Hour)
	if err != nil {
		c.t.Fatal(err)
	}
	return tok
}

func post(t *testing.T, srv *httptest.Server, id, text string) map[string]any {
	t.Helper()
	status, _, body := do(t, "POST", srv.URL+"/api/sessions/"+id+"/events", testAPIKey, "", fmt.Sprintf(`{"data":{"text":%q}}`, text))
	if status != 202 {
		t.Fatalf("POST %s to %s: %d %v", id, srv.URL, status, body)
	}
	return body
}

func assertIncreasing(t *testing.T, evs []phxtest.SessionEvent) {
	t.Helper()
	for i := 1; i < len(evs); i++ {
		a, b := agent.Position{Epoch: evs[i-1].Epoch, Seq: evs[i-1].Seq}, agent.Position{Epoch: evs[i].Epoch, Seq: evs[i].Seq}
		if !a.Less(b) {
			t.Fatalf("events not strictly increasing at %d: %v then %v", i, a, b)
		}
	}
}

// TestClusterObserveFromAnyNode: a socket on A watches session s1 owned by B
// while events are POSTed on C (forwarded to B). A second socket on C joins
// mid-turn with the last event it saw and gets replay then live, with no gap
// and no duplicate.
func TestClusterObserveFromAnyNode(t *testing.T) {
	observeFromAnyNode(t, newTestCluster(t, "a", "b", "cc"))
}

// observeFromAnyNode is TestClusterObserveFromAnyNode's body, on a cluster of
// three nodes (any PUBSUB_ROUTING).
func observeFromAnyNode(t *testing.T, c *testCluster) {
	t.Helper()
	c.waitReady()
	tok := c.token()
	wsA := phxtest.DialT(t, phxtest.URL(c.srvs[0].URL, tok))
	wsA.Join("session:s1", map[string]any{})

	post(t, c.srvs[1], "s1", "owned by b") // B claims the lease
	first := wsA.EventsUntil(agent.TypeTurnCompleted)
	if len(first) < 5 || first[0].Type != agent.TypeUserEvent {
		t.Fatalf("A saw %+v", first)
	}

	words := strings.Fields(strings.Repeat("w ", 40))
	for i := range words {
		words[i] = fmt.Sprintf("w%d", i)
	}
	acc := post(t, c.srvs[2], "s1", strings.Join(words, " ")) // forwarded to B
	if acc["epoch"] != float64(1) {
		t.Fatalf("forwarded event accepted at %v, want epoch 1 (B's lease)", acc)
	}
	if owner := c.nodes[1].manager.Sessions(); len(owner) != 1 {
		t.Fatalf("B runs %v, want s1", owner)
	}
	if live := c.nodes[2].manager.Sessions(); len(live) != 0 {
		t.Fatalf("C runs %v; the event must run on the owner", live)
	}

	// A sees the turn start; a late joiner on C picks up from there.
	var seen []phxtest.SessionEvent
	for len(seen) < 4 {
		seen = append(seen, wsA.EventsUntil(agent.TypeDelta)...)
	}
	last := seen[len(seen)-1]
	wsC := phxtest.DialT(t, phxtest.URL(c.srvs[2].URL, tok))
	reply := wsC.Join("session:s1", map[string]any{"last_event": map[string]any{"epoch": last.Epoch, "seq": last.Seq}})
	if reply["recovered"] != true {
		t.Fatalf("join reply %v", reply)
	}
	restA := wsA.EventsUntil(agent.TypeTurnCompleted)
	restC := wsC.EventsUntil(agent.TypeTurnCompleted)
	fullA := append(seen, restA...)
	assertIncreasing(t, append(first, fullA...))
	assertIncreasing(t, restC)
	// C's stream (replay + live) is exactly A's stream after the join point.
	var wantC []int64
	for _, ev := range fullA {
		if last.Seq < ev.Seq {
			wantC = append(wantC, ev.Seq)
		}
	}
	var gotC []int64
	for _, ev := range restC {
		gotC = append(gotC, ev.Seq)
	}
	if !slices.Equal(gotC, wantC) {
		t.Fatalf("late joiner on C got seqs %v, want %v (no gap, no duplicate)", gotC, wantC)
	}
	var deltas int
	for _, ev := range fullA {
		if ev.Type == agent.TypeDelta {
			deltas++
		}
	}
	if deltas != len(words) {
		t.Fatalf("A saw %d deltas, want %d", deltas, len(words))
	}
}

// TestRestartedNodeDoesNotForwardToItself: a process restarted under a node
// name whose predecessor still holds a session's lease answers with a retry
// directive at once (the predecessor is gone) instead of forwarding the event
// to its own subject.
func TestRestartedNodeDoesNotForwardToItself(t *testing.T) {
	c := newTestCluster(t, "a", "b")
	c.waitReady()
	post(t, c.srvs[0], "p1", "held by the first a")
	// The first "a" stops without handing the lease back (a crash).
	c.srvs[0].Close()
	c.nodes[0].Close()
	a2, srv2 := c.add("a", nil)
	if a2.Owner() == c.nodes[0].Owner() {
		t.Fatal("a restarted process kept its incarnation")
	}
	status, hdr, body := do(t, "POST", srv2.URL+"/api/sessions/p1/events", testAPIKey, "", `{"data":{"text":"x"}}`)
	retry, _ := body["retry"].(map[string]any)
	if status != 503 || body["error"] != CodeSessionMoving || retry == nil || hdr.Get("Retry-After") == "" {
		t.Fatalf("POST to the restarted a: %d %v", status, body)
	}
	if after := retry["after_ms"].(float64); after < 1000 {
		t.Fatalf("after_ms = %v, want about the predecessor's remaining lease (%v TTL)", after, a2.cfg.LeaseTTL)
	}
	if got := testutilCount(t, a2, "relay_forwards_total"); got != 0 {
		t.Fatalf("the restarted node forwarded %v times", got)
	}
}

// testutilCount reads a counter from a node's metrics registry.
func testutilCount(t *testing.T, n *Node, name string) float64 {
	t.Helper()
	mfs, err := n.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			var sum float64
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
			return sum
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
