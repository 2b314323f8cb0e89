package session

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/trace"
)

// advanceBoth makes d pass for the store and for the manager's clock, in
// steps of one renewal beat, waiting after each step for the renewer of id to
// re-arm (so it has acted on the step).
func advanceBoth(t *testing.T, st *stores, clk *fakeClock, tr *trace.Tracer, cfg Config, id string, d time.Duration) {
	t.Helper()
	armed := trace.Kind("renewer.armed", "owner", cfg.Owner, "session", id)
	waitFor(t, tr, armed, 1)
	for ; d > 0; d -= cfg.RenewEvery {
		n := tr.Count(armed)
		st.advance(t, cfg.RenewEvery)
		clk.Advance(cfg.RenewEvery)
		waitFor(t, tr, armed, n+1)
	}
}

// The renewer runs outside the actor: an agent blocked for several lease
// lifetimes keeps its lease, at the same epoch.
func TestRenewerNotStalledByBlockedAgent(t *testing.T) {
	forEachStores(t, func(t *testing.T, newStores func(t *testing.T) *stores) {
		st := newStores(t)
		tr := trace.New()
		cfg, rec, clk := testConfig(st, "a/1", tr)
		ag := newBlockAgent()
		cancelled := make(chan struct{}, 1)
		ag.onCancel = func(context.Context) { cancelled <- struct{}{} }
		cfg.Agent = ag
		m := startManager(t, cfg)
		ctx := context.Background()

		submit(t, m, "s1", "think hard")
		<-ag.started
		advanceBoth(t, st, clk, tr, cfg, "s1", 4*cfg.RenewEvery) // 20 s > 15 s TTL

		if n := tr.Count(trace.Kind("renewer.renewed", "session", "s1", "epoch", int64(1))); n != 4 {
			t.Fatalf("%d renewals, want 4\n%s", n, tr.Dump())
		}
		l, ok, err := st.leases.Get(ctx, "s1")
		if err != nil || !ok || l.Owner != "a/1" || l.Epoch != 1 || l.Remaining <= 0 {
			t.Fatalf("lease after 20 s of blocked turn = %+v %v %v, want a/1's, live, epoch 1", l, ok, err)
		}
		cfgB, _, _ := testConfig(st, "b/1", tr)
		b := startManager(t, cfgB)
		var held *LeaseHeldError
		if _, err := b.Accept(ctx, "s1", textInput("mine?", "")); !errors.As(err, &held) {
			t.Fatalf("B's submit = %v, want *LeaseHeldError", err)
		}
		select {
		case <-cancelled:
			t.Fatal("the blocked turn was cancelled")
		default:
		}
		close(ag.release)
		waitFor(t, tr, trace.Kind("session.emit", "type", agent.TypeTurnCompleted, "epoch", int64(1)), 1)
		if len(rec.ofType(agent.TypeMessage)) != 1 {
			t.Fatalf("published %v", types(rec.all()))
		}
	})
}

// With the lease store failing, the renewer keeps trying on its beat and,
// when its local deadline (claim start + Remaining - RenewMargin) comes,
// cancels the turn and stands the session down while the lease still has
// RenewMargin to run on the store.
func TestRenewerDeadlineCancelsTurn(t *testing.T) {
	forEachStores(t, func(t *testing.T, newStores func(t *testing.T) *stores) {
		st := newStores(t)
		flaky := &flakyLeases{LeaseStore: st.leases}
		tr := trace.New()
		cfg, rec, clk := testConfig(st, "a/1", tr)
		cfg.Leases = flaky
		ag := newBlockAgent()
		atCancel := make(chan Lease, 1)
		ag.onCancel = func(context.Context) {
			l, _, err := st.leases.Get(context.Background(), "s1")
			if err != nil {
				t.Errorf("get lease at cancel: %v", err)
			}
			atCancel <- l
		}
		cfg.Agent = ag
		m := startManager(t, cfg)

		submit(t, m, "s1", "think hard")
		<-ag.started
		flaky.failing.Store(true)
		// 13 s is the deadline (15 s lease - 2 s margin): beats at 5 and 10 s
		// fail, then the renewer waits only the 3 s left.
		advanceBoth(t, st, clk, tr, cfg, "s1", 2*cfg.RenewEvery)
		if n := tr.Count(trace.Kind("renewer.failed", "session", "s1")); n != 2 {
			t.Fatalf("%d failed renewals, want 2\n%s", n, tr.Dump())
		}
		last := tr.Filter(trace.Kind("renewer.armed", "session", "s1"))
		if in := last[len(last)-1].Get("in"); in != 3*time.Second {
			t.Fatalf("renewer armed for %v after the second failure, want the 3 s left to the deadline", in)
		}
		if len(m.Sessions()) != 1 {
			t.Fatal("stood down before the deadline")
		}
		st.advance(t, 3*time.Second)
		clk.Advance(3 * time.Second)

		dl := waitFor(t, tr, trace.Kind("renewer.deadline", "session", "s1"), 1)
		if dl.Get("lapse_in") != cfg.RenewMargin {
			t.Fatalf("deadline with %v left on the lease, want the margin %v", dl.Get("lapse_in"), cfg.RenewMargin)
		}
		l := <-atCancel
		if l.Owner != "a/1" || l.Epoch != 1 || l.Remaining <= 0 {
			t.Fatalf("lease when the turn was cancelled = %+v, want still a/1's and live", l)
		}
		waitFor(t, tr, trace.Kind("session.standdown", "session", "s1"), 1)
		waitGone(t, m, "s1")
		for _, ev := range rec.all() {
			if ev.Type == agent.TypeMessage || ev.Type == agent.TypeTurnCompleted || ev.Type == agent.TypeTurnFailed {
				t.Fatalf("published %s after the deadline", ev.Type)
			}
		}
		if n := tr.Count(trace.Kind("session.checkpoint.before")); n != 0 {
			t.Fatal("a checkpoint was attempted after the deadline")
		}
		// The store stays down: the next input is refused, never run.
		if _, err := m.Accept(context.Background(), "s1", textInput("again", "")); !errors.Is(err, errStoreDown) {
			t.Fatalf("submit with the store down = %v", err)
		}
	})
}

// A renewal that finds another owner's live lease stands the session down.
func TestRenewerLostToAnotherOwner(t *testing.T) {
	forEachStores(t, func(t *testing.T, newStores func(t *testing.T) *stores) {
		st := newStores(t)
		b := startBlockedTurn(t, st)
		tr, cfg, rec, clk, m := b.tr, b.cfg, b.rec, b.clk, b.m
		ctx := context.Background()
		// A pauses; its lease lapses and b/1 claims the session.
		st.advance(t, cfg.LeaseTTL+time.Second)
		if l, err := st.leases.Claim(ctx, "s1", "b/1", cfg.LeaseTTL); err != nil || l.Epoch != 2 {
			t.Fatalf("b/1's claim = %+v, %v", l, err)
		}
		published := len(rec.all())
		clk.Advance(cfg.RenewEvery)

		lost := waitFor(t, tr, trace.Kind("renewer.lost", "session", "s1"), 1)
		if lost.Get("epoch") != int64(1) {
			t.Fatalf("lost = %v", lost)
		}
		waitFor(t, tr, trace.Kind("session.standdown", "session", "s1"), 1)
		waitGone(t, m, "s1")
		if got := rec.all(); len(got) != published {
			t.Fatalf("published %v after losing the lease", types(got[published:]))
		}
		if l, _, _ := st.leases.Get(ctx, "s1"); l.Owner != "b/1" || l.Epoch != 2 {
			t.Fatalf("lease = %+v, want b/1's untouched", l)
		}
	})
}

// A renewal that re-claims a lapsed lease gets a newer epoch: others may
// have owned the session meanwhile, so the session stands down and the new
// lease is handed straight back.
func TestRenewerReclaimedEpochStandsDown(t *testing.T) {
	forEachStores(t, func(t *testing.T, newStores func(t *testing.T) *stores) {
		st := newStores(t)
		b := startBlockedTurn(t, st)
		tr, cfg, clk, m := b.tr, b.cfg, b.clk, b.m
		ctx := context.Background()
		st.advance(t, cfg.LeaseTTL+time.Second)
		clk.Advance(cfg.RenewEvery)

		waitFor(t, tr, trace.Kind("renewer.lost", "session", "s1"), 1)
		waitGone(t, m, "s1")
		l, _, err := st.leases.Get(ctx, "s1")
		if err != nil || l.Owner != "a/1" || l.Epoch != 2 || l.Remaining > 0 {
			t.Fatalf("lease = %+v, %v; want epoch 2 handed back (expired)", l, err)
		}
		if l, err := st.leases.Claim(ctx, "s1", "b/1", cfg.LeaseTTL); err != nil || l.Epoch != 3 {
			t.Fatalf("b/1's claim = %+v, %v; want epoch 3 at once", l, err)
		}
	})
}

// Real clocks against Postgres: a turn blocked for longer than the lease TTL
// keeps its lease. Timings are generous; the assertions are about the lease,
// not about durations.
func TestRenewerRealClockCluster(t *testing.T) {
	st := clusterStores(t)
	tr := trace.New()
	cfg, _, _ := testConfig(st, "a/1", tr)
	cfg.Clock = nil
	cfg.LeaseTTL, cfg.RenewEvery, cfg.RenewMargin = 2*time.Second, 200*time.Millisecond, 800*time.Millisecond
	ag := newBlockAgent()
	cancelled := make(chan struct{}, 1)
	ag.onCancel = func(context.Context) { cancelled <- struct{}{} }
	cfg.Agent = ag
	m := startManager(t, cfg)
	ctx := context.Background()

	submit(t, m, "s1", "think")
	<-ag.started
	began := time.Now()
	renewed := trace.Kind("renewer.renewed", "session", "s1", "epoch", int64(1))
	for n := 1; time.Since(began) <= cfg.LeaseTTL+cfg.RenewEvery; n++ {
		waitFor(t, tr, renewed, n)
	}
	l, ok, err := st.leases.Get(ctx, "s1")
	if err != nil || !ok || l.Owner != "a/1" || l.Epoch != 1 || l.Remaining <= 0 {
		t.Fatalf("lease after a turn blocked past the TTL = %+v %v %v", l, ok, err)
	}
	select {
	case <-cancelled:
		t.Fatalf("turn cancelled\n%s", tr.Dump())
	default:
	}
	close(ag.release)
	waitFor(t, tr, trace.Kind("session.emit", "type", agent.TypeTurnCompleted), 1)
}

// blockedTurn is owner a/1 running a turn of session s1 whose agent blocks,
// with the session's renewer armed.
type blockedTurn struct {
	tr  *trace.Tracer
	cfg Config
	rec *recorder
	clk *fakeClock
	m   *Manager
}

func startBlockedTurn(t *testing.T, st *stores) blockedTurn {
	t.Helper()
	tr := trace.New()
	cfg, rec, clk := testConfig(st, "a/1", tr)
	ag := newBlockAgent()
	cfg.Agent = ag
	m := startManager(t, cfg)
	submit(t, m, "s1", "think")
	<-ag.started
	waitFor(t, tr, trace.Kind("renewer.armed", "session", "s1"), 1)
	return blockedTurn{tr: tr, cfg: cfg, rec: rec, clk: clk, m: m}
}

// gatedLeases holds every Claim while armed until gate is closed, then
// records whether the claim's context had been cancelled meanwhile.
type gatedLeases struct {
	LeaseStore
	armed     atomic.Bool
	entered   chan struct{}
	gate      chan struct{}
	cancelled atomic.Bool
}

func (g *gatedLeases) Claim(ctx context.Context, key, owner string, ttl time.Duration) (Lease, error) {
	if g.armed.CompareAndSwap(true, false) {
		g.entered <- struct{}{}
		<-g.gate
		g.cancelled.Store(ctx.Err() != nil)
	}
	return g.LeaseStore.Claim(ctx, key, owner, ttl)
}

// A renewal in flight when its actor retires is waited for, not
// cancelled: a cancelled statement can still be applied by the database
// after the client gave up on it, and would extend the lease after the
// actor's release. Here a drain retires the actor while a renewal is held
// in the lease store: the renewal's context is still live when it goes
// through, and the lease is released after it (the next claim elsewhere
// succeeds at once).
func TestRenewalInFlightIsNotCancelledByRetirement(t *testing.T) {
	st := memoryStores()
	g := &gatedLeases{LeaseStore: st.leases, entered: make(chan struct{}), gate: make(chan struct{})}
	st.leases = g
	tr := trace.New()
	cfg, _, clk := testConfig(st, "a/1", tr)
	m := startManager(t, cfg)
	submit(t, m, "s1", "hello")
	waitFor(t, tr, trace.Kind("session.emit", "owner", "a/1", "type", agent.TypeTurnCompleted), 1)
	waitFor(t, tr, trace.Kind("renewer.armed", "owner", "a/1"), 1)
	g.armed.Store(true)
	clk.Advance(cfg.RenewEvery)
	<-g.entered // the renewal is in the lease store

	drained := make(chan error, 1)
	go func() { drained <- m.Drain(context.Background()) }()
	waitFor(t, tr, trace.Kind("renewer.stopping", "owner", "a/1"), 1)
	close(g.gate)
	if err := <-drained; err != nil {
		t.Fatal(err)
	}
	if g.cancelled.Load() {
		t.Fatal("the renewal's context was cancelled by the actor's retirement")
	}
	if l, _, err := st.leases.Get(context.Background(), "s1"); err != nil || l.Remaining > 0 {
		t.Fatalf("lease after the drain = %+v, %v; want it released after the renewal", l, err)
	}
}
