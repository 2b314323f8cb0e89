package memnet

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/relaygw/relay/muster"
)

var _ muster.Transport = (*Transport)(nil)

// Transport is one node's end of a Network. It implements muster.Transport.
//
// Inbound messages (Send, Broadcast) are handled one at a time, in arrival
// order, on the node's receiver goroutine. Each inbound Call is taken from
// the same inbox in order and then handled on a goroutine of its own, so a
// Call's handler starts after every message that arrived before it was
// handled, and a slow HandleCall does not hold up later messages.
type Transport struct {
	net  *Network
	name string
	cond *sync.Cond // on net.mu; signalled when inbox, frozen or stopped change

	// Guarded by net.mu.
	handler muster.Handler
	started bool
	stopped bool
	inbox   []envelope

	wg     sync.WaitGroup // receiver goroutine and call handlers
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when the transport stops
}

// Self returns the node's name.
func (t *Transport) Self() string { return t.name }

// Register installs the inbound handler. Call it before Start.
func (t *Transport) Register(h muster.Handler) {
	t.net.mu.Lock()
	defer t.net.mu.Unlock()
	t.handler = h
}

// Start begins handling the inbox. Messages that reached the node before
// Start were dropped. ctx bounds only the start; Close or Kill stops the
// transport. It returns ErrNoHandler without Register, ErrAlreadyStarted on a
// second call and muster.ErrTransportClosed after Close or Kill.
func (t *Transport) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memnet: start %q: %w", t.name, err)
	}
	n := t.net
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case t.stopped:
		return fmt.Errorf("memnet: start %q: %w", t.name, muster.ErrTransportClosed)
	case t.handler == nil:
		return fmt.Errorf("memnet: start %q: %w", t.name, ErrNoHandler)
	case t.started:
		return fmt.Errorf("memnet: start %q: %w", t.name, ErrAlreadyStarted)
	}
	t.started = true
	t.wg.Add(1)
	go t.receive()
	return nil
}

// Broadcast sends msg to every other live node, in name order. Nodes that
// have not started drop it. msg is copied.
func (t *Transport) Broadcast(ctx context.Context, msg []byte) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memnet: broadcast from %q: %w", t.name, err)
	}
	n := t.net
	var evs events
	n.mu.Lock()
	if t.stopped {
		n.mu.Unlock()
		return fmt.Errorf("memnet: broadcast from %q: %w", t.name, muster.ErrTransportClosed)
	}
	to := make([]string, 0, len(n.nodes))
	for name := range n.nodes {
		if name != t.name {
			to = append(to, name)
		}
	}
	slices.Sort(to)
	for _, name := range to {
		n.sendLocked(&evs, envelope{from: t.name, to: name, kind: kindMsg, data: slices.Clone(msg)})
	}
	tr := n.tracer
	n.mu.Unlock()
	evs.Emit(tr)
	return nil
}

// Send delivers msg to node to, best effort. Sending to an unknown, dead or
// unreachable node is not an error. msg is copied.
func (t *Transport) Send(ctx context.Context, to string, msg []byte) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memnet: send %q to %q: %w", t.name, to, err)
	}
	n := t.net
	var evs events
	n.mu.Lock()
	if t.stopped {
		n.mu.Unlock()
		return fmt.Errorf("memnet: send %q to %q: %w", t.name, to, muster.ErrTransportClosed)
	}
	n.sendLocked(&evs, envelope{from: t.name, to: to, kind: kindMsg, data: slices.Clone(msg)})
	tr := n.tracer
	n.mu.Unlock()
	evs.Emit(tr)
	return nil
}

// Call sends req to node to and waits for the reply until ctx ends.
//
// It fails at once with muster.ErrNoResponders when to is unknown, killed,
// not started, or blocked from this node. A request or reply lost to a
// random drop, a frozen receiver or a blocked return link makes Call wait
// until ctx ends and return ctx's error. After such an error the remote
// handler may already have run, or may still run later: it receives the
// remote transport's own context, not ctx. A handler's error is returned as
// a *muster.RemoteError with the error's message and code. req is copied.
func (t *Transport) Call(ctx context.Context, to string, req []byte) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memnet: call %q to %q: %w", t.name, to, err)
	}
	n := t.net
	reply := make(chan callResult, 1)
	env := envelope{from: t.name, to: to, kind: kindCall, data: slices.Clone(req), reply: reply}
	var evs events
	n.mu.Lock()
	if t.stopped {
		n.mu.Unlock()
		return nil, fmt.Errorf("memnet: call %q to %q: %w", t.name, to, muster.ErrTransportClosed)
	}
	l := link{t.name, to}
	n.countLocked(&evs, env)
	if dest, ok := n.nodes[to]; !ok || !dest.started || n.blocked[l] {
		reason := "dead"
		if ok && !dest.started {
			reason = "not-started"
		} else if ok {
			reason = "blocked"
		}
		n.dropLocked(&evs, env, reason)
		tr := n.tracer
		n.mu.Unlock()
		evs.Emit(tr)
		return nil, fmt.Errorf("memnet: call %q to %q: %w", t.name, to, muster.ErrNoResponders)
	}
	n.routeLocked(&evs, env)
	tr := n.tracer
	n.mu.Unlock()
	evs.Emit(tr)

	select {
	case r := <-reply:
		if r.err != nil {
			return nil, r.err
		}
		return r.data, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("memnet: call %q to %q: %w", t.name, to, ctx.Err())
	case <-t.done:
		return nil, fmt.Errorf("memnet: call %q to %q: %w", t.name, to, muster.ErrTransportClosed)
	}
}

// Close stops the transport and waits for its running handler calls to
// return. It must not be called from this transport's own handler. Calling
// it again, or after Kill, only waits.
func (t *Transport) Close() error {
	t.net.mu.Lock()
	t.stopLocked()
	t.net.mu.Unlock()
	t.wg.Wait()
	return nil
}

// stopLocked marks the transport stopped and removes it from the network.
func (t *Transport) stopLocked() {
	if t.stopped {
		return
	}
	n := t.net
	t.stopped = true
	if n.nodes[t.name] == t {
		delete(n.nodes, t.name)
	}
	n.dropped += uint64(len(t.inbox))
	t.inbox = nil
	t.cancel()
	close(t.done)
	t.cond.Broadcast()
	n.notifyLocked()
}

// receive handles the inbox until the transport stops.
func (t *Transport) receive() {
	defer t.wg.Done()
	n := t.net
	n.mu.Lock()
	for {
		for !t.stopped && (len(t.inbox) == 0 || n.frozen[t.name]) {
			t.cond.Wait()
		}
		if t.stopped {
			n.mu.Unlock()
			return
		}
		env := t.inbox[0]
		t.inbox[0] = envelope{}
		t.inbox = t.inbox[1:]
		if len(t.inbox) == 0 {
			t.inbox = nil
		}
		n.running++
		h, tr := t.handler, n.tracer
		if env.kind == kindCall {
			t.wg.Add(1)
			go t.serveCall(h, tr, env)
			continue
		}
		n.mu.Unlock()

		tr.Emit("memnet.deliver", "from", env.from, "to", env.to, "kind", env.kind.String())
		h.HandleMessage(env.from, env.data)
		tr.Emit("memnet.handled", "from", env.from, "to", env.to, "kind", env.kind.String())

		n.mu.Lock()
		n.running--
		n.notifyLocked()
	}
}

// serveCall runs one inbound Call's handler and routes its reply.
func (t *Transport) serveCall(h muster.Handler, tr traceEmitter, env envelope) {
	defer t.wg.Done()
	tr.Emit("memnet.deliver", "from", env.from, "to", env.to, "kind", env.kind.String())
	resp, err := h.HandleCall(t.ctx, env.from, env.data)
	tr.Emit("memnet.handled", "from", env.from, "to", env.to, "kind", env.kind.String())
	res := callResult{data: resp}
	if err != nil {
		res = callResult{err: muster.NewRemoteError(err)}
	}
	n := t.net
	var evs events
	n.mu.Lock()
	n.running--
	if t.stopped {
		n.dropLocked(&evs, envelope{from: env.to, to: env.from, kind: kindReply}, "dead")
	} else {
		n.replyLocked(&evs, env, res)
	}
	n.notifyLocked()
	tr2 := n.tracer
	n.mu.Unlock()
	evs.Emit(tr2)
}
