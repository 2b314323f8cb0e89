package session_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/testkit/testenv"
	"github.com/relaygw/relay/internal/trace"
	"github.com/relaygw/relay/session"
	"github.com/relaygw/relay/session/memforward"
)

// Submit's routing over the in-process network (docs/OWNERSHIP.md "Event
// (write)"): every outcome of a forward, produced with faults and forced
// orderings instead of processes and a TCP proxy.

const routeTTL = 15 * time.Second

// routeEnv is a cluster of managers sharing one lease store (on a manual
// clock, so leases lapse when the test says) and one session store.
type routeEnv struct {
	t      *testing.T
	clock  *session.ManualClock
	leases *session.MemoryLeaseStore
	cps    *session.MemorySessionStore
	net    *memforward.Network
}

func newRouteEnv(t *testing.T) *routeEnv {
	clock := session.NewManualClock(time.Unix(1_700_000_000, 0))
	e := &routeEnv{
		t:      t,
		clock:  clock,
		leases: session.NewMemoryLeaseStore(session.WithMemoryClock(clock.Now)),
		cps:    session.NewMemorySessionStore(),
		net:    memforward.New(),
	}
	t.Cleanup(e.net.Close)
	return e
}

// node starts a manager for owner "<node>/<incarnation>" attached to the
// network under its node name. A nil tracer records nothing.
func (e *routeEnv) node(owner string, tr *trace.Tracer, tune func(*session.Config)) *session.Manager {
	cfg := session.Config{
		Owner:     owner,
		Leases:    e.leases,
		Store:     e.cps,
		Forwarder: e.net.Forwarder(),
		LeaseTTL:  routeTTL,
		Tracer:    tr,
	}
	if tune != nil {
		tune(&cfg)
	}
	m := session.NewManager(cfg)
	e.t.Cleanup(m.Close)
	e.net.Attach(session.NodeOf(owner), m)
	return m
}

// crash detaches m's node from the network and stops m without handing its
// leases back: they stay live until the clock passes their expiry.
func (e *routeEnv) crash(owner string, m *session.Manager) {
	e.net.Detach(session.NodeOf(owner))
	m.Close()
}

func input(text, key string) agent.Input {
	return agent.Input{Type: "message", Data: json.RawMessage(`{"text":"` + text + `"}`), IdempotencyKey: key}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustAccepted(t *testing.T, out session.Outcome) session.Accepted {
	t.Helper()
	if out.Kind != session.OutcomeAccepted || out.Err != nil {
		t.Fatalf("outcome %v (err %v), want accepted", out.Kind, out.Err)
	}
	return out.Accepted
}

// TestSubmitForwardsToHolder: a node that does not hold the lease forwards
// to the one that does, which accepts at its epoch; the idempotency key
// lives at the owner, so a re-send through the same node is a duplicate.
func TestSubmitForwardsToHolder(t *testing.T) {
	e := newRouteEnv(t)
	a, b := e.node("a/1", nil, nil), e.node("b/1", nil, nil)
	ctx := ctxT(t)
	first := mustAccepted(t, a.Submit(ctx, "s1", input("on a", "k1")))

	out := b.Submit(ctx, "s1", input("via b", "k2"))
	fwd := mustAccepted(t, out)
	if fwd.Epoch != first.Epoch || fwd.Seq <= first.Seq || fwd.Duplicate || out.Hops != 1 {
		t.Fatalf("forwarded input accepted as %+v (hops %d) after %+v", fwd, out.Hops, first)
	}
	dup := mustAccepted(t, b.Submit(ctx, "s1", input("via b", "k2")))
	if !dup.Duplicate || dup.Seq != fwd.Seq {
		t.Fatalf("re-sent key answered %+v, want the duplicate of %+v", dup, fwd)
	}
	if sa, sb := a.Stats(), b.Stats(); sa.Accepted != 2 || sa.Duplicates != 1 || sb.Accepted != 0 || sb.Forwards != 2 || sa.Forwards != 0 {
		t.Fatalf("stats a %+v, b %+v", sa, sb)
	}
	if len(b.Sessions()) != 0 {
		t.Fatalf("b runs %v while a holds the lease", b.Sessions())
	}
}

// TestSubmitForwardTimeout: a forward the owner does not answer in time
// fails with ErrForwardTimeout and may still run: the held request is
// released after the caller gave up, the owner accepts it, and the re-send
// with the same key is a duplicate. A dropped forward times out the same
// way and never runs.
func TestSubmitForwardTimeout(t *testing.T) {
	e := newRouteEnv(t)
	a, b := e.node("a/1", nil, nil), e.node("b/1", nil, nil)
	ctx := ctxT(t)
	mustAccepted(t, a.Submit(ctx, "s1", input("first", "k1")))

	// The deadline passes once the request is on the wire, held there.
	held := e.net.Hold("a")
	late := testenv.NewExpiringContext(ctxT(t))
	go func() { <-held.Arrived(); late.Expire() }()
	out := b.Submit(late, "s1", input("late", "k-late"))
	if out.Kind != session.OutcomeFailed || !errors.Is(out.Err, session.ErrForwardTimeout) || out.Hops != 1 {
		t.Fatalf("held forward: %v %v (hops %d), want failed with ErrForwardTimeout", out.Kind, out.Err, out.Hops)
	}
	held.Release()
	rep := held.Reply()
	if rep.Accepted == nil || rep.Accepted.Duplicate {
		t.Fatalf("the released request was answered %+v, want accepted", rep)
	}
	again := mustAccepted(t, b.Submit(ctx, "s1", input("late", "k-late")))
	if !again.Duplicate || again.Seq != rep.Accepted.Seq {
		t.Fatalf("re-send after the timeout: %+v, want the duplicate of %+v", again, *rep.Accepted)
	}

	lost := testenv.NewExpiringContext(ctxT(t))
	sent := e.net.Drop("a")
	go func() { <-sent; lost.Expire() }()
	out = b.Submit(lost, "s1", input("lost", "k-lost"))
	if out.Kind != session.OutcomeFailed || !errors.Is(out.Err, session.ErrForwardTimeout) {
		t.Fatalf("dropped forward: %v %v, want failed with ErrForwardTimeout", out.Kind, out.Err)
	}
	if st := a.Stats(); st.Accepted != 2 {
		t.Fatalf("a accepted %d inputs, want 2 (the dropped one never arrived)", st.Accepted)
	}
}

// TestSubmitRemoteErrorKeepsCode: the owner's error answer arrives with its
// code. Busy and internal fail (the caller learns the code); draining,
// fenced and unavailable refuse with a retry directive (nothing ran there).
func TestSubmitRemoteErrorKeepsCode(t *testing.T) {
	e := newRouteEnv(t)
	a, b := e.node("a/1", nil, nil), e.node("b/1", nil, nil)
	ctx := ctxT(t)
	mustAccepted(t, a.Submit(ctx, "s1", input("first", "k1")))

	for _, tc := range []struct {
		code string
		kind session.OutcomeKind
		is   error // nil: no sentinel
	}{
		{session.CodeBusy, session.OutcomeFailed, session.ErrBusy},
		{session.CodeInternal, session.OutcomeFailed, nil},
		{"from_a_newer_version", session.OutcomeFailed, nil},
		{session.CodeDraining, session.OutcomeRefused, session.ErrDraining},
		{session.CodeFenced, session.OutcomeRefused, session.ErrFenced},
		{session.CodeUnavailable, session.OutcomeRefused, session.ErrStoreUnavailable},
	} {
		e.net.Fail("a", &session.RemoteError{Code: tc.code, Message: "from a"})
		out := b.Submit(ctx, "s1", input("x", "k"))
		var re *session.RemoteError
		if out.Kind != tc.kind || !errors.As(out.Err, &re) || re.Code != tc.code || re.Message != "from a" ||
			(tc.is != nil && !errors.Is(out.Err, tc.is)) {
			t.Errorf("owner answered %s: %v %v, want %v with the code kept", tc.code, out.Kind, out.Err, tc.kind)
		}
		if tc.kind == session.OutcomeRefused && !jittered(out.Retry.After, 100*time.Millisecond) {
			t.Errorf("owner answered %s: retry %+v, want the minimal delay", tc.code, out.Retry)
		}
	}
	if st := a.Stats(); st.Accepted != 1 {
		t.Fatalf("a accepted %d inputs, want only the first", st.Accepted)
	}
}

// TestSubmitUnreachableTakesOver: the holder dies between the claim and the
// forward, and its lease lapses: the forward finds nobody, the fresh claim
// takes the session over at epoch + 1, and the input runs here.
func TestSubmitUnreachableTakesOver(t *testing.T) {
	e := newRouteEnv(t)
	tr := trace.New()
	a := e.node("a/1", nil, nil)
	b := e.node("b/1", tr, nil)
	ctx := ctxT(t)
	first := mustAccepted(t, a.Submit(ctx, "s1", input("first", "k1")))

	done := submitParkedAtForward(t, tr, b, "a/1", "test.lapsed", input("second", "k2"))
	e.crash("a/1", a)
	e.clock.Advance(routeTTL + time.Second)
	tr.Emit("test.lapsed")

	out := <-done
	acc := mustAccepted(t, out)
	if acc.Epoch != first.Epoch+1 || out.Hops != 1 {
		t.Fatalf("after the holder died: %+v (hops %d), want epoch %d here", acc, out.Hops, first.Epoch+1)
	}
	if tr.Count(trace.Kind("session.route.reresolve")) != 1 || e.net.Sent("a") != 1 {
		t.Fatalf("want one unreachable hop and one re-resolve:\n%s", tr.Dump())
	}
	if f := tr.Failures(); len(f) > 0 {
		t.Fatal(f)
	}
}

// TestSubmitUnreachableForwardsToNewHolder: the holder dies, its lease
// lapses and a third node takes the session: the fresh claim names the new
// holder and the input is forwarded there.
func TestSubmitUnreachableForwardsToNewHolder(t *testing.T) {
	e := newRouteEnv(t)
	tr := trace.New()
	a, c := e.node("a/1", nil, nil), e.node("c/1", nil, nil)
	b := e.node("b/1", tr, nil)
	ctx := ctxT(t)
	mustAccepted(t, a.Submit(ctx, "s1", input("first", "k1")))

	done := submitParkedAtForward(t, tr, b, "a/1", "test.moved", input("second", "k2"))
	e.crash("a/1", a)
	e.clock.Advance(routeTTL + time.Second)
	onC := mustAccepted(t, c.Submit(ctx, "s1", input("on c", "k3")))
	tr.Emit("test.moved")

	out := <-done
	acc := mustAccepted(t, out)
	if acc.Epoch != onC.Epoch || acc.Seq <= onC.Seq || out.Hops != 2 {
		t.Fatalf("forwarded to the new holder: %+v (hops %d) after %+v on c", acc, out.Hops, onC)
	}
	if e.net.Sent("a") != 1 || e.net.Sent("c") != 1 || len(b.Sessions()) != 0 {
		t.Fatalf("sent a %d, c %d; b runs %v", e.net.Sent("a"), e.net.Sent("c"), b.Sessions())
	}
}

// TestSubmitSecondUnreachableRefuses: the holder is dead but its lease is
// live. One unreachable hop, a fresh claim that meets the same lease, a
// second unreachable hop: refused with the directive derived from the
// holder's remaining lease, and nothing ran.
func TestSubmitSecondUnreachableRefuses(t *testing.T) {
	e := newRouteEnv(t)
	a, b := e.node("a/1", nil, nil), e.node("b/1", nil, nil)
	ctx := ctxT(t)
	mustAccepted(t, a.Submit(ctx, "s1", input("first", "k1")))
	e.crash("a/1", a)
	e.clock.Advance(5 * time.Second)

	out := b.Submit(ctx, "s1", input("second", "k2"))
	var held *session.LeaseHeldError
	if out.Kind != session.OutcomeRefused || !errors.As(out.Err, &held) || held.Holder != "a/1" || out.Hops != 2 {
		t.Fatalf("outcome %v %v (hops %d), want refused with a's lease", out.Kind, out.Err, out.Hops)
	}
	left := routeTTL - 5*time.Second
	if !jittered(out.Retry.After, left+50*time.Millisecond) || out.Retry.Budget != out.Retry.After+routeTTL+time.Second {
		t.Fatalf("retry %+v, want after %v (a's %v left + slack)", out.Retry, left+50*time.Millisecond, left)
	}
	if e.net.Sent("a") != 2 || b.Stats().Accepted != 0 || len(b.Sessions()) != 0 {
		t.Fatalf("sent %d, b accepted %d", e.net.Sent("a"), b.Stats().Accepted)
	}
}

// TestSubmitLeaseHeldCrossesTheWire: the owner answers that a third process
// holds the lease; the holder, epoch and remaining time it reported survive
// the wire, the caller forwards there, and when the third stays unreachable
// the refusal's delay is the third's remaining time.
func TestSubmitLeaseHeldCrossesTheWire(t *testing.T) {
	e := newRouteEnv(t)
	a, b := e.node("a/1", nil, nil), e.node("b/1", nil, nil)
	ctx := ctxT(t)
	mustAccepted(t, a.Submit(ctx, "s1", input("first", "k1")))
	third := &session.LeaseHeldError{Key: "s1", Holder: "c/7", Epoch: 9, Remaining: 7*time.Second + 3*time.Millisecond}
	e.net.Fail("a", &session.RemoteError{Code: session.CodeLeaseHeld, Message: "moved", Held: third})
	e.net.Fail("a", &session.RemoteError{Code: session.CodeLeaseHeld, Message: "moved", Held: third})

	out := b.Submit(ctx, "s1", input("second", "k2"))
	var held *session.LeaseHeldError
	if out.Kind != session.OutcomeRefused || !errors.As(out.Err, &held) || *held != *third {
		t.Fatalf("outcome %v %v, want refused with %+v", out.Kind, out.Err, *third)
	}
	if !jittered(out.Retry.After, third.Remaining+50*time.Millisecond) || out.Hops != 4 {
		t.Fatalf("retry %+v after %d hops, want the third's remaining time after 4", out.Retry, out.Hops)
	}
	if e.net.Sent("a") != 2 || e.net.Sent("c") != 2 {
		t.Fatalf("sent a %d, c %d, want 2 each", e.net.Sent("a"), e.net.Sent("c"))
	}
}

// TestSubmitLeaseMovedBack: between this node's claim and its forward the
// lease came back to this process; the owner it forwarded to says so, and
// the input runs here.
func TestSubmitLeaseMovedBack(t *testing.T) {
	e := newRouteEnv(t)
	tr := trace.New()
	a := e.node("a/1", nil, nil)
	b := e.node("b/1", tr, nil)
	ctx := ctxT(t)
	mustAccepted(t, a.Submit(ctx, "s1", input("first", "k1")))

	done := submitParkedAtForward(t, tr, b, "a/1", "test.back", input("second", "k2"))
	if err := a.Drain(ctx); err != nil { // hands the lease back
		t.Fatal(err)
	}
	e.node("a/2", nil, nil) // a's next process answers for node a
	mine, err := b.Accept(ctx, "s1", input("taken", "k3"))
	if err != nil {
		t.Fatal(err)
	}
	tr.Emit("test.back")

	out := <-done
	acc := mustAccepted(t, out)
	if acc.Epoch != mine.Epoch || acc.Seq <= mine.Seq || out.Hops != 1 {
		t.Fatalf("accepted %+v (hops %d), want b's epoch %d after %+v", acc, out.Hops, mine.Epoch, mine)
	}
}

// TestSubmitPredecessorRefusesWithoutForwarding: a predecessor process
// under this node's name holds the lease: it is gone, so the input is
// refused with the directive of its remaining lease and nothing is sent.
func TestSubmitPredecessorRefusesWithoutForwarding(t *testing.T) {
	e := newRouteEnv(t)
	a := e.node("a/1", nil, nil)
	ctx := ctxT(t)
	mustAccepted(t, a.Submit(ctx, "s1", input("first", "k1")))
	e.crash("a/1", a)
	a2 := e.node("a/2", nil, nil)

	out := a2.Submit(ctx, "s1", input("second", "k2"))
	var held *session.LeaseHeldError
	if out.Kind != session.OutcomeRefused || !errors.As(out.Err, &held) || held.Holder != "a/1" || out.Hops != 0 {
		t.Fatalf("outcome %v %v (hops %d), want refused with a/1's lease and no hop", out.Kind, out.Err, out.Hops)
	}
	if !jittered(out.Retry.After, routeTTL+50*time.Millisecond) || e.net.Sent("a") != 0 || a2.Stats().Forwards != 0 {
		t.Fatalf("retry %+v, sent %d", out.Retry, e.net.Sent("a"))
	}
}

// TestSubmitRefusesBeforeRouting: a draining node refuses before claiming; a node
// without a Forwarder refuses another owner's live lease; a bad id fails.
func TestSubmitRefusesBeforeRouting(t *testing.T) {
	e := newRouteEnv(t)
	a := e.node("a/1", nil, nil)
	single := e.node("s/1", nil, func(c *session.Config) { c.Forwarder = nil })
	ctx := ctxT(t)
	mustAccepted(t, a.Submit(ctx, "s1", input("first", "k1")))

	out := single.Submit(ctx, "s1", input("x", "k2"))
	var held *session.LeaseHeldError
	if out.Kind != session.OutcomeRefused || !errors.As(out.Err, &held) || !jittered(out.Retry.After, routeTTL+50*time.Millisecond) {
		t.Fatalf("without a forwarder: %v %v %+v", out.Kind, out.Err, out.Retry)
	}
	if out := a.Submit(ctx, "bad id", input("x", "")); out.Kind != session.OutcomeFailed || !errors.Is(out.Err, session.ErrInvalidID) {
		t.Fatalf("bad id: %v %v", out.Kind, out.Err)
	}
	if err := a.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	out = a.Submit(ctx, "s2", input("x", "k3"))
	if out.Kind != session.OutcomeRefused || !errors.Is(out.Err, session.ErrDraining) || !jittered(out.Retry.After, 100*time.Millisecond) {
		t.Fatalf("draining: %v %v %+v", out.Kind, out.Err, out.Retry)
	}
	if _, ok, _ := e.leases.Get(ctx, "s2"); ok {
		t.Fatal("a draining node claimed a lease")
	}
}

// A key reused with another body is refused on the owner and through a
// forward alike (idempotency_key_reused crosses the wire as a RemoteError
// code), and nothing is accepted; the same body is a duplicate with the
// original position, whichever node it came through.
func TestKeyReusedRefusedThroughForward(t *testing.T) {
	e := newRouteEnv(t)
	a := e.node("a/1", nil, nil)
	b := e.node("b/1", nil, nil)
	ctx := ctxT(t)
	first := mustAccepted(t, a.Submit(ctx, "s1", input("pay 10", "k1")))

	local := a.Submit(ctx, "s1", input("pay 99", "k1"))
	if local.Kind != session.OutcomeFailed || !errors.Is(local.Err, session.ErrIdempotencyKeyReused) {
		t.Fatalf("reuse on the owner = %v %v, want failed with ErrIdempotencyKeyReused", local.Kind, local.Err)
	}
	fwd := b.Submit(ctx, "s1", input("pay 99", "k1"))
	var re *session.RemoteError
	if fwd.Kind != session.OutcomeFailed || fwd.Hops != 1 || !errors.As(fwd.Err, &re) || re.Code != session.CodeKeyReused ||
		!errors.Is(fwd.Err, session.ErrIdempotencyKeyReused) {
		t.Fatalf("reuse through a forward = %v %v (hops %d), want failed with code %s", fwd.Kind, fwd.Err, fwd.Hops, session.CodeKeyReused)
	}
	for _, m := range []*session.Manager{a, b} {
		dup := mustAccepted(t, m.Submit(ctx, "s1", input("pay 10", "k1")))
		if !dup.Duplicate || dup.Epoch != first.Epoch || dup.Seq != first.Seq {
			t.Fatalf("same body = %+v, want the duplicate of %+v", dup, first)
		}
	}
	if s := a.Stats(); s.Accepted != 1 || s.Duplicates != 2 {
		t.Fatalf("owner stats = %+v, want 1 accepted and 2 duplicates", s)
	}
}

// submitParkedAtForward submits in on m in the background, parks it at its
// forward to holder until the trace event release is emitted, and returns
// once the forward is parked; the outcome arrives on the channel.
func submitParkedAtForward(t *testing.T, tr *trace.Tracer, m *session.Manager, holder, release string, in agent.Input) <-chan session.Outcome {
	t.Helper()
	ctx := ctxT(t)
	tr.Park(trace.Kind("session.forward", "holder", holder), trace.Kind(release))
	done := make(chan session.Outcome, 1)
	go func() { done <- m.Submit(ctx, "s1", in) }()
	if _, err := tr.WaitFor(ctx, trace.Kind("session.forward")); err != nil {
		t.Fatal(err)
	}
	return done
}

// The owner checks the input contract itself: an input that breaks it
// (a lone surrogate here, which Postgres would refuse) is refused with
// invalid_input when it arrives as a forward from a node that did not
// check, and when a non-owner's Submit forwards it; nothing is accepted
// and the session keeps working.
func TestInvalidInputRefusedByOwner(t *testing.T) {
	e := newRouteEnv(t)
	a := e.node("a/1", nil, nil)
	b := e.node("b/1", nil, nil)
	ctx := ctxT(t)
	mustAccepted(t, a.Submit(ctx, "s1", input("hello", "")))
	bad := agent.Input{Type: "message", Data: json.RawMessage(`{"text":"\ud800"}`)}

	reply := a.HandleForward(ctx, session.ForwardRequest{Session: "s1", Input: bad})
	if reply.Error == nil || reply.Error.Code != session.CodeInvalid || reply.Accepted != nil {
		t.Fatalf("forward of an invalid input = %+v, want code %s", reply, session.CodeInvalid)
	}
	out := b.Submit(ctx, "s1", bad)
	if out.Kind != session.OutcomeFailed || !errors.Is(out.Err, agent.ErrInvalidInput) {
		t.Fatalf("submit through b = %v %v, want failed with ErrInvalidInput", out.Kind, out.Err)
	}
	mustAccepted(t, b.Submit(ctx, "s1", input("still here", "")))
	if s := a.Stats(); s.Accepted != 2 || s.StandDowns != 0 {
		t.Fatalf("owner stats = %+v, want 2 accepted and no stand-down", s)
	}
}

// jittered reports whether after is base plus a retry jitter (under
// session.RetryJitter).
func jittered(after, base time.Duration) bool {
	return after >= base && after < base+session.RetryJitter
}

// A stop posted to a node that does not own the session is forwarded to
// the owner, which stops its running turn; the answer crosses the wire.
// The owner's not_running answer crosses it too.
func TestControlForwardsToOwner(t *testing.T) {
	e := newRouteEnv(t)
	block := make(chan struct{})
	started := make(chan struct{}, 4)
	ag := agentFunc(func(ctx context.Context, turn agent.Turn, emit agent.Emit) (agent.Message, error) {
		if err := emit(ctx, agent.TypeDelta, map[string]string{"text": "part"}); err != nil {
			return agent.Message{}, err
		}
		started <- struct{}{}
		select {
		case <-ctx.Done():
			return agent.Message{}, context.Cause(ctx)
		case <-block:
		}
		return agent.Message{Role: "assistant", Content: "whole"}, nil
	})
	tune := func(c *session.Config) { c.Agent = ag }
	a, b := e.node("a/1", nil, tune), e.node("b/1", nil, tune)
	ctx := ctxT(t)
	acc := mustAccepted(t, a.Submit(ctx, "s1", input("one", "")))
	<-started

	out := b.Control(ctx, "s1", session.Control{Op: session.OpStop, Turn: agent.Position{Epoch: 1, Seq: 99}})
	r := mustAccepted(t, out).Control
	if r == nil || r.Stopped || r.Reason != session.ReasonNotRunning || r.Running == nil || *r.Running != acc.Pos() || out.Hops != 1 {
		t.Fatalf("forwarded stop of an unknown turn = %+v (hops %d), want not_running naming %v", r, out.Hops, acc.Pos())
	}
	out = b.Control(ctx, "s1", session.Control{Op: session.OpStop, Turn: acc.Pos()})
	r = mustAccepted(t, out).Control
	if r == nil || !r.Stopped || r.Turn != acc.Pos() {
		t.Fatalf("forwarded stop = %+v, want stopped %v", r, acc.Pos())
	}
	st, err := a.State(ctx, "s1", session.HistoryQuery{})
	if err != nil || len(st.History) != 2 || !st.History[1].Stopped || st.History[1].Content != "part" {
		t.Fatalf("history after the stop = %+v (%v), want the partial reply marked stopped", st.History, err)
	}
	if len(b.Sessions()) != 0 {
		t.Fatalf("b runs %v while a holds the lease", b.Sessions())
	}
	bad := b.Control(ctx, "s1", session.Control{Op: "pause", Turn: acc.Pos()})
	if bad.Kind != session.OutcomeFailed || !errors.Is(bad.Err, session.ErrInvalidControl) {
		t.Fatalf("unknown op = %v %v, want failed ErrInvalidControl", bad.Kind, bad.Err)
	}
}

// A reject refusal at the owner crosses the wire with the running turn.
func TestTurnBusyCrossesTheWire(t *testing.T) {
	e := newRouteEnv(t)
	started := make(chan struct{}, 4)
	ag := agentFunc(func(ctx context.Context, turn agent.Turn, emit agent.Emit) (agent.Message, error) {
		started <- struct{}{}
		<-ctx.Done()
		return agent.Message{}, ctx.Err()
	})
	tune := func(c *session.Config) { c.Agent = ag }
	a, b := e.node("a/1", nil, tune), e.node("b/1", nil, tune)
	ctx := ctxT(t)
	acc := mustAccepted(t, a.Submit(ctx, "s1", input("one", "")))
	<-started
	in := input("two", "")
	in.Multitask = session.MultitaskReject
	out := b.Submit(ctx, "s1", in)
	var busy *session.TurnBusyError
	if out.Kind != session.OutcomeFailed || !errors.As(out.Err, &busy) || busy.Turn != acc.Pos() {
		t.Fatalf("rejected input through a forward = %v %v, want failed TurnBusyError naming %v", out.Kind, out.Err, acc.Pos())
	}
}

type agentFunc func(ctx context.Context, turn agent.Turn, emit agent.Emit) (agent.Message, error)

func (f agentFunc) Run(ctx context.Context, turn agent.Turn, emit agent.Emit) (agent.Message, error) {
	return f(ctx, turn, emit)
}

// A stop sent while the owner is gone but its lease still live is refused
// with a retry directive (nothing reached a turn); re-sent after the lease
// lapsed, it reaches the node that takes the session over, which restarts
// the turn from the inbox and stops that turn: the one the stop named.
func TestStopDuringTakeoverRetriedReachesNewOwner(t *testing.T) {
	e := newRouteEnv(t)
	started := make(chan string, 8)
	ag := agentFunc(func(ctx context.Context, turn agent.Turn, emit agent.Emit) (agent.Message, error) {
		started <- turn.ID.String()
		<-ctx.Done()
		return agent.Message{}, context.Cause(ctx)
	})
	tune := func(c *session.Config) { c.Agent = ag }
	a := e.node("a/1", nil, tune)
	b := e.node("b/1", nil, tune)
	ctx := ctxT(t)
	acc := mustAccepted(t, a.Submit(ctx, "s1", input("long", "")))
	if got := <-started; got != acc.Pos().String() {
		t.Fatalf("turn %s started, want %v", got, acc.Pos())
	}
	e.crash("a/1", a)

	stop := session.Control{Op: session.OpStop, Turn: acc.Pos()}
	out := b.Control(ctx, "s1", stop)
	if out.Kind != session.OutcomeRefused || out.Retry.After <= 0 {
		t.Fatalf("stop during the takeover window = %v %v (retry %+v), want refused with a retry directive", out.Kind, out.Err, out.Retry)
	}
	e.clock.Advance(routeTTL + time.Second)
	out = b.Control(ctx, "s1", stop)
	r := mustAccepted(t, out).Control
	if r == nil || !r.Stopped || r.Turn != acc.Pos() {
		t.Fatalf("re-sent stop = %+v, want the turn stopped on the new owner", r)
	}
	if got := <-started; got != acc.Pos().String() {
		t.Fatalf("the new owner ran turn %s, want %v", got, acc.Pos())
	}
	st, err := b.State(ctx, "s1", session.HistoryQuery{})
	if err != nil || len(st.History) != 2 || !st.History[1].Stopped || st.Epoch != acc.Epoch+1 || len(st.Pending) != 0 {
		t.Fatalf("state after the stop = %+v (%v), want the turn ended stopped at epoch %d", st, err, acc.Epoch+1)
	}
}
