package memforward_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/session"
	"github.com/relaygw/relay/session/memforward"
)

// echo answers every forward as accepted at seq 1 and counts them.
type echo struct{ calls chan session.ForwardRequest }

func (e echo) HandleForward(_ context.Context, req session.ForwardRequest) session.ForwardReply {
	e.calls <- req
	return session.ForwardReply{Accepted: &session.Accepted{Session: req.Session, Epoch: 1, Seq: 1}}
}

// TestFaultsAreOneShotAndQueued: each fault takes exactly one forward, in
// the order queued, and the node answers normally afterwards; a node never
// attached is unreachable; Close releases a held request, which then runs.
func TestFaultsAreOneShotAndQueued(t *testing.T) {
	n := memforward.New()
	h := echo{calls: make(chan session.ForwardRequest, 8)}
	n.Attach("a", h)
	f := n.Forwarder()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := session.ForwardRequest{Session: "s1", Input: agent.Input{Type: "message"}}

	n.Unreachable("a")
	n.Fail("a", &session.RemoteError{Code: session.CodeBusy})
	if _, err := f.Forward(ctx, "a/1", req); !errors.Is(err, session.ErrUnreachable) {
		t.Fatalf("first forward: %v, want ErrUnreachable", err)
	}
	if _, err := f.Forward(ctx, "a/1", req); !errors.Is(err, session.ErrBusy) {
		t.Fatalf("second forward: %v, want the busy code", err)
	}
	if acc, err := f.Forward(ctx, "a/1", req); err != nil || acc.Seq != 1 {
		t.Fatalf("third forward: %+v %v, want accepted", acc, err)
	}
	if _, err := f.Forward(ctx, "nobody/1", req); !errors.Is(err, session.ErrUnreachable) {
		t.Fatalf("forward to an unknown node: %v", err)
	}
	if got := len(h.calls); got != 1 {
		t.Fatalf("handler ran %d times, want once", got)
	}

	held := n.Hold("a")
	short, stop := context.WithCancel(ctx)
	go func() { <-held.Arrived(); stop() }()
	if _, err := f.Forward(short, "a/1", req); !errors.Is(err, context.Canceled) {
		t.Fatalf("held forward: %v, want the caller's cancellation", err)
	}
	n.Close()
	if rep := held.Reply(); rep.Accepted == nil || len(h.calls) != 2 {
		t.Fatalf("the held request after Close: %+v, %d calls", rep, len(h.calls))
	}
	if n.Sent("a") != 4 {
		t.Fatalf("sent %d to a, want 4", n.Sent("a"))
	}
}
