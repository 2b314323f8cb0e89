package session

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/trace"
)

func TestHibernateAfterIdleThenThaw(t *testing.T) {
	st := memoryStores()
	tr := trace.New()
	cfg, rec, clk := testConfig(st, "a/1", tr)
	m := startManager(t, cfg)
	ctx := context.Background()

	first, err := m.Accept(ctx, "s1", textInput("hello", "k1"))
	if err != nil {
		t.Fatal(err)
	}
	done := waitFor(t, tr, trace.Kind("session.emit", "type", agent.TypeTurnCompleted), 1)
	idleCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := tr.WaitAfter(idleCtx, done.Seq, trace.Kind("session.idle")); err != nil {
		t.Fatalf("idle timer never armed: %v\n%s", err, tr.Dump())
	}
	m.mu.Lock()
	live := m.actors["s1"]
	m.mu.Unlock()
	// Not idle long enough yet: nothing happens (the renewer keeps the
	// lease meanwhile, beat by beat).
	advanceBeats(t, clk, tr, cfg, "s1", cfg.IdleTimeout-cfg.RenewEvery)
	if len(m.Sessions()) != 1 {
		t.Fatal("actor gone before its idle timeout")
	}
	clk.Advance(cfg.RenewEvery)
	waitFor(t, tr, trace.Kind("session.released", "session", "s1"), 1)
	if n := tr.Count(trace.Kind("session.hibernate")); n != 1 {
		t.Fatalf("%d hibernations, want 1", n)
	}
	waitGone(t, m, "s1")
	select {
	case <-live.renewer.done:
	default:
		t.Fatal("renewer still running after hibernation")
	}
	l, ok, err := st.leases.Get(ctx, "s1")
	if err != nil || !ok || l.Remaining > 0 || l.Owner != "a/1" {
		t.Fatalf("lease after hibernation = %+v %v %v, want a/1's, expired", l, ok, err)
	}
	s := loadStored(t, st.store, "s1")
	want := []agent.Message{{Role: "user", Content: "hello"}, {Role: "assistant", Content: "hello"}}
	if s.Epoch != 1 || s.Seq != 5 || !reflect.DeepEqual(messages(s.History), want) || len(s.Inbox) != 0 {
		t.Fatalf("stored at hibernation = %+v", s)
	}

	// The key survives hibernation: the duplicate thaws the actor.
	dup, err := m.Accept(ctx, "s1", textInput("hello", "k1"))
	if err != nil || !dup.Duplicate || dup.Seq != first.Seq || dup.Epoch != first.Epoch {
		t.Fatalf("duplicate after thaw = %+v, %v; want the original %+v", dup, err, first)
	}
	thaw := waitFor(t, tr, trace.Kind("session.thaw"), 2)
	if thaw.Get("epoch") != int64(2) || thaw.Get("from_epoch") != int64(1) || thaw.Get("seq") != int64(5) {
		t.Fatalf("thaw = %v, want epoch 2 from epoch 1 at seq 5", thaw)
	}
	acc := submit(t, m, "s1", "world")
	if acc.Epoch != 2 || acc.Seq != 6 {
		t.Fatalf("accepted after thaw at %+v, want 2-6", acc)
	}
	waitFor(t, tr, trace.Kind("session.emit", "type", agent.TypeTurnCompleted), 2)
	stt := state(t, m, "s1")
	want = append(want, agent.Message{Role: "user", Content: "world"}, agent.Message{Role: "assistant", Content: "world"})
	if !reflect.DeepEqual(messages(stt.History), want) {
		t.Fatalf("history after thaw = %v, want %v", stt.History, want)
	}
	assertIncreasing(t, rec.all())
}

// With the real clock and a short idle timeout the actor hibernates on its
// own.
func TestHibernateRealClock(t *testing.T) {
	st := memoryStores()
	tr := trace.New()
	cfg, _, _ := testConfig(st, "a/1", tr)
	cfg.Clock = nil
	cfg.IdleTimeout = 20 * time.Millisecond
	m := startManager(t, cfg)
	submit(t, m, "s1", "hello")
	waitFor(t, tr, trace.Kind("session.released", "session", "s1"), 1)
	waitGone(t, m, "s1")
	if s := loadStored(t, st.store, "s1"); len(s.History) != 2 {
		t.Fatalf("stored history %v", s.History)
	}
}

// waitGone waits until m no longer lists session id (the actor removes
// itself just before it finishes).
func waitGone(t *testing.T, m *Manager, id string) {
	t.Helper()
	m.mu.Lock()
	a := m.actors[id]
	m.mu.Unlock()
	if a != nil {
		select {
		case <-a.done:
		case <-time.After(10 * time.Second):
			t.Fatalf("actor %s did not stop", id)
		}
	}
	for _, info := range m.Sessions() {
		if info.Session == id {
			t.Fatalf("%s still listed", id)
		}
	}
}

// advanceBeats moves clk forward by d in steps of one renewal beat, waiting
// after each step until the session's renewer has renewed and re-armed, so
// its local deadline keeps pace with the clock. d must be a multiple of the
// beat, and the renewer must be armed at the current time.
func advanceBeats(t *testing.T, clk *fakeClock, tr *trace.Tracer, cfg Config, id string, d time.Duration) {
	t.Helper()
	armed := trace.Kind("renewer.armed", "owner", cfg.Owner, "session", id)
	waitFor(t, tr, armed, 1)
	for ; d > 0; d -= cfg.RenewEvery {
		n := tr.Count(armed)
		clk.Advance(cfg.RenewEvery)
		waitFor(t, tr, armed, n+1)
	}
}
