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

// Drain lets running turns finish, keeps accepted-but-unrun inputs in the
// checkpoint, and hands every lease back so another node claims at once.
func TestDrainReleasesLeases(t *testing.T) {
	forEachStores(t, func(t *testing.T, newStores func(t *testing.T) *stores) {
		st := newStores(t)
		tr := trace.New()
		cfgA, recA, _ := testConfig(st, "a/1", tr)
		ag := newBlockAgent()
		cfgA.Agent = ag
		a := startManager(t, cfgA)
		ctx := context.Background()

		submit(t, a, "s1", "first")
		submit(t, a, "s2", "other")
		<-ag.started
		<-ag.started
		submit(t, a, "s1", "second") // pending behind the running turn

		drained := make(chan error, 1)
		go func() { drained <- a.Drain(ctx) }()
		waitFor(t, tr, trace.Kind("session.drain"), 1)
		if _, err := a.Accept(ctx, "s1", textInput("late", "")); !errors.Is(err, ErrDraining) {
			t.Fatalf("submit while draining = %v, want ErrDraining", err)
		}
		if _, err := a.Accept(ctx, "s3", textInput("new", "")); !errors.Is(err, ErrDraining) {
			t.Fatalf("submit of a new session while draining = %v, want ErrDraining", err)
		}
		close(ag.release)
		if err := <-drained; err != nil {
			t.Fatalf("drain: %v", err)
		}
		if len(a.Sessions()) != 0 {
			t.Fatalf("sessions after drain: %+v", a.Sessions())
		}
		if n := len(recA.ofType(agent.TypeTurnCompleted)); n != 2 {
			t.Fatalf("%d turns completed, want the 2 running ones", n)
		}
		s := loadStored(t, st.store, "s1")
		if len(s.Inbox) != 1 || agent.InputText(s.Inbox[0].Input) != "second" {
			t.Fatalf("s1 inbox = %+v, want the second input", s.Inbox)
		}

		// Another node claims both at once (no TTL wait) and runs the
		// pending input before its own.
		for _, id := range []string{"s1", "s2"} {
			l, err := st.leases.Claim(ctx, id, "b/1", cfgA.LeaseTTL)
			if err != nil || l.Epoch != 2 {
				t.Fatalf("b/1 claims %s after drain: %+v, %v; want epoch 2 at once", id, l, err)
			}
		}
		cfgB, _, _ := testConfig(st, "b/1", tr)
		b := startManager(t, cfgB)
		submit(t, b, "s1", "third")
		waitFor(t, tr, trace.Kind("session.emit", "owner", "b/1", "type", agent.TypeTurnCompleted), 2)
		stt := state(t, b, "s1")
		want := []agent.Message{{Role: "user", Content: "first"}, {Role: "assistant", Content: "done"}, {Role: "user", Content: "second"}, {Role: "assistant", Content: "second"}, {Role: "user", Content: "third"}, {Role: "assistant", Content: "third"}}
		if !reflect.DeepEqual(messages(stt.History), want) {
			t.Fatalf("history on the next owner = %v, want %v", stt.History, want)
		}
	})
}

func TestCloseStopsWithoutHandBack(t *testing.T) {
	st := memoryStores()
	tr := trace.New()
	cfg, _, _ := testConfig(st, "a/1", tr)
	ag := newBlockAgent()
	cfg.Agent = ag
	m := NewManager(cfg)
	submit(t, m, "s1", "stuck")
	<-ag.started
	m.Close()
	m.Close()
	if _, err := m.Accept(context.Background(), "s1", textInput("x", "")); !errors.Is(err, ErrClosed) {
		t.Fatalf("submit after close = %v", err)
	}
	if err := m.Drain(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("drain after close = %v", err)
	}
	l, _, _ := st.leases.Get(context.Background(), "s1")
	if l.Owner != "a/1" || l.Remaining <= 0 {
		t.Fatalf("lease after close = %+v, want left to lapse", l)
	}
	waitFor(t, tr, trace.Kind("session.standdown", "session", "s1"), 1)
}

// A Submit whose claim is in flight when Drain begins meets the drain
// before any actor takes the lease over: Drain's actors do not hold it,
// so Submit itself hands it back, and another node claims at once instead
// of waiting a TTL (forced ordering: the claim completes, Drain runs, then
// Submit goes on).
func TestDrainReleasesLeaseClaimedInFlight(t *testing.T) {
	forEachStores(t, func(t *testing.T, newStores func(t *testing.T) *stores) {
		st := newStores(t)
		tr := trace.New()
		cfg, _, _ := testConfig(st, "a/1", tr)
		m := startManager(t, cfg)
		ctx := context.Background()

		tr.Park(trace.Kind("session.claimed", "session", "s1"), trace.Kind("session.drain"))
		submitted := make(chan error, 1)
		go func() {
			_, err := m.Accept(ctx, "s1", textInput("in flight", ""))
			submitted <- err
		}()
		waitFor(t, tr, trace.Kind("session.claimed", "session", "s1"), 1)
		if err := m.Drain(ctx); err != nil {
			t.Fatalf("drain: %v", err)
		}
		if err := <-submitted; !errors.Is(err, ErrDraining) {
			t.Fatalf("submit in flight = %v, want ErrDraining", err)
		}
		assertNoParkFailures(t, tr)
		if n := tr.Count(trace.Kind("session.drain.released", "session", "s1", "epoch", int64(1))); n != 1 {
			t.Fatalf("in-flight claim released %d times, want once\ntrace:\n%s", n, tr.Dump())
		}
		l, err := st.leases.Claim(ctx, "s1", "b/1", cfg.LeaseTTL)
		if err != nil || l.Epoch != 2 {
			t.Fatalf("b/1 claims s1 after the drain: %+v, %v; want epoch 2 at once", l, err)
		}
	})
}

// A recovery pass that claimed a session's lease just before a drain began
// (parked right after its claim) gives that lease back instead of leaving
// it live with no actor: the next claim elsewhere succeeds at once.
func TestDrainReleasesLeaseRecoveredInFlight(t *testing.T) {
	st := memoryStores()
	tr := trace.New()
	ctx := context.Background()
	cfgA, _, _ := testConfig(st, "a/1", tr)
	ag := newBlockAgent()
	cfgA.Agent = ag
	a := NewManager(cfgA)
	submit(t, a, "s1", "left behind")
	<-ag.started
	a.Close() // dies with the input in the inbox
	st.advance(t, cfgA.LeaseTTL+time.Second)

	cfgB, _, _ := testConfig(st, "b/1", tr)
	b := startManager(t, cfgB)
	tr.Park(trace.Kind("session.recover.claimed", "owner", "b/1"), trace.Kind("session.drain", "owner", "b/1"))
	recovered := make(chan int, 1)
	go func() {
		n, _ := b.Recover(ctx, 10)
		recovered <- n
	}()
	waitFor(t, tr, trace.Kind("session.recover.claimed", "owner", "b/1"), 1)
	if err := b.Drain(ctx); err != nil {
		t.Fatalf("drain: %v", err)
	}
	if n := <-recovered; n != 0 {
		t.Fatalf("recover started %d sessions during the drain, want 0", n)
	}
	assertNoParkFailures(t, tr)
	if n := tr.Count(trace.Kind("session.drain.released", "owner", "b/1", "session", "s1")); n != 1 {
		t.Fatalf("recovered claim released %d times, want once\ntrace:\n%s", n, tr.Dump())
	}
	l, err := st.leases.Claim(ctx, "s1", "c/1", cfgB.LeaseTTL)
	if err != nil || l.Epoch != 3 {
		t.Fatalf("c/1 claims s1 after the drain: %+v, %v; want epoch 3 at once", l, err)
	}
}
