package gateway

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/relaygw/relay/internal/phxtest"
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
