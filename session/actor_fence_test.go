package session

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/trace"
)

// The fence canary (docs/OWNERSHIP.md "How it is tested"): node A runs a turn and
// stalls; its lease lapses on the store's clock while A notices nothing (its
// own clock, and so its renewer, stands still, as in a long pause); node B
// takes the session over. A's next write must come back fenced, and A must
// publish nothing more for the turn and stand the session down.
func TestFenceCanary(t *testing.T) {
	forEachStores(t, func(t *testing.T, newStores func(t *testing.T) *stores) {
		t.Run("checkpoint", func(t *testing.T) { testFenceCanary(t, newStores(t), "") })
		t.Run("append", func(t *testing.T) { testFenceCanary(t, newStores(t), "late delta") })
	})
}

func testFenceCanary(t *testing.T, st *stores, post string) {
	ctx := context.Background()
	tr := trace.New()
	cfgA, recA, _ := testConfig(st, "a/1", tr)
	agA := newBlockAgent()
	agA.pre = []string{"thinking "}
	agA.post = post
	cfgA.Agent = agA
	a := startManager(t, cfgA)
	cfgB, recB, _ := testConfig(st, "b/1", tr)
	b := startManager(t, cfgB)

	submit(t, a, "s1", "first")
	<-agA.started
	st.advance(t, cfgA.LeaseTTL+time.Second)

	accB := submit(t, b, "s1", "second")
	if accB.Epoch != 2 {
		t.Fatalf("B accepted at %+v, want epoch 2 (takeover)", accB)
	}
	// B thaws A's running input from the inbox and runs it again first.
	waitFor(t, tr, trace.Kind("session.emit", "owner", "b/1", "type", agent.TypeTurnCompleted), 2)
	// A still believes it owns s1.
	if info := a.Sessions(); len(info) != 1 || info[0].Epoch != 1 || !info[0].Running {
		t.Fatalf("A's sessions = %+v, want s1 running at epoch 1", info)
	}
	publishedBefore := len(recA.all())

	close(agA.release)
	op := "checkpoint"
	if post != "" {
		op = "append"
		if err := <-agA.postErr; !errors.Is(err, ErrFenced) {
			t.Fatalf("A's late emit = %v, want ErrFenced", err)
		}
	}
	waitFor(t, tr, trace.Kind("session.fenced", "owner", "a/1", "op", op), 1)
	waitFor(t, tr, trace.Kind("session.standdown", "owner", "a/1"), 1)

	if got := recA.all(); len(got) != publishedBefore {
		t.Fatalf("A published %v after it was fenced", types(got[publishedBefore:]))
	}
	if got := types(recA.all()); !reflect.DeepEqual(got, []string{agent.TypeUserEvent, agent.TypeTurnStarted, agent.TypeDelta}) {
		t.Fatalf("A published %v, want only the turn's start", got)
	}
	if len(a.Sessions()) != 0 {
		t.Fatalf("A still runs %+v", a.Sessions())
	}
	if a.Stats().Fenced != 1 {
		t.Fatalf("A's stats = %+v, want one fence", a.Stats())
	}
	s := loadStored(t, st.store, "s1")
	want := []agent.Message{{Role: "user", Content: "first"}, {Role: "assistant", Content: "first"}, {Role: "user", Content: "second"}, {Role: "assistant", Content: "second"}}
	if s.Epoch != 2 || !reflect.DeepEqual(messages(s.History), want) || len(s.Inbox) != 0 {
		t.Fatalf("stored = epoch %d %v (inbox %v), want B's: epoch 2 %v", s.Epoch, s.History, s.Inbox, want)
	}
	for _, ev := range logEvents(t, st.log, "s1") {
		if ev.Epoch == 1 && (ev.Type == agent.TypeMessage || ev.Type == agent.TypeTurnCompleted || ev.Type == agent.TypeTurnFailed) {
			t.Fatalf("A's turn end reached the log: %+v", ev)
		}
	}
	if len(recB.ofType(agent.TypeMessage)) != 2 {
		t.Fatalf("B published %v", types(recB.all()))
	}
	// A learns the holder on its next input.
	_, err := a.Accept(ctx, "s1", textInput("third", ""))
	var held *LeaseHeldError
	if !errors.As(err, &held) || held.Holder != "b/1" {
		t.Fatalf("A's next submit = %v, want *LeaseHeldError by b/1", err)
	}
}

// A stale actor (its lease lapsed and was re-claimed by this same node under
// a newer epoch) is replaced: the new epoch's actor thaws from the
// checkpoint and the old one stands down without writing.
func TestSubmitReplacesActorOfOlderEpoch(t *testing.T) {
	st := memoryStores()
	tr := trace.New()
	cfg, rec, _ := testConfig(st, "a/1", tr)
	ag := newBlockAgent()
	cfg.Agent = ag
	m := startManager(t, cfg)

	submit(t, m, "s1", "first")
	<-ag.started
	st.advance(t, cfg.LeaseTTL+time.Second)
	acc := submit(t, m, "s1", "second")
	if acc.Epoch != 2 {
		t.Fatalf("accepted at %+v, want epoch 2", acc)
	}
	waitFor(t, tr, trace.Kind("session.standdown", "epoch", int64(1)), 1)
	if n := tr.Count(trace.Kind("session.thaw")); n != 2 {
		t.Fatalf("%d thaws, want 2", n)
	}
	for _, ev := range rec.all() {
		if ev.Epoch == 1 && ev.Type != agent.TypeUserEvent && ev.Type != agent.TypeTurnStarted {
			t.Fatalf("old epoch published %s", ev.Type)
		}
	}
	close(ag.release)
	waitFor(t, tr, trace.Kind("session.emit", "type", agent.TypeTurnCompleted, "epoch", int64(2)), 1)
	if info := m.Sessions(); len(info) != 1 || info[0].Epoch != 2 {
		t.Fatalf("sessions = %+v", info)
	}
}
