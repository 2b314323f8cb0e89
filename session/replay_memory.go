package session

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/relaygw/relay/agent"
)

// MemoryReplayLog is a ReplayLog kept in process memory, for the embedded
// single-node mode and for tests. It keeps exactly the Redis log's rules:
//
//   - An append must be above the session's top position, else ErrFenced.
//   - Each session keeps its newest maxLen events; older ones are trimmed.
//   - A session's log expires ttl after its last append (ttl <= 0: never).
//   - The log reaches back to its floor: the highest position known to be
//     lost, either trimmed or lying before the first event of a log created
//     afresh. Since(after) is complete when after >= floor. A fresh log's
//     floor is zero when its first event has Seq <= 1 (the start of a
//     session's history) and (Epoch, Seq-1) of that event otherwise.
//   - A session with no log (never written, or expired) is complete only
//     for the zero position: a caller holding a position once saw a log
//     that is gone now.
//
// Expiry is measured on the store's monotonic clock (WithMemoryClock). Safe
// for concurrent use.
type MemoryReplayLog struct {
	maxLen int
	ttl    time.Duration
	now    func() time.Time

	mu        sync.Mutex
	logs      map[string]*memoryStream
	nextSweep time.Time
}

// memoryStream is one session's log. events may hold up to trimSlack(maxLen)
// events older than the newest maxLen: they are trimmed in one copy when the
// slack is full, so an append costs amortized O(1) instead of a copy of the
// whole log. window hides them from every reader.
type memoryStream struct {
	events  []agent.Event
	floor   agent.Position // highest position lost before events[0]
	expires time.Time      // zero when the log never expires
}

// trimSlack is how many events beyond maxLen a log holds before it is
// trimmed back to maxLen: a quarter of maxLen (at least 1), so trimming
// copies at most 4 events per append, amortized, and the log holds at most
// 1.25 × maxLen events.
func trimSlack(maxLen int) int { return max(1, maxLen/4) }

// window returns the newest maxLen events and the floor below them.
func (s *memoryStream) window(maxLen int) ([]agent.Event, agent.Position) {
	if n := len(s.events) - maxLen; n > 0 {
		return s.events[n:], s.events[n-1].Pos()
	}
	return s.events, s.floor
}

var _ ReplayLog = (*MemoryReplayLog)(nil)

// NewMemoryReplayLog returns an in-memory replay log keeping at most maxLen
// events per session (maxLen < 1 means DefaultReplayMaxLen) for ttl after
// each session's last append (ttl <= 0: no expiry).
func NewMemoryReplayLog(maxLen int, ttl time.Duration, opts ...MemoryOption) *MemoryReplayLog {
	if maxLen < 1 {
		maxLen = DefaultReplayMaxLen
	}
	o := newMemoryOptions(opts)
	return &MemoryReplayLog{maxLen: maxLen, ttl: ttl, now: o.now, logs: make(map[string]*memoryStream)}
}

// Append implements ReplayLog.
func (l *MemoryReplayLog) Append(ctx context.Context, ev agent.Event) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("session: append %q: %w", ev.Session, err)
	}
	if err := CheckAppendPos(ev.Pos()); err != nil {
		return err
	}
	ev.Data = append([]byte(nil), ev.Data...)
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.sweep(now)
	s := l.live(ev.Session, now)
	if s == nil {
		s = &memoryStream{floor: FreshFloor(ev.Pos())}
		l.logs[ev.Session] = s
	} else if top := s.events[len(s.events)-1].Pos(); !top.Less(ev.Pos()) {
		return fmt.Errorf("session: append %q at %v (top %v): %w", ev.Session, ev.Pos(), top, ErrFenced)
	}
	s.events = append(s.events, ev)
	if n := len(s.events) - l.maxLen; n > trimSlack(l.maxLen) {
		s.floor = s.events[n-1].Pos()
		k := copy(s.events, s.events[n:])
		clear(s.events[k:]) // drop the trimmed events' data
		s.events = s.events[:k]
	}
	if l.ttl > 0 {
		s.expires = now.Add(l.ttl)
	}
	return nil
}

// Since implements ReplayLog. limit <= 0 means no limit.
func (l *MemoryReplayLog) Since(ctx context.Context, session string, after agent.Position, limit int) ([]agent.Event, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, fmt.Errorf("session: since %q: %w", session, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.live(session, l.now())
	if s == nil {
		return nil, after.IsZero(), nil
	}
	events, floor := s.window(l.maxLen)
	var out []agent.Event
	for _, ev := range events {
		if limit > 0 && len(out) == limit {
			break
		}
		if after.Less(ev.Pos()) {
			ev.Data = append([]byte(nil), ev.Data...)
			out = append(out, ev)
		}
	}
	return out, !after.Less(floor), nil
}

// Top implements ReplayLog.
func (l *MemoryReplayLog) Top(ctx context.Context, session string) (agent.Position, bool, error) {
	if err := ctx.Err(); err != nil {
		return agent.Position{}, false, fmt.Errorf("session: top %q: %w", session, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.live(session, l.now())
	if s == nil || len(s.events) == 0 {
		return agent.Position{}, false, nil
	}
	return s.events[len(s.events)-1].Pos(), true, nil
}

// live returns session's log, dropping it if it has expired. l.mu is held.
func (l *MemoryReplayLog) live(session string, now time.Time) *memoryStream {
	s := l.logs[session]
	if s != nil && !s.expires.IsZero() && !now.Before(s.expires) {
		delete(l.logs, session)
		return nil
	}
	return s
}

// sweep drops expired logs at most once per ttl, so sessions that are never
// read again do not pile up. l.mu is held.
func (l *MemoryReplayLog) sweep(now time.Time) {
	if l.ttl <= 0 || now.Before(l.nextSweep) {
		return
	}
	l.nextSweep = now.Add(l.ttl)
	for id, s := range l.logs {
		if !now.Before(s.expires) {
			delete(l.logs, id)
		}
	}
}
