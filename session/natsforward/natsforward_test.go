package natsforward_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/testkit/testenv"
	"github.com/relaygw/relay/internal/trace"
	"github.com/relaygw/relay/session"
	"github.com/relaygw/relay/session/natsforward"
)

// Submit's forward outcomes once more over real NATS: managers on their own
// connections, on a subject prefix of their own, sharing one lease store
// on a manual clock and one checkpoint store.

const ttl = 15 * time.Second

type env struct {
	t      *testing.T
	prefix string
	clock  *session.ManualClock
	leases *session.MemoryLeaseStore
	cps    *session.MemorySessionStore
}

func newEnv(t *testing.T) *env {
	clock := session.NewManualClock(time.Unix(1_700_000_000, 0))
	return &env{
		t:      t,
		prefix: testenv.NATSPrefix(t),
		clock:  clock,
		leases: session.NewMemoryLeaseStore(session.WithMemoryClock(clock.Now)),
		cps:    session.NewMemorySessionStore(),
	}
}

// node is one process: a NATS connection, a Forwarder serving its node's
// subject, and a Manager.
type node struct {
	m    *session.Manager
	nc   *nats.Conn
	stop func()
}

func (e *env) node(owner string, tr *trace.Tracer) *node {
	nc := testenv.NATSConn(e.t)
	f := natsforward.New(nc, natsforward.Config{Prefix: e.prefix, Node: session.NodeOf(owner)})
	m := session.NewManager(session.Config{
		Owner: owner, Leases: e.leases, Store: e.cps, Forwarder: f, LeaseTTL: ttl, Tracer: tr,
	})
	stop, err := f.Serve(m)
	if err != nil {
		e.t.Fatal(err)
	}
	n := &node{m: m, nc: nc, stop: stop}
	e.t.Cleanup(n.crash)
	return n
}

// crash stops serving and stops the manager without handing leases back.
func (n *node) crash() {
	n.stop()
	n.m.Close()
}

// handlerFunc is a stand-in owner node answering forwards itself.
type handlerFunc func(context.Context, session.ForwardRequest) session.ForwardReply

func (f handlerFunc) HandleForward(ctx context.Context, req session.ForwardRequest) session.ForwardReply {
	return f(ctx, req)
}

func input(text, key string) agent.Input {
	return agent.Input{Type: "message", Data: json.RawMessage(`{"text":"` + text + `"}`), IdempotencyKey: key}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func accepted(t *testing.T, out session.Outcome) session.Accepted {
	t.Helper()
	if out.Kind != session.OutcomeAccepted {
		t.Fatalf("outcome %v (%v), want accepted", out.Kind, out.Err)
	}
	return out.Accepted
}

// TestNATSForwardAccepted: b forwards to a, which accepts at its epoch; the
// re-sent key is a duplicate.
func TestNATSForwardAccepted(t *testing.T) {
	e := newEnv(t)
	a, b := e.node("a/1", nil), e.node("b/1", nil)
	ctx := ctxT(t)
	first := accepted(t, a.m.Submit(ctx, "s1", input("on a", "k1")))
	out := b.m.Submit(ctx, "s1", input("via b", "k2"))
	fwd := accepted(t, out)
	if fwd.Epoch != first.Epoch || fwd.Seq <= first.Seq || out.Hops != 1 {
		t.Fatalf("forwarded: %+v (hops %d) after %+v", fwd, out.Hops, first)
	}
	if dup := accepted(t, b.m.Submit(ctx, "s1", input("via b", "k2"))); !dup.Duplicate || dup.Seq != fwd.Seq {
		t.Fatalf("re-send: %+v", dup)
	}
	if a.m.Stats().Accepted != 2 || b.m.Stats().Accepted != 0 {
		t.Fatalf("a accepted %d, b %d", a.m.Stats().Accepted, b.m.Stats().Accepted)
	}
}

// TestNATSForwardTimeout: a's handler is parked until b's deadline has
// passed: b fails with ErrForwardTimeout; released, a accepts the input,
// and b's re-send is a duplicate.
func TestNATSForwardTimeout(t *testing.T) {
	e := newEnv(t)
	tra := trace.New()
	a, b := e.node("a/1", tra), e.node("b/1", nil)
	ctx := ctxT(t)
	accepted(t, a.m.Submit(ctx, "s1", input("first", "k1")))

	tra.Park(trace.Kind("session.forward.serve"), trace.Kind("test.release"))
	late := testenv.NewExpiringContext(ctx)
	go func() {
		if _, err := tra.WaitFor(ctx, trace.Kind("session.forward.serve")); err == nil {
			late.Expire()
		}
	}()
	out := b.m.Submit(late, "s1", input("late", "k-late"))
	if out.Kind != session.OutcomeFailed || !errors.Is(out.Err, session.ErrForwardTimeout) {
		t.Fatalf("parked owner: %v %v, want failed with ErrForwardTimeout", out.Kind, out.Err)
	}
	tra.Emit("test.release")
	if _, err := tra.WaitForN(ctx, trace.Kind("session.accepted"), 2); err != nil {
		t.Fatal(err)
	}
	if again := accepted(t, b.m.Submit(ctx, "s1", input("late", "k-late"))); !again.Duplicate {
		t.Fatalf("re-send after the timeout accepted anew: %+v", again)
	}
	if f := tra.Failures(); len(f) > 0 {
		t.Fatal(f)
	}
}

// TestNATSForwardRemoteError: a stand-in owner answers over NATS; its code
// arrives intact, and a LeaseHeldError it sends keeps holder, epoch and
// remaining time. A request that is not JSON is answered bad_request.
func TestNATSForwardRemoteError(t *testing.T) {
	e := newEnv(t)
	b := e.node("b/1", nil)
	ctx := ctxT(t)
	if _, err := e.leases.Claim(ctx, "s1", "ghost/1", ttl); err != nil {
		t.Fatal(err)
	}
	third := &session.LeaseHeldError{Key: "s1", Holder: "third/4", Epoch: 9, Remaining: 7*time.Second + time.Millisecond}
	answers := make(chan *session.RemoteError, 2)
	ghost := natsforward.New(testenv.NATSConn(t), natsforward.Config{Prefix: e.prefix, Node: "ghost"})
	stop, err := ghost.Serve(handlerFunc(func(_ context.Context, req session.ForwardRequest) session.ForwardReply {
		if req.Session != "s1" || req.Input.IdempotencyKey != "k" {
			t.Errorf("stand-in got %+v", req)
		}
		return session.ForwardReply{Error: <-answers}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	answers <- &session.RemoteError{Code: session.CodeBusy, Message: "full"}
	out := b.m.Submit(ctx, "s1", input("x", "k"))
	var re *session.RemoteError
	if out.Kind != session.OutcomeFailed || !errors.As(out.Err, &re) || re.Code != session.CodeBusy || !errors.Is(out.Err, session.ErrBusy) {
		t.Fatalf("busy owner: %v %v", out.Kind, out.Err)
	}

	// ghost says third holds it; third has no responders; the fresh claim
	// names ghost again, which says the same; third again unreachable.
	answers <- &session.RemoteError{Code: session.CodeLeaseHeld, Held: third}
	answers <- &session.RemoteError{Code: session.CodeLeaseHeld, Held: third}
	out = b.m.Submit(ctx, "s1", input("x", "k"))
	var held *session.LeaseHeldError
	if out.Kind != session.OutcomeRefused || !errors.As(out.Err, &held) || *held != *third ||
		!jittered(out.Retry.After, third.Remaining+50*time.Millisecond) || out.Hops != 4 {
		t.Fatalf("held by a third: %v %v %+v (hops %d), want refused with %+v", out.Kind, out.Err, out.Retry, out.Hops, *third)
	}

	msg, err := b.nc.Request(natsforward.Subject(e.prefix, "b"), []byte("not json"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var rep session.ForwardReply
	if err := json.Unmarshal(msg.Data, &rep); err != nil || rep.Error == nil || rep.Error.Code != session.CodeBadRequest {
		t.Fatalf("malformed request answered %s", msg.Data)
	}
}

// TestNATSForwardUnreachable: the owner is gone with its lease live: two
// unreachable hops (no responders), then a refusal with the holder's
// remaining lease. Once the lease lapses between b's claim and its forward
// (forced with a park), the fresh claim takes the session over.
func TestNATSForwardUnreachable(t *testing.T) {
	e := newEnv(t)
	trb := trace.New()
	a, b := e.node("a/1", nil), e.node("b/1", trb)
	ctx := ctxT(t)
	first := accepted(t, a.m.Submit(ctx, "s1", input("first", "k1")))
	a.crash()

	out := b.m.Submit(ctx, "s1", input("second", "k2"))
	var held *session.LeaseHeldError
	if out.Kind != session.OutcomeRefused || !errors.As(out.Err, &held) || held.Holder != "a/1" || out.Hops != 2 ||
		!jittered(out.Retry.After, ttl+50*time.Millisecond) {
		t.Fatalf("dead owner, live lease: %v %v %+v (hops %d)", out.Kind, out.Err, out.Retry, out.Hops)
	}

	trb.Park(trace.Kind("session.forward", "holder", "a/1"), trace.Kind("test.lapsed"))
	done := make(chan session.Outcome, 1)
	go func() { done <- b.m.Submit(ctx, "s1", input("second", "k2")) }()
	if _, err := trb.WaitForN(ctx, trace.Kind("session.forward"), 3); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(ttl + time.Second)
	trb.Emit("test.lapsed")
	out = <-done
	if acc := accepted(t, out); acc.Epoch != first.Epoch+1 || out.Hops != 1 {
		t.Fatalf("after the lease lapsed: %+v (hops %d), want epoch %d here", acc, out.Hops, first.Epoch+1)
	}
	if f := trb.Failures(); len(f) > 0 {
		t.Fatal(f)
	}
}

// TestNATSForwardLinkDown: a node whose NATS link is down sends nothing:
// each hop is unreachable at once, so the input is refused with a retry
// directive and the owner never sees it.
func TestNATSForwardLinkDown(t *testing.T) {
	e := newEnv(t)
	tra, trb := trace.New(), trace.New()
	a, b := e.node("a/1", tra), e.node("b/1", trb)
	ctx := ctxT(t)
	accepted(t, a.m.Submit(ctx, "s1", input("first", "k1")))
	b.nc.Close()

	out := b.m.Submit(ctx, "s1", input("while down", "k2"))
	var held *session.LeaseHeldError
	if out.Kind != session.OutcomeRefused || !errors.As(out.Err, &held) || held.Holder != "a/1" || out.Hops != 2 {
		t.Fatalf("link down: %v %v (hops %d), want refused after two unreachable hops", out.Kind, out.Err, out.Hops)
	}
	for _, ev := range trb.Filter(trace.Kind("session.forward.done")) {
		if ev.Get("unreachable") != true {
			t.Fatalf("hop answered %v, want ErrUnreachable", ev.Get("err"))
		}
	}
	if n := tra.Count(trace.Kind("session.forward.serve")); n != 0 {
		t.Fatalf("the owner handled %d forwards from a node without a link", n)
	}
}

// jittered reports whether after is base plus a retry jitter (under
// session.RetryJitter).
func jittered(after, base time.Duration) bool {
	return after >= base && after < base+session.RetryJitter
}

// TestNATSControlSubject: a control travels on the node's ctl subject and
// its result comes back; a node listening only on the fwd subject (a node
// of a version without controls) is never handed a control as an input:
// the sender finds no responders.
func TestNATSControlSubject(t *testing.T) {
	e := newEnv(t)
	a, b := e.node("a/1", nil), e.node("b/1", nil)
	ctx := ctxT(t)
	acc := accepted(t, a.m.Submit(ctx, "s1", input("on a", "")))
	out := b.m.Control(ctx, "s1", session.Control{Op: session.OpStop, Turn: agent.Position{Epoch: acc.Epoch, Seq: acc.Seq + 100}})
	r := accepted(t, out).Control
	if r == nil || r.Stopped || r.Reason != session.ReasonNotRunning || out.Hops != 1 {
		t.Fatalf("forwarded control = %+v (hops %d), want a not_running answer from a", r, out.Hops)
	}

	// An old node: it serves the fwd subject only.
	nc := testenv.NATSConn(t)
	served := make(chan session.ForwardRequest, 1)
	sub, err := nc.Subscribe(natsforward.Subject(e.prefix, "old"), func(msg *nats.Msg) {
		var req session.ForwardRequest
		_ = json.Unmarshal(msg.Data, &req)
		served <- req
		_ = msg.Respond([]byte(`{"accepted":{"session":"s1","epoch":1,"seq":1}}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	f := natsforward.New(testenv.NATSConn(t), natsforward.Config{Prefix: e.prefix})
	_, err = f.Forward(ctx, "old/1", session.ForwardRequest{Session: "s1", Control: &session.Control{Op: session.OpStop, Turn: agent.Position{Epoch: 1, Seq: 1}}})
	if !errors.Is(err, session.ErrUnreachable) {
		t.Fatalf("control to an old node = %v, want ErrUnreachable", err)
	}
	select {
	case req := <-served:
		t.Fatalf("the old node was handed %+v", req)
	default:
	}
}
