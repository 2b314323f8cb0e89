package muster

import "errors"

// Code is the stable, machine-readable code of a Muster error. It travels
// on the wire with a Call's remote error (RemoteError.Code), so the caller
// matches the error by code, not by its text.
type Code string

// Error codes carried on the wire.
const (
	// CodeNotPeer: the callee declared the caller's incarnation departed
	// (ErrNotPeer).
	CodeNotPeer Code = "not_peer"
	// CodeBadMessage: the callee could not decode the request
	// (ErrBadMessage).
	CodeBadMessage Code = "bad_message"
	// CodeClosed: the callee's scope is closed (ErrClosed).
	CodeClosed Code = "closed"
)

// codedError is a Muster error with a wire code.
type codedError struct {
	code Code
	msg  string
}

func (e *codedError) Error() string   { return e.msg }
func (e *codedError) ErrorCode() Code { return e.code }

// coder is an error that carries a Code.
type coder interface{ ErrorCode() Code }

// ErrorCode returns the Code of the first error in err's chain that carries
// one (a Muster error or a *RemoteError), or "" if none does.
func ErrorCode(err error) Code {
	var c coder
	if errors.As(err, &c) {
		return c.ErrorCode()
	}
	return ""
}

// Scope errors. Transport errors are declared in transport.go.
var (
	// ErrRPCFailed is returned by Join when the router could not be told
	// that this node holds the group (timeout, no responders, remote error).
	// Nothing was registered; a later Join retries the claim.
	ErrRPCFailed = errors.New("muster: rpc failed")
	// ErrDraining is returned by Join after Drain started.
	ErrDraining = errors.New("muster: draining")
	// ErrClosed is returned by every operation after Close.
	ErrClosed error = &codedError{CodeClosed, "muster: scope closed"}
	// ErrNotStarted is returned by Join and Leave before Start.
	ErrNotStarted = errors.New("muster: scope not started")
	// ErrRestarted is returned by Join when the group's shard restarted
	// (crashed, or was rebuilt by a coordinator reset) before the join was
	// answered: while it waited for its claim, or while the shard handled
	// it. Nothing was registered: a member the join had already added is
	// removed before the answer, and any router assertion it made is
	// retracted by the vacant flush. A member registered by an earlier
	// successful Join stays. A later Join retries.
	ErrRestarted = errors.New("muster: shard restarted")
	// ErrLeft is returned by a Join whose member was removed by Leave
	// before the claim completed.
	ErrLeft = errors.New("muster: member left before the join completed")
	// ErrNotPeer is the remote error a node returns for a message from an
	// incarnation it has declared departed (code CodeNotPeer). The sender
	// treats the receiver as disconnected; a *RemoteError with that code
	// matches it under errors.Is.
	ErrNotPeer error = &codedError{CodeNotPeer, "muster: not a peer"}
	// ErrBadMessage is returned for a message that does not decode (code
	// CodeBadMessage).
	ErrBadMessage error = &codedError{CodeBadMessage, "muster: bad message"}
	// ErrDrainTimeout is returned by Drain when some peers did not
	// acknowledge the departure before ctx ended; see DrainError.
	ErrDrainTimeout = errors.New("muster: drain timed out")
	// ErrInvalidConfig is wrapped by New for a bad Config.
	ErrInvalidConfig = errors.New("muster: invalid config")
)

// DrainError lists the peers that did not acknowledge a Drain in time.
// It matches ErrDrainTimeout with errors.Is.
type DrainError struct{ Unacked []string }

func (e *DrainError) Error() string {
	return "muster: drain timed out waiting for " + joinNames(e.Unacked)
}

// Is reports whether target is ErrDrainTimeout.
func (e *DrainError) Is(target error) bool { return target == ErrDrainTimeout }

func joinNames(ns []string) string {
	out := ""
	for i, n := range ns {
		if i > 0 {
			out += ","
		}
		out += n
	}
	return out
}
