// Package transporttest is the contract test suite every muster.Transport
// implementation must pass. Implementations call Run from their own tests.
package transporttest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/relaygw/relay/muster"
)

// NewNetwork returns a fresh, isolated network for one test and a function
// that creates the transport of node name on it. The suite registers, Starts
// and Closes every transport it creates.
type NewNetwork func(t *testing.T) (node func(name string) muster.Transport)

// wait bounds every wait for an eventual delivery in the suite.
const wait = 10 * time.Second

// Run runs the contract suite against the implementation that newNet
// creates.
func Run(t *testing.T, newNet NewNetwork) {
	t.Run("SendDelivers", func(t *testing.T) { testSendDelivers(t, newNet) })
	t.Run("SendOrderPerSender", func(t *testing.T) { testSendOrder(t, newNet) })
	t.Run("BroadcastReachesOthers", func(t *testing.T) { testBroadcast(t, newNet) })
	t.Run("MessageOwnedByHandler", func(t *testing.T) { testOwnership(t, newNet) })
	t.Run("CallReplies", func(t *testing.T) { testCallReplies(t, newNet) })
	t.Run("CallRemoteError", func(t *testing.T) { testCallRemoteError(t, newNet) })
	t.Run("CallRemoteErrorCarriesCode", func(t *testing.T) { testCallRemoteErrorCode(t, newNet) })
	t.Run("CallNoResponders", func(t *testing.T) { testCallNoResponders(t, newNet) })
	t.Run("CallTimeoutHandlerStillRuns", func(t *testing.T) { testCallTimeout(t, newNet) })
	t.Run("CallReentrant", func(t *testing.T) { testCallReentrant(t, newNet) })
	t.Run("CallAfterSendSeesSend", func(t *testing.T) { testCallAfterSend(t, newNet) })
	t.Run("CloseWaitsForHandlers", func(t *testing.T) { testCloseWaits(t, newNet) })
	t.Run("ClosedTransportErrors", func(t *testing.T) { testClosed(t, newNet) })
}

// Msg is one message a Recorder received.
type Msg struct {
	From string
	Data string
}

// Recorder is a muster.Handler that records messages and answers Calls with
// OnCall (default: echo the request prefixed with "re:").
type Recorder struct {
	mu     sync.Mutex
	msgs   []Msg
	signal chan struct{}
	OnCall func(ctx context.Context, from string, req []byte) ([]byte, error)
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{signal: make(chan struct{})} }

// HandleMessage records msg.
func (r *Recorder) HandleMessage(from string, msg []byte) {
	r.mu.Lock()
	r.msgs = append(r.msgs, Msg{from, string(msg)})
	close(r.signal)
	r.signal = make(chan struct{})
	r.mu.Unlock()
}

// HandleCall answers with OnCall or an echo.
func (r *Recorder) HandleCall(ctx context.Context, from string, req []byte) ([]byte, error) {
	if r.OnCall != nil {
		return r.OnCall(ctx, from, req)
	}
	return append([]byte("re:"), req...), nil
}

// Msgs returns a copy of the messages received so far.
func (r *Recorder) Msgs() []Msg {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Msg(nil), r.msgs...)
}

// WaitN waits until at least n messages were received and returns them.
func (r *Recorder) WaitN(ctx context.Context, n int) ([]Msg, error) {
	for {
		r.mu.Lock()
		if len(r.msgs) >= n {
			out := append([]Msg(nil), r.msgs...)
			r.mu.Unlock()
			return out, nil
		}
		ch := r.signal
		got := len(r.msgs)
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for %d messages, have %d: %w", n, got, ctx.Err())
		}
	}
}

// start creates, registers and starts node name with handler h.
func start(t *testing.T, node func(string) muster.Transport, name string, h muster.Handler) muster.Transport {
	t.Helper()
	tr := node(name)
	tr.Register(h)
	if err := tr.Start(context.Background()); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

func testSendDelivers(t *testing.T, newNet NewNetwork) {
	node := newNet(t)
	ra, rb := NewRecorder(), NewRecorder()
	a := start(t, node, "a", ra)
	start(t, node, "b", rb)
	if a.Self() != "a" {
		t.Fatalf("Self() = %q, want a", a.Self())
	}
	ctx := waitCtx(t)
	if err := a.Send(ctx, "b", []byte("hello")); err != nil {
		t.Fatalf("send: %v", err)
	}
	got, err := rb.WaitN(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != (Msg{"a", "hello"}) {
		t.Fatalf("b got %+v, want {a hello}", got[0])
	}
	// Sending to an unknown node is not an error.
	if err := a.Send(ctx, "nobody", []byte("x")); err != nil {
		t.Fatalf("send to unknown node: %v", err)
	}
}

func testSendOrder(t *testing.T, newNet NewNetwork) {
	node := newNet(t)
	ra, rb := NewRecorder(), NewRecorder()
	a := start(t, node, "a", ra)
	start(t, node, "b", rb)
	ctx := waitCtx(t)
	const n = 200
	for i := range n {
		var err error
		if i%3 == 0 {
			err = a.Broadcast(ctx, fmt.Appendf(nil, "%d", i))
		} else {
			err = a.Send(ctx, "b", fmt.Appendf(nil, "%d", i))
		}
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	got, err := rb.WaitN(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range got {
		if m.Data != fmt.Sprint(i) || m.From != "a" {
			t.Fatalf("message %d is %+v; want data %d from a", i, m, i)
		}
	}
}

func testBroadcast(t *testing.T, newNet NewNetwork) {
	node := newNet(t)
	recs := map[string]*Recorder{"a": NewRecorder(), "b": NewRecorder(), "c": NewRecorder()}
	ts := map[string]muster.Transport{}
	for _, name := range []string{"a", "b", "c"} {
		ts[name] = start(t, node, name, recs[name])
	}
	ctx := waitCtx(t)
	if err := ts["a"].Broadcast(ctx, []byte("all")); err != nil {
		t.Fatalf("broadcast: %v", err)
	}
	for _, name := range []string{"b", "c"} {
		got, err := recs[name].WaitN(ctx, 1)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got[0] != (Msg{"a", "all"}) {
			t.Fatalf("%s got %+v", name, got[0])
		}
	}
	// a must not get its own broadcast: a message a sends itself after the
	// broadcast arrives after it would have, and must be the only one.
	if err := ts["a"].Send(ctx, "a", []byte("self")); err != nil {
		t.Fatalf("send to self: %v", err)
	}
	got, err := recs["a"].WaitN(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != (Msg{"a", "self"}) {
		t.Fatalf("a got %+v, want only its own Send", got)
	}
}

func testOwnership(t *testing.T, newNet NewNetwork) {
	node := newNet(t)
	rb := NewRecorder()
	a := start(t, node, "a", NewRecorder())
	start(t, node, "b", rb)
	ctx := waitCtx(t)
	buf := []byte("original")
	if err := a.Send(ctx, "b", buf); err != nil {
		t.Fatal(err)
	}
	copy(buf, "XXXXXXXX")
	got, err := rb.WaitN(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Data != "original" {
		t.Fatalf("b got %q after the sender reused its buffer", got[0].Data)
	}
}

func testCallReplies(t *testing.T, newNet NewNetwork) {
	node := newNet(t)
	a := start(t, node, "a", NewRecorder())
	rb := NewRecorder()
	var from string
	rb.OnCall = func(_ context.Context, f string, req []byte) ([]byte, error) {
		from = f
		return append([]byte("re:"), req...), nil
	}
	start(t, node, "b", rb)
	resp, err := a.Call(waitCtx(t), "b", []byte("ping"))
	if err != nil {
		t.Fatalf("call: %v", err)
	}
	if string(resp) != "re:ping" || from != "a" {
		t.Fatalf("reply %q from handler that saw caller %q; want re:ping and a", resp, from)
	}
	// An empty reply is a valid reply.
	rb.OnCall = func(context.Context, string, []byte) ([]byte, error) { return nil, nil }
	resp, err = a.Call(waitCtx(t), "b", nil)
	if err != nil || len(resp) != 0 {
		t.Fatalf("empty call = %q, %v; want empty reply", resp, err)
	}
}

func testCallRemoteError(t *testing.T, newNet NewNetwork) {
	node := newNet(t)
	a := start(t, node, "a", NewRecorder())
	rb := NewRecorder()
	rb.OnCall = func(context.Context, string, []byte) ([]byte, error) {
		return []byte("ignored"), errors.New("not my group")
	}
	start(t, node, "b", rb)
	_, err := a.Call(waitCtx(t), "b", []byte("q"))
	var re *muster.RemoteError
	if !errors.As(err, &re) || re.Message != "not my group" || re.Code != "" {
		t.Fatalf("call error = %v; want *muster.RemoteError{not my group} without a code", err)
	}
	if errors.Is(err, muster.ErrNotPeer) {
		t.Fatal("an error without a code matches ErrNotPeer")
	}
}

// A handler error wrapping a Muster error reaches the caller with its code:
// the caller matches it with errors.Is whatever the text says.
func testCallRemoteErrorCode(t *testing.T, newNet NewNetwork) {
	node := newNet(t)
	a := start(t, node, "a", NewRecorder())
	rb := NewRecorder()
	rb.OnCall = func(context.Context, string, []byte) ([]byte, error) {
		return nil, fmt.Errorf("refusing the round: %w", muster.ErrNotPeer)
	}
	start(t, node, "b", rb)
	_, err := a.Call(waitCtx(t), "b", []byte("q"))
	var re *muster.RemoteError
	if !errors.As(err, &re) || re.Code != muster.CodeNotPeer {
		t.Fatalf("call error = %v; want *muster.RemoteError with code %q", err, muster.CodeNotPeer)
	}
	if !errors.Is(err, muster.ErrNotPeer) || errors.Is(err, muster.ErrBadMessage) {
		t.Fatalf("errors.Is by code: ErrNotPeer %v, ErrBadMessage %v", errors.Is(err, muster.ErrNotPeer), errors.Is(err, muster.ErrBadMessage))
	}
	if muster.ErrorCode(err) != muster.CodeNotPeer {
		t.Fatalf("ErrorCode = %q", muster.ErrorCode(err))
	}
}

func testCallNoResponders(t *testing.T, newNet NewNetwork) {
	node := newNet(t)
	a := start(t, node, "a", NewRecorder())
	_, err := a.Call(waitCtx(t), "ghost", []byte("q"))
	if !errors.Is(err, muster.ErrNoResponders) {
		t.Fatalf("call to missing node = %v; want ErrNoResponders", err)
	}
	b := start(t, node, "b", NewRecorder())
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = a.Call(waitCtx(t), "b", []byte("q"))
	if !errors.Is(err, muster.ErrNoResponders) {
		t.Fatalf("call to closed node = %v; want ErrNoResponders", err)
	}
}

func testCallTimeout(t *testing.T, newNet NewNetwork) {
	node := newNet(t)
	a := start(t, node, "a", NewRecorder())
	rb := NewRecorder()
	entered := make(chan struct{})
	release := make(chan struct{})
	finished := make(chan string, 1)
	rb.OnCall = func(_ context.Context, _ string, req []byte) ([]byte, error) {
		close(entered)
		<-release
		finished <- string(req)
		return []byte("late"), nil
	}
	start(t, node, "b", rb)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := a.Call(ctx, "b", []byte("slow"))
		errc <- err
	}()
	<-entered
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call = %v; want context.Canceled", err)
	}
	// The handler is still running after the caller gave up, and completes.
	close(release)
	select {
	case req := <-finished:
		if req != "slow" {
			t.Fatalf("handler saw %q", req)
		}
	case <-waitCtx(t).Done():
		t.Fatal("handler never finished after the caller timed out")
	}
}

func testCallReentrant(t *testing.T, newNet NewNetwork) {
	node := newNet(t)
	ra, rb := NewRecorder(), NewRecorder()
	ra.OnCall = func(_ context.Context, _ string, req []byte) ([]byte, error) {
		return append([]byte("a:"), req...), nil
	}
	a := start(t, node, "a", ra)
	var b muster.Transport
	rb.OnCall = func(ctx context.Context, _ string, req []byte) ([]byte, error) {
		inner, err := b.Call(ctx, "a", req)
		if err != nil {
			return nil, err
		}
		return append([]byte("b:"), inner...), nil
	}
	b = start(t, node, "b", rb)
	resp, err := a.Call(waitCtx(t), "b", []byte("x"))
	if err != nil {
		t.Fatalf("call: %v", err)
	}
	if string(resp) != "b:a:x" {
		t.Fatalf("reply %q, want b:a:x", resp)
	}
}

func testCallAfterSend(t *testing.T, newNet NewNetwork) {
	node := newNet(t)
	a := start(t, node, "a", NewRecorder())
	rb := NewRecorder()
	rb.OnCall = func(context.Context, string, []byte) ([]byte, error) {
		return []byte(fmt.Sprint(len(rb.Msgs()))), nil
	}
	start(t, node, "b", rb)
	ctx := waitCtx(t)
	for i := range 50 {
		if err := a.Send(ctx, "b", fmt.Appendf(nil, "%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := a.Call(ctx, "b", nil)
	if err != nil {
		t.Fatalf("call: %v", err)
	}
	if string(resp) != "50" {
		t.Fatalf("call handler saw %s earlier messages handled, want 50", resp)
	}
}

func testCloseWaits(t *testing.T, newNet NewNetwork) {
	node := newNet(t)
	a := start(t, node, "a", NewRecorder())
	entered := make(chan struct{})
	release := make(chan struct{})
	var mu sync.Mutex
	returned := false
	rb := NewRecorder()
	rb.OnCall = func(context.Context, string, []byte) ([]byte, error) {
		close(entered)
		<-release
		mu.Lock()
		returned = true
		mu.Unlock()
		return nil, nil
	}
	b := start(t, node, "b", rb)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	callDone := make(chan struct{})
	go func() {
		defer close(callDone)
		_, _ = a.Call(ctx, "b", []byte("q"))
	}()
	<-entered
	closed := make(chan error, 1)
	go func() { closed <- b.Close() }()
	close(release)
	if err := <-closed; err != nil {
		t.Fatalf("close: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !returned {
		t.Fatal("Close returned while a handler was still running")
	}
	cancel()
	<-callDone
}

func testClosed(t *testing.T, newNet NewNetwork) {
	node := newNet(t)
	a := start(t, node, "a", NewRecorder())
	start(t, node, "b", NewRecorder())
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	ctx := waitCtx(t)
	if err := a.Send(ctx, "b", []byte("x")); !errors.Is(err, muster.ErrTransportClosed) {
		t.Fatalf("send after close = %v; want ErrTransportClosed", err)
	}
	if err := a.Broadcast(ctx, []byte("x")); !errors.Is(err, muster.ErrTransportClosed) {
		t.Fatalf("broadcast after close = %v; want ErrTransportClosed", err)
	}
	if _, err := a.Call(ctx, "b", []byte("x")); !errors.Is(err, muster.ErrTransportClosed) {
		t.Fatalf("call after close = %v; want ErrTransportClosed", err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}
