package session

import (
	"context"
	"fmt"

	"github.com/relaygw/relay/agent"
)

// DefaultReplayMaxLen is the number of events a replay log keeps per session
// when none is configured.
const DefaultReplayMaxLen = 1000

// ReplayReason says why a replay did not recover a joiner's stream
// (docs/OWNERSHIP.md "Join (observe)"). It is the join reply's "reason".
type ReplayReason string

const (
	// ReplayTruncated: the log misses events after the cursor (trimmed,
	// expired, appends lost while it was unreachable, or a cursor ahead of
	// everything it holds). The client refetches history another way.
	ReplayTruncated ReplayReason = "replay_truncated"
	// ReplayUnavailable: the log could not be read.
	ReplayUnavailable ReplayReason = "replay_unavailable"
)

// ReplayResult is the replay seam of one join: the events a joiner gets
// before the live stream, and which live events it must then drop.
type ReplayResult struct {
	// Events are the logged events strictly after the cursor, oldest first
	// (at most the limit given to Replay).
	Events []agent.Event
	// Top is the joiner's position once Events are applied: the last
	// replayed event's position, or the cursor when nothing was replayed.
	Top agent.Position
	// Recovered is true when Events are every event after the cursor;
	// otherwise Reason says why not.
	Recovered bool
	Reason    ReplayReason // "" when Recovered
	// Skip is the live cut-off: a live event at or before Skip is one the
	// joiner already holds (see Duplicate). The zero Position keeps every
	// live event: a cursor ahead of the log is not a position the live
	// stream has passed.
	Skip agent.Position
}

// Duplicate reports whether a live event at pos is at or before the seam,
// so the joiner already holds it (replayed, or at or before its cursor).
func (r ReplayResult) Duplicate(pos agent.Position) bool { return !r.Skip.Less(pos) }

// SessionHead reports a session's authoritative newest position as its
// owner or its session store knows it: the owner's current (epoch, seq)
// when the owner runs on the caller's node, else the stored (epoch, seq).
// ok is false when it could not be read. Replay asks for it only when the
// log itself cannot say whether the joiner holds the session's top: no log
// (never written, or expired) or a cursor beyond the log's top.
type SessionHead func(ctx context.Context) (head agent.Position, ok bool)

// Replay reads session id's log after cursor (up to limit events; limit
// <= 0 means the log's own bound) and applies the replay seam's rules.
// Recovered is true exactly when the joiner, after the replay, holds every
// event of the session after its cursor:
//
//   - a log that does not reach back to the cursor, or events missing
//     between two it holds, gives Recovered false with ReplayTruncated.
//     Missing means a forward jump in seq inside one epoch (every event gets
//     the next seq), or an epoch's first event whose Prev (where the previous
//     epoch ended) is after the event before it: the previous epoch's tail
//     is not there. Across an epoch without Prev, a seq jump counts;
//   - a log that does not reach back to the cursor still recovers when its
//     first event is an epoch's first whose Prev is at or before the cursor
//     (the previous epoch ended there: nothing lies between);
//   - a cursor at the log's top is recovered (nothing follows it yet);
//   - with no log, or a cursor beyond the log's top, head decides: a
//     cursor at the head's seq holds everything (a log that expired while
//     the session was idle), a head past the cursor means events the log
//     lost (ReplayTruncated), a head before the cursor (or an unknown head)
//     means the cursor is ahead of the session (a wiped store, another
//     cluster): ReplayTruncated, or ReplayUnavailable when head could not be
//     read. A nil head (the caller has no such source) leaves the log's
//     verdict: a joiner at the zero cursor with no log is recovered, any
//     other cursor beyond the log is ReplayTruncated;
//   - a cursor ahead of the session, or of a log that neither reaches back
//     to it nor holds anything after it, is treated as the top: Skip is
//     zero, so every live event reaches the joiner instead of those up to
//     its cursor being dropped;
//   - otherwise Skip is Top, and live copies of replayed events are dropped.
//
// A log read error gives Recovered false with ReplayUnavailable, Top and
// Skip at the cursor, and the error (wrapped) for the caller to count and
// log; the result is still the one to answer with.
func Replay(ctx context.Context, log ReplayLog, id string, cursor agent.Position, limit int, head SessionHead) (ReplayResult, error) {
	res := ReplayResult{Top: cursor, Skip: cursor, Recovered: true}
	events, complete, err := log.Since(ctx, id, cursor, limit)
	var top agent.Position
	var exists bool
	if err == nil {
		// Read after Since: top only grows, so a cursor beyond it was
		// beyond everything Since could have seen.
		top, exists, err = log.Top(ctx, id)
	}
	if err != nil {
		res.Recovered, res.Reason = false, ReplayUnavailable
		return res, fmt.Errorf("session: replay %s after %s: %w", id, cursor, err)
	}
	truncate := func() { res.Recovered, res.Reason = false, ReplayTruncated }
	for _, ev := range events {
		if missed(res.Top, ev) {
			truncate()
		}
		res.Top = ev.Pos()
	}
	res.Events, res.Skip = events, res.Top
	switch {
	case len(events) > 0:
		// A log that does not reach back to the cursor still recovers
		// when its first event names the cursor as where the previous
		// epoch ended (a log created afresh by a new owner after expiry).
		if first := events[0]; !complete && (first.Prev == nil || first.Epoch == cursor.Epoch || missed(cursor, first)) {
			truncate()
		}
	case exists && !top.Less(cursor):
		// Nothing after the cursor; it is at the top, or below it with the
		// events between trimmed.
		if !complete {
			truncate()
		}
	case cursor.IsZero() && !exists:
		// A joiner holding nothing, and no log: recovered only when the
		// session has no event either.
		if head == nil {
			break
		}
		if h, ok := head(ctx); !ok {
			res.Recovered, res.Reason = false, ReplayUnavailable
		} else if h.Seq > 0 {
			truncate()
		}
	default: // no log, or a cursor beyond the log's top
		var h agent.Position
		ok := false
		if head != nil {
			h, ok = head(ctx)
		}
		switch {
		case ok && h.Seq == cursor.Seq && !h.Less(agent.Position{Epoch: cursor.Epoch}):
			// The joiner holds the session's top; the log expired or
			// lost nothing the joiner lacks.
		case ok && cursor.Less(h) && h.Seq > cursor.Seq:
			truncate() // events after the cursor the log no longer holds
		default:
			// Ahead of the session, or of everything known: keep every
			// live event.
			truncate()
			if head != nil && !ok {
				res.Reason = ReplayUnavailable
			}
			res.Skip = agent.Position{}
		}
	}
	return res, nil
}

// Contiguous reports whether ev is the event that directly follows last for
// a holder of last: after it, and with no event missing between them (the
// seam rule of Replay: the next seq in one epoch, or an epoch's first event
// whose Prev is at or before last).
func Contiguous(last agent.Position, ev agent.Event) bool {
	return last.Less(ev.Pos()) && !missed(last, ev)
}

// FreshFloor is the floor of a replay log created by appending first:
// everything before first is unknown, except that Seq 1 starts a session's
// history (floor 0-0). Every ReplayLog implementation records it when a
// session's log starts.
func FreshFloor(first agent.Position) agent.Position {
	if first.Seq <= 1 {
		return agent.Position{}
	}
	return agent.Position{Epoch: first.Epoch, Seq: first.Seq - 1}
}

// CheckAppendPos is the position check of ReplayLog.Append: nil for a
// position above 0-0, else an error naming it ("session: append at E-S:
// position must be above 0-0"); Append then stores nothing.
func CheckAppendPos(p agent.Position) error {
	if p.Epoch < 0 || p.Seq < 0 || p.IsZero() {
		return fmt.Errorf("session: append at %v: position must be above 0-0", p)
	}
	return nil
}
