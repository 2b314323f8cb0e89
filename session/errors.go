package session

import "errors"

// Errors returned by the Manager. Check them with errors.Is; the lease-held
// case is the typed *LeaseHeldError (errors.As), and ErrFenced / ErrInvalidID
// are declared beside the stores and events.
var (
	// ErrBusy means the session's mailbox is full or MaxPending inputs are
	// already queued behind its turn: the input was not accepted. The caller may retry after a short delay.
	ErrBusy = errors.New("session: mailbox full")
	// ErrDraining means the node is handing its sessions back and accepts no
	// new input. The caller answers with a retry directive.
	ErrDraining = errors.New("session: node draining")
	// ErrClosed means the Manager was closed.
	ErrClosed = errors.New("session: manager closed")
	// ErrIdempotencyKeyReused means the input's idempotency key was
	// accepted before (within its retention) with a different body
	// (InputHash): the caller has a bug. Nothing was accepted.
	ErrIdempotencyKeyReused = errors.New("session: idempotency key reused with a different body")
	// ErrLeaseLost means the renewer found another owner holding the lease,
	// or found the lease re-claimed under a newer epoch: the session stood
	// down.
	ErrLeaseLost = errors.New("session: lease lost to another owner")
	// ErrLeaseDeadline means renewals kept failing until the lease could
	// have lapsed (by the local monotonic deadline): the running turn was
	// cancelled and the session stood down.
	ErrLeaseDeadline = errors.New("session: lease could not be renewed before it could lapse")
)

// Reasons an actor retires that are not failures. Accept retries (with a
// fresh claim) when it meets an actor retiring for any reason but ErrClosed.
var (
	errHibernated = errors.New("session: actor hibernated")
	errReplaced   = errors.New("session: actor replaced by a newer epoch")
	errDrained    = errors.New("session: actor drained")
)
