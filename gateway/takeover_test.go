package gateway

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// A drain hands the session back (one INFO line, relay_session_handbacks_total
// on the drained node); the next event, posted on the other node, makes it
// take the session over at epoch 2 (one INFO line naming the old and new
// owner, relay_session_takeovers_total on the new owner).
func TestTakeoverAndHandBackAreLoggedAndCounted(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	c := newTestCluster(t)
	c.observe = core
	c.add("a", nil)
	c.add("b", nil)
	c.waitReady()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // hang guard
	defer cancel()

	const id = "takeover-1"
	if body := post(t, c.srvs[0], id, "one"); body["epoch"] != float64(1) {
		t.Fatalf("first event at epoch %v, want 1", body["epoch"])
	}
	_, holder := c.nodes[0].owner(ctx, id)
	old, other, otherSrv := c.nodes[0], c.nodes[1], c.srvs[1]
	if holder == c.nodes[1].Owner() {
		old, other, otherSrv = c.nodes[1], c.nodes[0], c.srvs[0]
	} else if holder != c.nodes[0].Owner() {
		t.Fatalf("owner %q is neither node", holder)
	}

	dctx, dcancel := context.WithTimeout(ctx, 20*time.Second)
	defer dcancel()
	if err := old.Drain(dctx); err != nil {
		t.Fatalf("drain: %v", err)
	}
	if got := testutilCount(t, old, "relay_session_handbacks_total"); got != 1 {
		t.Fatalf("relay_session_handbacks_total on the drained node = %v, want 1", got)
	}
	back := logs.FilterMessage("session handed back").FilterField(zap.String("session", id)).All()
	if len(back) != 1 || back[0].ContextMap()["owner"] != old.Owner() {
		t.Fatalf("hand-back log lines: %v", back)
	}
	if got := testutilCount(t, other, "relay_session_takeovers_total"); got != 0 {
		t.Fatalf("takeovers before the next event = %v", got)
	}

	if body := post(t, otherSrv, id, "two"); body["epoch"] != float64(2) {
		t.Fatalf("event after the drain at epoch %v, want 2", body["epoch"])
	}
	if got := testutilCount(t, other, "relay_session_takeovers_total"); got != 1 {
		t.Fatalf("relay_session_takeovers_total on the new owner = %v, want 1", got)
	}
	over := logs.FilterMessage("session taken over").FilterField(zap.String("session", id)).All()
	if len(over) != 1 {
		t.Fatalf("takeover log lines: %v", over)
	}
	f := over[0].ContextMap()
	if f["old_owner"] != old.Owner() || f["new_owner"] != other.Owner() || f["epoch"] != int64(2) || over[0].Level != zap.InfoLevel {
		t.Fatalf("takeover line %v", f)
	}
	if got := testutilCount(t, old, "relay_session_takeovers_total"); got != 0 {
		t.Fatalf("the first owner counted a takeover: %v", got)
	}
}
