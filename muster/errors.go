package muster

import "errors"

// Scope errors. Transport errors are declared in transport.go.
var (
	// ErrRPCFailed is returned by Join when the router could not be told
	// that this node holds the group (timeout, no responders, remote error).
	// Nothing was registered; a later Join retries the claim.
	ErrRPCFailed = errors.New("muster: rpc failed")
	// ErrDraining is returned by Join after Drain started.
	ErrDraining = errors.New("muster: draining")
	// ErrClosed is returned by every operation after Close.
	ErrClosed = errors.New("muster: scope closed")
	// ErrNotStarted is returned by Join and Leave before Start.
	ErrNotStarted = errors.New("muster: scope not started")
	// ErrRestarted is returned by Join when the group's shard restarted
	// while the join waited for its claim; nothing was registered.
	ErrRestarted = errors.New("muster: shard restarted")
	// ErrLeft is returned by a Join whose member was removed by Leave
	// before the claim completed.
	ErrLeft = errors.New("muster: member left before the join completed")
	// ErrNotPeer is the remote error a node returns for a message from an
	// incarnation it has declared departed. The sender treats the receiver
	// as disconnected.
	ErrNotPeer = errors.New("muster: not a peer")
	// ErrBadMessage is returned for a message that does not decode.
	ErrBadMessage = errors.New("muster: bad message")
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
