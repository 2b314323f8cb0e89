// Package memforward is an in-process session.Forwarder: a network of named
// nodes, each served by a session.ForwardHandler (a *session.Manager), with
// fault injection. It lets Submit's routing be tested without a transport
// or a TCP proxy.
//
// Requests and replies cross the network as JSON, as they do over NATS, so
// what a handler answers (a *session.LeaseHeldError inside a
// *session.RemoteError included) arrives decoded, not shared.
//
// A delivered request runs on its own goroutine with a context of its own:
// like a NATS request, it runs to the end even when the sender stopped
// waiting. Close waits for those goroutines.
//
// Faults are one-shot and queued per node: the next forward to that node
// takes the first queued fault. Drop loses the request (the sender waits
// until its ctx ends); Hold keeps it until released (it runs then, whether
// or not the sender still waits); Fail answers with a given RemoteError
// without running anything; Unreachable answers ErrUnreachable. A node
// that was never attached, or was detached, is unreachable for good.
package memforward

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/relaygw/relay/session"
)

// Network is a set of nodes that forward to each other. The zero value is
// not usable; call New. Safe for concurrent use.
type Network struct {
	mu     sync.Mutex
	nodes  map[string]session.ForwardHandler
	faults map[string][]*fault
	sent   map[string]int
	closed chan struct{}
	once   sync.Once
	wg     sync.WaitGroup // delivered requests
}

type faultKind uint8

const (
	faultDrop faultKind = iota + 1
	faultHold
	faultFail
	faultUnreachable
)

type fault struct {
	kind faultKind
	err  *session.RemoteError
	held *Held
	sent chan struct{} // Drop: closed once lost
}

// New returns an empty network.
func New() *Network {
	return &Network{
		nodes:  make(map[string]session.ForwardHandler),
		faults: make(map[string][]*fault),
		sent:   make(map[string]int),
		closed: make(chan struct{}),
	}
}

// Attach makes node reachable: forwards to any holder "<node>/…" are
// handled by h from now on (replacing an earlier handler).
func (n *Network) Attach(node string, h session.ForwardHandler) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.nodes[node] = h
}

// Detach makes node unreachable, as a crashed process: later forwards to
// it answer ErrUnreachable. Requests already delivered run on.
func (n *Network) Detach(node string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.nodes, node)
}

// Forwarder returns a session.Forwarder that sends over this network.
func (n *Network) Forwarder() session.Forwarder { return forwarder{n} }

// Sent returns how many forwards were addressed to node, whatever their
// fate.
func (n *Network) Sent(node string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.sent[node]
}

// Drop loses the next forward to node: its sender waits until its ctx ends
// (ErrForwardTimeout at a deadline) and nothing runs. The returned channel
// is closed when the lost request has been sent.
func (n *Network) Drop(node string) <-chan struct{} {
	sent := make(chan struct{})
	n.push(node, &fault{kind: faultDrop, sent: sent})
	return sent
}

// Fail answers the next forward to node with err, without running it.
func (n *Network) Fail(node string, err *session.RemoteError) {
	n.push(node, &fault{kind: faultFail, err: err})
}

// Unreachable answers the next forward to node with ErrUnreachable,
// without running it.
func (n *Network) Unreachable(node string) { n.push(node, &fault{kind: faultUnreachable}) }

// Hold keeps the next forward to node on the wire until the returned Held
// is released.
func (n *Network) Hold(node string) *Held {
	h := &Held{arrived: make(chan struct{}), release: make(chan struct{}), done: make(chan struct{})}
	n.push(node, &fault{kind: faultHold, held: h})
	return h
}

func (n *Network) push(node string, f *fault) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.faults[node] = append(n.faults[node], f)
}

// Close releases every held request and waits for the delivered ones to
// finish. Later forwards answer ErrUnreachable.
func (n *Network) Close() {
	n.once.Do(func() { close(n.closed) })
	n.wg.Wait()
}

// Held is a forward kept on the wire by Hold.
type Held struct {
	arrived, release, done chan struct{}
	relOnce                sync.Once
	reply                  session.ForwardReply
}

// Arrived is closed when the held forward has been sent.
func (h *Held) Arrived() <-chan struct{} { return h.arrived }

// Release delivers the held request to its node's handler. Its answer
// goes to the sender if it still waits. Idempotent.
func (h *Held) Release() { h.relOnce.Do(func() { close(h.release) }) }

// Done is closed when the released request has been handled.
func (h *Held) Done() <-chan struct{} { return h.done }

// Reply is the handler's answer to the released request; valid once Done
// is closed.
func (h *Held) Reply() session.ForwardReply {
	<-h.done
	return h.reply
}

type forwarder struct{ n *Network }

// Forward implements session.Forwarder.
func (f forwarder) Forward(ctx context.Context, holder string, req session.ForwardRequest) (session.Accepted, error) {
	n := f.n
	node := session.NodeOf(holder)
	body, err := json.Marshal(req)
	if err != nil {
		return session.Accepted{}, fmt.Errorf("memforward: encode request: %w", err)
	}
	n.mu.Lock()
	n.sent[node]++
	h := n.nodes[node]
	var fl *fault
	if q := n.faults[node]; len(q) > 0 {
		fl, n.faults[node] = q[0], q[1:]
	}
	select {
	case <-n.closed:
		h = nil
	default:
	}
	if h != nil {
		n.wg.Add(1)
	}
	n.mu.Unlock()

	unreachable := fmt.Errorf("memforward: forward to %s: %w", node, session.ErrUnreachable)
	if fl != nil && fl.kind == faultFail {
		if h != nil {
			n.wg.Done()
		}
		return decode(encode(session.ForwardReply{Error: fl.err}))
	}
	if h == nil || (fl != nil && fl.kind == faultUnreachable) {
		if h != nil {
			n.wg.Done()
		}
		return session.Accepted{}, unreachable
	}
	if fl != nil && fl.kind == faultDrop {
		n.wg.Done()
		close(fl.sent)
		<-ctx.Done()
		return session.Accepted{}, ctxErr(ctx)
	}

	replies := make(chan []byte, 1)
	go func() {
		defer n.wg.Done()
		if fl != nil && fl.kind == faultHold {
			close(fl.held.arrived)
			select {
			case <-fl.held.release:
			case <-n.closed:
			}
		}
		var r session.ForwardRequest
		var rep session.ForwardReply
		if err := json.Unmarshal(body, &r); err != nil {
			rep.Error = &session.RemoteError{Code: session.CodeBadRequest, Message: err.Error()}
		} else {
			rep = h.HandleForward(context.Background(), r)
		}
		if fl != nil && fl.kind == faultHold {
			fl.held.reply = rep
			close(fl.held.done)
		}
		replies <- encode(rep)
	}()
	select {
	case b := <-replies:
		return decode(b)
	case <-ctx.Done():
		return session.Accepted{}, ctxErr(ctx)
	}
}

func encode(rep session.ForwardReply) []byte {
	b, err := json.Marshal(rep)
	if err != nil {
		// Every field of a reply is plain data.
		panic(fmt.Sprintf("memforward: encode reply: %v", err))
	}
	return b
}

func decode(b []byte) (session.Accepted, error) {
	var rep session.ForwardReply
	if err := json.Unmarshal(b, &rep); err != nil {
		return session.Accepted{}, fmt.Errorf("%w: malformed reply: %w", session.ErrForwardFailed, err)
	}
	return rep.Result()
}

func ctxErr(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("memforward: %w: %w", session.ErrForwardTimeout, ctx.Err())
	}
	return ctx.Err()
}
