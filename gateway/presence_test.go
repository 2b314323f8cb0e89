package gateway

import (
	"context"
	"encoding/json"
	"testing"
	"time"
)

// nextEvent reads frames until one with the given event name arrives.
func (c *wsClient) nextEvent(event string) frame {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		f, err := c.read(ctx)
		if err != nil {
			c.t.Fatalf("waiting for %s: %v", event, err)
		}
		if f.Event == event {
			return f
		}
	}
}

// TestPresenceOnSessionTopics: every join gets a full presence_state, and the
// other sockets on the topic get presence_diff joins and leaves
// (docs/PHOENIX.md §5.3; checklist items 28-29).
func TestPresenceOnSessionTopics(t *testing.T) {
	n, srv, _ := testNode(t, nil)
	tokA, _ := n.Auth().Mint("alice", []string{"*"}, time.Hour)
	tokB, _ := n.Auth().Mint("bob", []string{"*"}, time.Hour)

	a := dialWS(t, srv.URL, tokA)
	a.join("session:pr1", map[string]any{"presence": true})
	var state map[string]struct {
		Metas []map[string]any `json:"metas"`
	}
	if err := json.Unmarshal(a.nextEvent("presence_state").Payload, &state); err != nil || len(state["alice"].Metas) != 1 {
		t.Fatalf("alice's presence_state = %v (%v)", state, err)
	}
	if state["alice"].Metas[0]["phx_ref"] == "" || state["alice"].Metas[0]["node"] != "n1" {
		t.Fatalf("alice's meta = %v", state["alice"].Metas[0])
	}

	b := dialWS(t, srv.URL, tokB)
	joinRef := b.send("", "session:pr1", "phx_join", map[string]any{"presence": true})
	b.until(joinRef)
	state = nil
	if err := json.Unmarshal(b.nextEvent("presence_state").Payload, &state); err != nil || len(state) != 2 {
		t.Fatalf("bob's presence_state = %v (%v), want alice and bob", state, err)
	}
	var diff struct {
		Joins, Leaves map[string]json.RawMessage
	}
	for diff.Joins["bob"] == nil {
		if err := json.Unmarshal(a.nextEvent("presence_diff").Payload, &diff); err != nil {
			t.Fatal(err)
		}
	}
	b.send(joinRef, "session:pr1", "phx_leave", map[string]any{})
	diff.Joins, diff.Leaves = nil, nil
	for diff.Leaves["bob"] == nil {
		if err := json.Unmarshal(a.nextEvent("presence_diff").Payload, &diff); err != nil {
			t.Fatal(err)
		}
	}
	if diff.Joins == nil || diff.Leaves == nil {
		t.Fatalf("a diff must always carry joins and leaves: %+v", diff)
	}

	// Without "presence" a join is not tracked: no state for it, no diff.
	c := dialWS(t, srv.URL, tokB)
	c.join("session:pr1", map[string]any{})
	if evs := c.barrier(); len(evs) != 0 {
		t.Fatalf("untracked join got session events %v", evs)
	}
	if got := n.presence.Size("session:pr1"); got != 1 {
		t.Fatalf("%d presences tracked, want only alice", got)
	}
}
