package session

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/relaygw/relay/agent"
)

// Errors shared by the stores. Check them with errors.Is / errors.As.
var (
	// ErrFenced means a write carried an epoch older than one already stored
	// (session store) or a position not above the log's top (replay log). The
	// writer no longer owns the session: there is nothing to retry.
	ErrFenced = errors.New("session: fenced by a newer epoch")
	// ErrNotOwner is returned by Release when the caller's owner/epoch no
	// longer match the stored lease (nothing was changed).
	ErrNotOwner = errors.New("session: lease not held by this owner and epoch")
	// ErrOutcomeUnknown means a store write failed in a way that does not
	// tell whether it landed (the statement was sent, no answer came back).
	// SessionStore.Accept and CompleteTurn are idempotent, so the same write
	// may be repeated to settle it. Any other write error means nothing
	// landed.
	ErrOutcomeUnknown = errors.New("session: store write outcome unknown")
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
	// Previous is the owner the row named before this claim, as the claim
	// read it: "" for a new row, Owner itself for a renewal or a re-claim of
	// its own. For logs and metrics (takeovers); decisions use Epoch.
	Previous string
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

// SessionStore is the durable state of sessions (docs/OWNERSHIP.md
// "Durable inbox and history"): per session a fence row (epoch, last seq),
// the inbox of accepted inputs whose turn has not completed, the history
// (append-only, numbered from 1) and the idempotency keys accepted within
// their retention. Implementations: MemorySessionStore (embedded default)
// and pgstore.SessionStore; both pass storetest.SessionStoreSuite.
//
// Every write is one atomic step fenced by the writer's epoch: it lands only
// if the stored epoch is not ahead of the writer's, and raises the stored
// epoch to the writer's. A write that is fenced changes nothing and returns
// an error wrapping ErrFenced. No write rewrites history: a turn's end
// appends its messages, so its cost does not grow with the conversation.
type SessionStore interface {
	// Thaw fences key at epoch (creating its row at seq 0 if there is none)
	// and returns what a new owner starts from: the last seq, the inbox in
	// (epoch, seq) order, the newest q.HistoryWindow messages and the
	// idempotency keys accepted less than q.KeyTTL ago (on the store's
	// clock), newest q.MaxKeys at most.
	Thaw(ctx context.Context, key string, epoch int64, q ThawQuery) (Thawed, error)
	// Accept fences key at epoch, puts in into the inbox (replacing an entry
	// at the same position, so a repeated write is harmless), raises the
	// stored seq to in's seq and, when in has an idempotency key, records it
	// (replacing an entry of the same key); keys older than keyTTL are
	// pruned on the way. When in.DoubleTexting is set and the session has
	// no double-texting mode yet, it becomes the session's (set once, never
	// changed by a later Accept). The session must have been thawed at epoch. An
	// error wrapping ErrOutcomeUnknown may have landed.
	Accept(ctx context.Context, key string, epoch int64, in InboxEntry, keyTTL time.Duration) error
	// CompleteTurn fences key at epoch, raises the stored seq to t.Seq and,
	// if the inbox holds an entry at t.Input, removes it and appends
	// t.Messages to the history; without the entry (the turn's end was
	// written already) the history is left as it is, so a repeated write is
	// harmless. An error wrapping ErrOutcomeUnknown may have landed.
	CompleteTurn(ctx context.Context, key string, epoch int64, t TurnRecord) error
	// StartTurn fences key at epoch and records that attempt (1, 2, …) of
	// the turn of the inbox entry at input has started: the entry's
	// Attempts is raised to attempt (never lowered, so a repeated write is
	// harmless). Without the entry (its turn's end was written) nothing but
	// the fence changes. It is written before the attempt's first event, so
	// a new owner counts the attempts of a turn even when the replay log
	// lost them (docs/OWNERSHIP.md "Turn journal and resume"). An error
	// wrapping ErrOutcomeUnknown may have landed.
	StartTurn(ctx context.Context, key string, epoch int64, input agent.Position, attempt int) error
	// LookupKey reads the idempotency key idemKey of session key without
	// writing: its record (Age on the store's clock) when it was accepted
	// less than keyTTL ago. ok is false otherwise, or when the session has
	// no row. The actor asks only once its in-memory set of keys is full
	// (MaxIdempotencyKeys), so every key stays remembered for keyTTL.
	LookupKey(ctx context.Context, key, idemKey string, keyTTL time.Duration) (rec KeyRecord, ok bool, err error)
	// Read returns key's stored state without writing: epoch, seq, inbox and
	// one page of history (q). ok is false when the session has no row.
	Read(ctx context.Context, key string, q HistoryQuery) (st StoredSession, ok bool, err error)
	// Unfinished lists up to limit sessions whose inbox is not empty
	// (accepted inputs whose turn has not completed), in no set order.
	Unfinished(ctx context.Context, limit int) ([]string, error)
}

// ThawQuery bounds what Thaw loads.
type ThawQuery struct {
	HistoryWindow int           // newest history messages to load (0: none)
	KeyTTL        time.Duration // idempotency key retention
	MaxKeys       int           // newest keys to load at most
}

// Thawed is what a new owner starts from.
type Thawed struct {
	FromEpoch int64 // the epoch stored before this thaw (0: new session)
	Seq       int64
	Inbox     []InboxEntry    // oldest first
	History   []StoredMessage // the newest HistoryWindow messages, oldest first
	Keys      []KeyRecord     // oldest first
	// DoubleTexting is the session's double-texting mode, set by its first
	// input (InboxEntry.DoubleTexting); "" when none was set.
	DoubleTexting string
}

// InboxEntry is one accepted input: its user_event's position, its
// idempotency key ("" for none), the SHA-256 of its canonical body
// (InputHash) and how many attempts of its turn have started (StartTurn;
// 0: the turn never started). Accept ignores Attempts.
type InboxEntry struct {
	Epoch    int64
	Seq      int64
	Input    agent.Input
	BodyHash [32]byte
	Attempts int
	// DoubleTexting, when not "", is a double-texting mode Accept makes the
	// session's if it has none yet (the session's first input names it). It
	// is not part of the entry: Thaw and Read return entries without it.
	DoubleTexting string
}

// Pos returns the position of the entry's user_event.
func (e InboxEntry) Pos() agent.Position { return agent.Position{Epoch: e.Epoch, Seq: e.Seq} }

// KeyRecord is one remembered idempotency key: where its input was
// accepted, the hash of its body, and its age on the store's clock when
// read (Thaw).
type KeyRecord struct {
	Key      string
	Epoch    int64
	Seq      int64
	BodyHash [32]byte
	Age      time.Duration
}

// TurnRecord is a completed (or failed) turn as CompleteTurn writes it.
type TurnRecord struct {
	Input    agent.Position  // the input's position (its user_event)
	Messages []agent.Message // appended to the history, in order
	Seq      int64           // the last seq the turn's events use
}

// StoredMessage is a history message with its number N (1, 2, … in
// order of appending) and the position of the input of its turn.
type StoredMessage struct {
	N    int64          `json:"n"`
	Turn agent.Position `json:"turn"`
	agent.Message
}

// HistoryQuery selects one page of history: the Limit newest messages
// numbered below Before (Before <= 0: the newest).
type HistoryQuery struct {
	Before int64
	Limit  int
}

// StoredSession is a session as Read returns it.
type StoredSession struct {
	Epoch   int64
	Seq     int64
	Inbox   []InboxEntry    // oldest first
	History []StoredMessage // the page, oldest first
	Total   int64           // messages in the whole history
	// DoubleTexting is the mode the session's first input set ("" when
	// none was set: the node's Config.DoubleTexting applies).
	DoubleTexting string
}

// ReplayLog keeps a bounded, recent history of each session's events so a
// late joiner can catch up. Entries are ordered by Position; an append at or
// below the current top is refused with ErrFenced.
type ReplayLog interface {
	// Append adds ev to its session's log.
	Append(ctx context.Context, ev agent.Event) error
	// Since returns up to limit events of session strictly after pos, oldest
	// first. complete is false when the log no longer reaches back to pos
	// (events after pos were trimmed or expired), so the caller must refetch
	// history another way. pos zero means "from the beginning".
	Since(ctx context.Context, session string, after agent.Position, limit int) (events []agent.Event, complete bool, err error)
	// Top returns the position of the newest event in session's log and
	// true, or the zero Position and false when the session has no log
	// (never written, or expired).
	Top(ctx context.Context, session string) (top agent.Position, ok bool, err error)
}

// Publisher delivers events live to the sockets subscribed to the session's
// topic, on this node and others. Delivery is at-most-once; the replay log
// closes gaps.
type Publisher interface {
	Publish(ctx context.Context, ev agent.Event) error
}
