package gateway

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/relaygw/relay/internal/testkit/phxtest"
	"github.com/relaygw/relay/internal/trace"
)

// TestPresenceOnSessionTopics: every join gets a full presence_state, and the
// other sockets on the topic get presence_diff joins and leaves
// (docs/PHOENIX.md §5.3; checklist items 28-29). Presence is on by default;
// {"presence":false} opts out.
func TestPresenceOnSessionTopics(t *testing.T) {
	n, srv, _ := testNode(t, func(c *Config) { c.PresencePeriod = 20 * time.Millisecond })
	tokA, _ := n.Auth().Mint("alice", []string{"*"}, time.Hour)
	tokB, _ := n.Auth().Mint("bob", []string{"*"}, time.Hour)

	a := phxtest.DialT(t, phxtest.URL(srv.URL, tokA))
	a.Join("session:pr1", map[string]any{"presence": true})
	var state map[string]struct {
		Metas []map[string]any `json:"metas"`
	}
	if err := json.Unmarshal(a.NextEvent("presence_state").Payload, &state); err != nil || len(state["alice"].Metas) != 1 {
		t.Fatalf("alice's presence_state = %v (%v)", state, err)
	}
	if state["alice"].Metas[0]["phx_ref"] == "" || state["alice"].Metas[0]["node"] != "n1" {
		t.Fatalf("alice's meta = %v", state["alice"].Metas[0])
	}

	b := phxtest.DialT(t, phxtest.URL(srv.URL, tokB))
	joinRef := b.Send("", "session:pr1", "phx_join", map[string]any{"presence": true})
	b.Until(joinRef)
	state = nil
	if err := json.Unmarshal(b.NextEvent("presence_state").Payload, &state); err != nil || len(state) != 2 {
		t.Fatalf("bob's presence_state = %v (%v), want alice and bob", state, err)
	}
	var diff struct {
		Joins, Leaves map[string]json.RawMessage
	}
	for diff.Joins["bob"] == nil {
		if err := json.Unmarshal(a.NextEvent("presence_diff").Payload, &diff); err != nil {
			t.Fatal(err)
		}
	}
	b.Send(joinRef, "session:pr1", "phx_leave", map[string]any{})
	diff.Joins, diff.Leaves = nil, nil
	for diff.Leaves["bob"] == nil {
		if err := json.Unmarshal(a.NextEvent("presence_diff").Payload, &diff); err != nil {
			t.Fatal(err)
		}
	}
	if diff.Joins == nil || diff.Leaves == nil {
		t.Fatalf("a diff must always carry joins and leaves: %+v", diff)
	}

	// With "presence":false a join is not tracked: no state for it, no diff.
	c := phxtest.DialT(t, phxtest.URL(srv.URL, tokB))
	c.Join("session:pr1", map[string]any{"presence": false})
	if evs := c.Barrier(); len(evs) != 0 {
		t.Fatalf("untracked join got session events %v", evs)
	}
	if got := n.presence.Local("session:pr1"); got != 1 {
		t.Fatalf("%d presences tracked, want only alice", got)
	}
}

// TestPresenceLeaveAfterServedJoin: M joins, J joins and is served a
// presence_state listing M, M leaves, all before the period's flush; the
// flush's presence_diff tells J that M left (docs/PHOENIX.md §5.4, "What
// subscribers get"). The broadcast timer is an hour, so the test flushes.
func TestPresenceLeaveAfterServedJoin(t *testing.T) {
	n, srv, _ := testNode(t, func(c *Config) { c.PresencePeriod = time.Hour })
	tokM, _ := n.Auth().Mint("M", []string{"*"}, time.Hour)
	tokJ, _ := n.Auth().Mint("J", []string{"*"}, time.Hour)
	const topic = "session:phantom"
	type presences map[string]struct {
		Metas []map[string]any `json:"metas"`
	}

	m := phxtest.DialT(t, phxtest.URL(srv.URL, tokM))
	mRef := m.Send("", topic, "phx_join", map[string]any{})
	m.Until(mRef)
	j := phxtest.DialT(t, phxtest.URL(srv.URL, tokJ))
	j.Join(topic, map[string]any{})
	var state presences
	if err := json.Unmarshal(j.NextEvent("presence_state").Payload, &state); err != nil || len(state["M"].Metas) != 1 || len(state["J"].Metas) != 1 {
		t.Fatalf("J's presence_state = %v (%v), want M and J", state, err)
	}
	m.Send(mRef, topic, "phx_leave", map[string]any{})
	waitUntil(t, "M untracked", func() bool { return n.presence.Local(topic) == 1 })
	n.presence.Flush()
	var d struct{ Joins, Leaves presences }
	if err := json.Unmarshal(j.NextEvent("presence_diff").Payload, &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Leaves["M"].Metas) != 1 || d.Leaves["M"].Metas[0]["phx_ref"] != state["M"].Metas[0]["phx_ref"] {
		t.Fatalf("the period's diff %+v does not tell J that M (%v) left", d, state["M"].Metas)
	}
}

// TestPresenceAcrossNodes: presence is cluster-wide over NATS. A viewer on
// node a sees a viewer joined on node b arrive as a presence_diff; when the
// topic passes PRESENCE_MAX_LISTED its sockets get presence_state {} and
// presence_count, a joining socket gets the count at once, and once the
// topic shrinks back the full list returns (docs/PHOENIX.md §5.4).
func TestPresenceAcrossNodes(t *testing.T) {
	c := newTestCluster(t)
	fast := func(cfg *Config) {
		cfg.CensusInterval = 50 * time.Millisecond
		cfg.PresencePeriod = 20 * time.Millisecond
		cfg.PresenceMaxListed = 2
	}
	na, srvA := c.addWith("a", nil, fast)
	_, srvB := c.addWith("b", nil, fast)
	waitUntil(t, "a and b register each other", func() bool { return len(na.census.Peers()) == 1 })
	tok := func(sub string) string {
		tk, err := na.Auth().Mint(sub, []string{"*"}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return tk
	}
	type presences map[string]struct {
		Metas []map[string]any `json:"metas"`
	}
	alice := phxtest.DialT(t, phxtest.URL(srvA.URL, tok("alice")))
	alice.Join("session:pa", map[string]any{})
	alice.NextEvent("presence_state")

	bob := phxtest.DialT(t, phxtest.URL(srvB.URL, tok("bob")))
	bob.Join("session:pa", map[string]any{})
	for {
		var d struct{ Joins, Leaves presences }
		if err := json.Unmarshal(alice.NextEvent("presence_diff").Payload, &d); err != nil {
			t.Fatal(err)
		}
		if j, ok := d.Joins["bob"]; ok {
			if j.Metas[0]["node"] != "b" {
				t.Fatalf("bob's meta %v, want node b", j.Metas[0])
			}
			break
		}
	}

	// A third viewer passes the limit of 2: counts, not lists.
	carol := phxtest.DialT(t, phxtest.URL(srvB.URL, tok("carol")))
	carolRef := carol.Send("", "session:pa", "phx_join", map[string]any{})
	carol.Until(carolRef)
	if st := string(alice.NextEvent("presence_state").Payload); st != "{}" {
		t.Fatalf("over the limit alice got presence_state %s, want {}", st)
	}
	var cnt struct{ Count int }
	if err := json.Unmarshal(alice.NextEvent("presence_count").Payload, &cnt); err != nil || cnt.Count != 3 {
		t.Fatalf("presence_count %+v (%v), want 3", cnt, err)
	}
	dave := phxtest.DialT(t, phxtest.URL(srvA.URL, tok("dave")))
	daveRef := dave.Send("", "session:pa", "phx_join", map[string]any{})
	dave.Until(daveRef)
	if st := string(dave.NextEvent("presence_state").Payload); st != "{}" {
		t.Fatalf("a socket joining over the limit got presence_state %s, want {}", st)
	}
	if err := json.Unmarshal(dave.NextEvent("presence_count").Payload, &cnt); err != nil || cnt.Count != 4 {
		t.Fatalf("a joining socket's presence_count %+v (%v), want 4", cnt, err)
	}

	// Carol and dave leave: back to 2, the list returns.
	carol.Send(carolRef, "session:pa", "phx_leave", map[string]any{})
	dave.Send(daveRef, "session:pa", "phx_leave", map[string]any{})
	var st presences
	if err := json.Unmarshal(alice.NextEvent("presence_state").Payload, &st); err != nil || len(st) != 2 || len(st["bob"].Metas) != 1 {
		t.Fatalf("back under the limit alice got %v (%v), want alice and bob", st, err)
	}
}

// TestSilentSocketLeavesAtHeartbeatTimeout: a socket that sends nothing for
// HEARTBEAT_TIMEOUT leaves the topic's presence when it is declared dead
// (trace point socket.dead, which ended its one channel), not when the close
// handshake with the silent client gives up.
func TestSilentSocketLeavesAtHeartbeatTimeout(t *testing.T) {
	n, srv, tr := testNode(t, func(c *Config) { c.HeartbeatTimeout, c.LongPollWindow = 100*time.Millisecond, 50*time.Millisecond })
	tok, _ := n.Auth().Mint("bob", []string{"*"}, time.Hour)
	bob := phxtest.DialT(t, phxtest.URL(srv.URL, tok))
	bob.Join("session:hb", map[string]any{})
	if got := n.presence.Local("session:hb"); got != 1 {
		t.Fatalf("%d presences after the join, want 1", got)
	}
	// bob sends nothing more, and reads nothing: the close handshake stalls.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ev, err := tr.WaitFor(ctx, trace.Kind("socket.dead"))
	if err != nil {
		t.Fatal(err)
	}
	if ev.Get("channels") != 1 {
		t.Fatalf("socket.dead %v: want its one channel ended by it", ev)
	}
	if got := n.presence.Local("session:hb"); got != 0 {
		t.Fatalf("%d presences after the socket was declared dead, want 0", got)
	}
}
