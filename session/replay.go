package session

import (
	"context"
	"fmt"
)

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
	Events []Event
	// Top is the joiner's position once Events are applied: the last
	// replayed event's position, or the cursor when nothing was replayed.
	Top Position
	// Recovered is true when Events are every event after the cursor;
	// otherwise Reason says why not.
	Recovered bool
	Reason    ReplayReason // "" when Recovered
	// Skip is the live cut-off: a live event at or before Skip is one the
	// joiner already holds (see Duplicate). The zero Position keeps every
	// live event: a cursor ahead of the log is not a position the live
	// stream has passed.
	Skip Position
}

// Duplicate reports whether a live event at pos is at or before the seam,
// so the joiner already holds it (replayed, or at or before its cursor).
func (r ReplayResult) Duplicate(pos Position) bool { return !r.Skip.Less(pos) }

// Replay reads session id's log after cursor (up to limit events; limit
// <= 0 means the log's own bound) and applies the replay seam's rules:
//
//   - a log that does not reach back to the cursor, or events missing
//     between two it holds, gives Recovered false with ReplayTruncated.
//     Missing means a forward jump in seq inside one epoch (every event gets
//     the next seq), or an epoch's first event whose Prev (where the previous
//     epoch ended) is after the event before it: the previous epoch's tail
//     is not there. Across an epoch without Prev, a seq jump counts;
//   - a cursor ahead of the log (the log neither reaches back to it nor
//     holds anything after it: a restarted embedded node, a wiped store)
//     is treated as the top: Skip is zero, so every live event reaches the
//     joiner instead of those up to its cursor being dropped;
//   - otherwise Skip is Top, and live copies of replayed events are dropped.
//
// A log read error gives Recovered false with ReplayUnavailable, Top and
// Skip at the cursor, and the error (wrapped) for the caller to count and
// log; the result is still the one to answer with.
func Replay(ctx context.Context, log ReplayLog, id string, cursor Position, limit int) (ReplayResult, error) {
	res := ReplayResult{Top: cursor, Skip: cursor, Recovered: true}
	events, complete, err := log.Since(ctx, id, cursor, limit)
	if err != nil {
		res.Recovered, res.Reason = false, ReplayUnavailable
		return res, fmt.Errorf("session: replay %s after %s: %w", id, cursor, err)
	}
	if !complete {
		res.Recovered, res.Reason = false, ReplayTruncated
	}
	for _, ev := range events {
		if missed(res.Top, ev) {
			res.Recovered, res.Reason = false, ReplayTruncated
		}
		res.Top = ev.Pos()
	}
	res.Events, res.Skip = events, res.Top
	if !complete && len(events) == 0 {
		res.Skip = Position{}
	}
	return res, nil
}
