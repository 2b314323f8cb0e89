package muster

import (
	"context"
	"errors"
)

// Transport carries Muster's messages between the nodes of one scope.
// Implementations: the in-process network in muster/memnet (with fault
// injection, for tests and the embedded single-node mode) and NATS in
// muster/natstransport.
//
// Node names are the transport's addresses. A node's incarnation is not part
// of its address; Muster carries it inside its own messages.
type Transport interface {
	// Self returns this node's name.
	Self() string

	// Register installs the handler for inbound traffic. It must be called
	// once, before Start. Handler methods may be called concurrently from
	// several goroutines; see Handler.
	Register(h Handler)

	// Start begins receiving. Messages that arrive before Start are dropped.
	Start(ctx context.Context) error

	// Broadcast sends msg to every other node of the scope. Best effort:
	// a message may be lost, and delivery order across senders is not fixed.
	// Messages from one sender to one receiver arrive in send order unless
	// a test transport reorders them on purpose.
	Broadcast(ctx context.Context, msg []byte) error

	// Send delivers msg to node to. Best effort, like Broadcast. Sending to
	// an unknown or unreachable node is not an error.
	Send(ctx context.Context, to string, msg []byte) error

	// Call sends a request to node to and waits for its reply until ctx
	// ends. A Call that returns an error (timeout, ErrNoResponders) may still
	// have run, or may yet run, on the remote node.
	Call(ctx context.Context, to string, req []byte) ([]byte, error)

	// Close stops receiving and releases resources. It waits for in-flight
	// handler calls started by this transport to return.
	Close() error
}

// Handler receives a node's inbound traffic.
//
// HandleMessage and HandleCall may be called concurrently. They must not block
// for long (a slow handler delays other messages); a handler that needs to
// wait should hand the work to its own goroutine. msg and req are owned by the
// handler.
type Handler interface {
	// HandleMessage handles a Send or Broadcast from node from.
	HandleMessage(from string, msg []byte)
	// HandleCall handles a Call from node from and returns the reply.
	// A returned error reaches the caller as a *RemoteError carrying the
	// error's message and its Code (ErrorCode).
	HandleCall(ctx context.Context, from string, req []byte) ([]byte, error)
}

// Transport errors.
var (
	// ErrNoResponders means no node answered a Call: the target is not
	// running, or not reachable from here.
	ErrNoResponders = errors.New("muster: no responders")
	// ErrTransportClosed is returned by a Transport after Close.
	ErrTransportClosed = errors.New("muster: transport closed")
)

// RemoteError is a Call's error as returned by the remote handler: the
// handler error's text and its Code, both carried on the wire. Match it with
// errors.Is against the Muster error of the same code (errors.Is(err,
// ErrNotPeer)), never by its text.
type RemoteError struct {
	// Code is the handler error's code (ErrorCode), "" for an error
	// without one.
	Code Code
	// Message is the handler error's text, for logs.
	Message string
}

// NewRemoteError is what a Transport returns to the caller of a Call whose
// remote handler returned err: its message and code.
func NewRemoteError(err error) *RemoteError {
	return &RemoteError{Code: ErrorCode(err), Message: err.Error()}
}

func (e *RemoteError) Error() string { return "muster: remote error: " + e.Message }

// ErrorCode returns e.Code.
func (e *RemoteError) ErrorCode() Code { return e.Code }

// Is reports whether target carries the same non-empty code, so a remote
// ErrNotPeer matches errors.Is(err, ErrNotPeer).
func (e *RemoteError) Is(target error) bool {
	if e.Code == "" {
		return false
	}
	var c coder
	return errors.As(target, &c) && c.ErrorCode() == e.Code
}
