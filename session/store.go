package session

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Errors shared by the stores. Check them with errors.Is / errors.As.
var (
	// ErrFenced means a write carried an epoch older than one already stored
	// (checkpoint) or a position not above the log's top (replay log). The
	// writer no longer owns the session: there is nothing to retry.
	ErrFenced = errors.New("session: fenced by a newer epoch")
	// ErrNotOwner is returned by Release when the caller's owner/epoch no
	// longer match the stored lease (nothing was changed).
	ErrNotOwner = errors.New("session: lease not held by this owner and epoch")
)

// Lease is a claim on a session key as the lease store reports it.
// Remaining is the time left before expiry measured on the store's clock at
// the moment of the statement; callers may subtract their own elapsed
// monotonic time but must never compare wall clocks.
type Lease struct {
	Key       string
	Owner     string
	Epoch     int64
	Remaining time.Duration
}

// LeaseHeldError is returned by Claim when another owner holds a live lease.
// Use errors.As to get the holder; Remaining is the holder's time left on the
// store's clock and feeds the retry directive's delay.
//
// It crosses the wire inside a forward's RemoteError as
// {"key","holder","epoch","remaining_ns"}, keeping every field.
type LeaseHeldError struct {
	Key       string        `json:"key"`
	Holder    string        `json:"holder"`
	Epoch     int64         `json:"epoch"`
	Remaining time.Duration `json:"remaining_ns"`
}

func (e *LeaseHeldError) Error() string {
	return fmt.Sprintf("session: lease %q held by %s (epoch %d, %v left)", e.Key, e.Holder, e.Epoch, e.Remaining)
}

// LeaseStore decides ownership of sessions. Implementations: MemoryLeaseStore
// (embedded default) and the Postgres store. Every liveness decision is made
// on the store's own clock, inside one atomic statement.
type LeaseStore interface {
	// Claim runs the four-case claim for key on behalf of owner:
	//   no row                    → claim, epoch 1;
	//   owner's own live row      → extend to ttl, epoch unchanged;
	//   another's expired row     → take over, epoch+1;
	//   another's live row        → nothing changes; returns *LeaseHeldError.
	// Any other error means the store could not decide (unreachable): callers
	// must refuse the work, never run it unfenced.
	Claim(ctx context.Context, key, owner string, ttl time.Duration) (Lease, error)
	// Release expires owner's lease now, only if owner and epoch still match,
	// so the next claim elsewhere succeeds at once (drain hand-back).
	// Returns ErrNotOwner when they do not match.
	Release(ctx context.Context, key, owner string, epoch int64) error
	// Get reads the current lease row without changing it; ok is false when
	// there is no row. A returned lease with Remaining <= 0 has expired.
	Get(ctx context.Context, key string) (l Lease, ok bool, err error)
}

// Checkpoint is a session's durable state as last written by its owner.
type Checkpoint struct {
	Epoch     int64
	Data      []byte // JSON document, see the actor's snapshot type
	UpdatedAt time.Time
}

// CheckpointStore keeps one checkpoint per session, fenced by epoch.
type CheckpointStore interface {
	// Load returns the stored checkpoint; ok is false when there is none.
	Load(ctx context.Context, key string) (c Checkpoint, ok bool, err error)
	// Save writes data under epoch if the stored epoch is not ahead of it.
	// A write that changes no row returns an error wrapping ErrFenced.
	Save(ctx context.Context, key string, epoch int64, data []byte) error
}

// ReplayLog keeps a bounded, recent history of each session's events so a
// late joiner can catch up. Entries are ordered by Position; an append at or
// below the current top is refused with ErrFenced.
type ReplayLog interface {
	// Append adds ev to its session's log.
	Append(ctx context.Context, ev Event) error
	// Since returns up to limit events of session strictly after pos, oldest
	// first. complete is false when the log no longer reaches back to pos
	// (events after pos were trimmed or expired), so the caller must refetch
	// history another way. pos zero means "from the beginning".
	Since(ctx context.Context, session string, after Position, limit int) (events []Event, complete bool, err error)
}

// Publisher delivers events live to the sockets subscribed to the session's
// topic, on this node and others. Delivery is at-most-once; the replay log
// closes gaps.
type Publisher interface {
	Publish(ctx context.Context, ev Event) error
}
