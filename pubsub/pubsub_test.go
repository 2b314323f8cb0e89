package pubsub_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/trace"
	"github.com/relaygw/relay/muster"
	"github.com/relaygw/relay/pubsub"
	"github.com/relaygw/relay/session"
)

// publish publishes seqs 1..n of session id from origin and waits until no
// message is in flight.
func (c *cluster) publish(origin *node, id string, n int) {
	c.t.Helper()
	for i := 1; i <= n; i++ {
		if err := origin.ps.Publish(context.Background(), event(id, int64(i))); err != nil {
			c.t.Fatal(err)
		}
	}
	c.quiesce()
}

// diff returns after - before per node.
func diff(before, after map[string]pubsub.Counts) map[string]pubsub.Counts {
	out := map[string]pubsub.Counts{}
	for k, a := range after {
		b := before[k]
		out[k] = pubsub.Counts{Sent: a.Sent - b.Sent, Floods: a.Floods - b.Floods, Received: a.Received - b.Received, Errors: a.Errors - b.Errors}
	}
	return out
}

// TestPublishReachesOnlyHolders: with the topic held on one node of five
// and Muster ready, a publish from a node that is not the router goes once
// to the router and from there once to the holder: no other node receives
// it, nothing floods, and the origin delivered to its own sockets before
// sending anything.
func TestPublishReachesOnlyHolders(t *testing.T) {
	c := newCluster(t, "a", "b", "cc", "d", "e")
	c.waitReady()
	id := c.topicRoutedTo("b")
	a, d := c.node("a"), c.node("d")
	d.ps.JoinTopic(session.Topic(id))

	before := c.counts()
	c.publish(a, id, 7)
	got := diff(before, c.counts())
	for name, n := range got {
		want := pubsub.Counts{}
		switch name {
		case "a":
			want.Sent = 7 // to the router b
		case "b":
			want.Sent = 7 // to the holder d
		case "d":
			want.Received = 7
		}
		if n != want {
			t.Errorf("node %s counted %+v for 7 events, want %+v", name, n, want)
		}
	}
	for i, b := range a.local.calls() {
		if b.sentBefore != before["a"].Sent+int64(i) || b.meta != (agent.Position{Epoch: 1, Seq: int64(i + 1)}) || b.topic != session.Topic(id) || b.event != agent.TypeDelta {
			t.Fatalf("origin's local broadcast %d = %+v: want it before the event's send, with the event's position", i, b)
		}
	}
	calls := d.local.calls()
	if len(calls) != 7 {
		t.Fatalf("holder's sockets got %d broadcasts, want 7", len(calls))
	}
	for i, b := range calls {
		if b.meta != (agent.Position{Epoch: 1, Seq: int64(i + 1)}) || string(b.payload) != string(a.local.calls()[i].payload) {
			t.Fatalf("holder's broadcast %d = %+v, want the origin's event %d", i, b, i+1)
		}
	}
	if n := counter(t, a, "relay_pubsub_node_messages_total", ""); n != 7 {
		t.Errorf("a's relay_pubsub_node_messages_total = %v, want 7", n)
	}
	if n := counter(t, d, "relay_deliveries_total", ""); n != 7 {
		t.Errorf("d's relay_deliveries_total = %v, want 7", n)
	}
}

// TestRouterOriginResolvesInline: an origin that is the topic's router asks
// Targets itself and sends once to each holder, and never to itself.
func TestRouterOriginResolvesInline(t *testing.T) {
	c := newCluster(t, "a", "b", "cc")
	c.waitReady()
	id := c.topicRoutedTo("a")
	a := c.node("a")
	for _, name := range []string{"a", "b", "cc"} {
		c.node(name).ps.JoinTopic(session.Topic(id))
	}
	before := c.counts()
	c.publish(a, id, 3)
	got := diff(before, c.counts())
	want := map[string]pubsub.Counts{"a": {Sent: 6}, "b": {Received: 3}, "cc": {Received: 3}}
	for name, n := range got {
		if n != want[name] {
			t.Errorf("node %s counted %+v for 3 events, want %+v", name, n, want[name])
		}
	}
	if n := len(a.local.calls()); n != 3 {
		t.Errorf("the origin delivered %d times to its own sockets, want once per event", n)
	}
}

// TestRouterFloodsWhenTableUntrusted: a route message tagged with a view
// hash the router does not share, or sent to a node that is not (or no
// longer) the topic's router, is flooded: every node but the origin
// receives it, and the router delivers it locally too.
func TestRouterFloodsWhenTableUntrusted(t *testing.T) {
	c := newCluster(t, "a", "b", "cc", "d")
	c.waitReady()
	id := c.topicRoutedTo("b")
	b, d := c.node("b"), c.node("d")
	ev := event(id, 1)
	payload := []byte(fmt.Sprintf(`{"session":%q,"epoch":1,"seq":1}`, ev.Session))
	for _, tc := range []struct {
		name   string
		to     *node
		hash   uint64
		router string
	}{
		{"stale view hash", b, b.scope.ViewHash() + 1, "b"},
		{"not the router", d, d.scope.ViewHash(), "d"},
	} {
		msg := pubsub.Message{Kind: pubsub.KindRoute, Topic: session.Topic(id), Event: ev.Type, Origin: "a",
			ViewHash: tc.hash, Pos: ev.Pos(), Payload: payload}
		wire, _ := msg.MarshalBinary()
		before, localBefore := c.counts(), map[string]int{}
		for _, n := range c.nodes {
			localBefore[n.name] = len(n.local.calls())
		}
		tc.to.ps.HandleMessage("a", wire)
		c.quiesce()
		got := diff(before, c.counts())
		for name, n := range got {
			want := pubsub.Counts{Received: 1}
			switch name {
			case "a":
				want = pubsub.Counts{} // the origin is left out
			case tc.router:
				want = pubsub.Counts{Floods: 1}
			}
			if n != want {
				t.Errorf("%s: node %s counted %+v, want %+v", tc.name, name, n, want)
			}
			wantLocal := 1
			if name == "a" {
				wantLocal = 0
			}
			if n := len(c.node(name).local.calls()) - localBefore[name]; n != wantLocal {
				t.Errorf("%s: node %s delivered %d times to its sockets, want %d", tc.name, name, n, wantLocal)
			}
		}
	}
}

// TestRebalancingOriginSendsToEveryMember: while the origin's Muster view
// changes (held in rebalancing), a publish goes to every member of the view
// but the origin, and the holder still gets every event.
func TestRebalancingOriginSendsToEveryMember(t *testing.T) {
	c := newCluster(t, "a", "b", "cc", "d", "e")
	c.waitReady()
	a, d := c.node("a"), c.node("d")
	id := c.topicRoutedTo("b")
	d.ps.JoinTopic(session.Topic(id))

	rebalancing := trace.Kind("muster_status_change", "scope", scopeName, "node", "a", "to", "rebalancing")
	mark := uint64(len(c.tr.Events()))
	c.tr.Park(rebalancing, trace.Kind("test_release"))
	c.add("f")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.tr.WaitAfter(ctx, mark, rebalancing); err != nil {
		t.Fatal(err)
	}
	r := a.scope.Router(session.Topic(id))
	if r.Status != muster.RouteRebalancing {
		t.Fatalf("a's Router during the rebalance = %+v", r)
	}
	before := c.counts()
	c.publish(a, id, 5)
	got := diff(before, c.counts())
	c.tr.Emit("test_release")

	others := 0
	for _, m := range r.Members {
		if m != "a" {
			others++
			if got[m].Received != 5 {
				t.Errorf("member %s received %d of 5 events sent while a rebalanced", m, got[m].Received)
			}
		}
	}
	if others < 4 || got["a"].Sent != int64(5*others) || got["a"].Floods != 0 {
		t.Fatalf("a counted %+v for 5 events while rebalancing with members %v, want one send to each other member", got["a"], r.Members)
	}
	if n := len(d.local.calls()); n != 5 {
		t.Fatalf("holder's sockets got %d broadcasts during the rebalance, want 5", n)
	}
	c.waitReady()
}

// TestUndecodableMessagesAreCountedAndLogged: garbage and a message of an
// unknown wire version are dropped, each counted under op "decode"; the
// Warn line is sampled (the first per message text per second: the test's
// log clock stands still), the counter counts them all.
func TestUndecodableMessagesAreCountedAndLogged(t *testing.T) {
	c := newCluster(t, "a")
	a := c.node("a")
	good, _ := (&pubsub.Message{Kind: pubsub.KindDeliver, Topic: "session:x", Event: "delta", Origin: "b"}).MarshalBinary()
	v2 := append([]byte{pubsub.WireVersion + 1}, good[1:]...)
	for _, b := range [][]byte{nil, []byte("junk"), []byte(`{"k":"deliver","t":"session:x"}`), v2, v2} {
		a.ps.HandleMessage("b", b)
	}
	if got := a.ps.Counts(); got.Errors != 5 || got.Received != 0 {
		t.Fatalf("counts %+v after 5 undecodable messages, want 5 errors and nothing received", got)
	}
	if n := counter(t, a, "relay_pubsub_errors_total", pubsub.OpDecode); n != 5 {
		t.Fatalf("relay_pubsub_errors_total{op=decode} = %v, want 5", n)
	}
	warns := a.logs.FilterLevelExact(zapcore.WarnLevel).FilterMessage("dropping an undecodable pubsub message").All()
	if len(warns) != 1 {
		t.Fatalf("%d Warn lines for 5 undecodable messages, want the sampled first", len(warns))
	}
	if len(a.local.calls()) != 0 {
		t.Fatal("an undecodable message reached local sockets")
	}
}

// TestSendFailuresAreCountedAndLogged: a publish whose transport is closed
// still reaches local sockets and returns nil (delivery is best effort);
// every failed send is counted under op "send", the first logged at Warn.
func TestSendFailuresAreCountedAndLogged(t *testing.T) {
	c := newCluster(t, "a", "b")
	c.waitReady()
	a := c.node("a")
	id := c.topicRoutedTo("b")
	if err := a.tr.Close(); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		if err := a.ps.Publish(context.Background(), event(id, int64(i))); err != nil {
			t.Fatal(err)
		}
	}
	if n := counter(t, a, "relay_pubsub_errors_total", pubsub.OpSend); n != 3 {
		t.Fatalf("relay_pubsub_errors_total{op=send} = %v, want 3", n)
	}
	if n := len(a.local.calls()); n != 3 {
		t.Fatalf("local sockets got %d of 3 events with the transport down", n)
	}
	warns := a.logs.FilterLevelExact(zapcore.WarnLevel).FilterField(zap.String("op", pubsub.OpSend)).All()
	if len(warns) != 1 || warns[0].ContextMap()["to"] != "b" {
		t.Fatalf("Warn lines for 3 failed sends to b: %v, want the sampled first", warns)
	}
}

// TestJoinFailureIsCountedAndLogged: a topic whose Muster join fails (here
// the scope is closed) is counted under op "join" and logged at Warn; its
// leave afterwards is quiet.
func TestJoinFailureIsCountedAndLogged(t *testing.T) {
	c := newCluster(t, "a")
	a := c.node("a")
	if err := a.scope.Close(); err != nil {
		t.Fatal(err)
	}
	a.ps.JoinTopic("session:j1")
	a.ps.LeaveTopic("session:j1")
	if n := counter(t, a, "relay_pubsub_errors_total", pubsub.OpJoin); n != 1 {
		t.Fatalf("relay_pubsub_errors_total{op=join} = %v, want 1", n)
	}
	warns := a.logs.FilterLevelExact(zapcore.WarnLevel).All()
	if len(warns) != 1 || warns[0].ContextMap()["topic"] != "session:j1" || warns[0].ContextMap()["op"] != pubsub.OpJoin {
		t.Fatalf("Warn lines %v, want one for the failed join", warns)
	}
}
