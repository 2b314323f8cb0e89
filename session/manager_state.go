package session

import (
	"context"
	"sort"
	"sync/atomic"

	"go.uber.org/zap"
)

// Where a State was read from.
const (
	SourceActor       = "actor"       // the live actor on this node
	SourceCheckpoint  = "checkpoint"  // the last checkpoint (the owner may be elsewhere)
	SourceNone        = "none"        // no checkpoint: the session has no history yet
	SourceUnavailable = "unavailable" // the checkpoint could not be read in time
)

// State is a session as GET /api/sessions/{id} shows it. Epoch is the
// owner's epoch and Seq the last sequence number assigned (a late joiner may
// pass them as last_event). History holds finished turns and the user
// message of a running one; Pending lists accepted inputs (as user messages)
// whose turn has not started. Running and Pending are only known from a live
// actor.
type State struct {
	Session string    `json:"session"`
	Epoch   int64     `json:"epoch"`
	Seq     int64     `json:"seq"`
	History []Message `json:"history"`
	Pending []Message `json:"pending"`
	Running bool      `json:"running"`
	Source  string    `json:"source"`
}

// State returns session id's history, epoch and last seq: from the live
// actor if this node runs it, else from the checkpoint within ReadTimeout.
// A read only feeds a view, so store trouble is not an error: the State
// comes back empty with Source SourceUnavailable. The only error is
// ErrInvalidID.
func (m *Manager) State(ctx context.Context, id string) (State, error) {
	if !ValidID(id) {
		return State{}, ErrInvalidID
	}
	m.mu.Lock()
	a := m.actors[id]
	m.mu.Unlock()
	if a != nil && a.ctx.Err() == nil {
		return a.state(), nil
	}
	st := State{Session: id, History: []Message{}, Pending: []Message{}}
	ctx, cancel := context.WithTimeout(ctx, m.cfg.ReadTimeout)
	defer cancel()
	c, ok, err := m.cfg.Checkpoints.Load(ctx, id)
	if err != nil {
		m.log.Warn("session state: checkpoint unreadable", zap.String("session", id), zap.Error(err))
		st.Source = SourceUnavailable
		return st, nil
	}
	if !ok {
		st.Source = SourceNone
		return st, nil
	}
	snap, err := decodeSnapshot(c.Data)
	if err != nil {
		m.log.Warn("session state: checkpoint undecodable", zap.String("session", id), zap.Error(err))
		st.Source = SourceUnavailable
		return st, nil
	}
	st.Epoch, st.Seq, st.Source = c.Epoch, snap.Seq, SourceCheckpoint
	if snap.History != nil {
		st.History = snap.History
	}
	for _, p := range snap.Pending {
		st.Pending = append(st.Pending, Message{Role: "user", Content: inputText(p.Input)})
	}
	return st, nil
}

// Info describes one live actor, for the admin API.
type Info struct {
	Session string `json:"session"`
	Epoch   int64  `json:"epoch"`
	Seq     int64  `json:"seq"`
	Running bool   `json:"running"` // a turn is running
	Pending int    `json:"pending"` // accepted inputs waiting for their turn
}

// Sessions lists the actors live on this node, ordered by session id.
func (m *Manager) Sessions() []Info {
	m.mu.Lock()
	actors := make([]*actor, 0, len(m.actors))
	for _, a := range m.actors {
		actors = append(actors, a)
	}
	m.mu.Unlock()
	out := make([]Info, 0, len(actors))
	for _, a := range actors {
		if a.ctx.Err() != nil {
			continue
		}
		a.mu.Lock()
		v := a.view
		a.mu.Unlock()
		out = append(out, Info{Session: a.id, Epoch: a.epoch, Seq: v.seq, Running: v.running, Pending: len(v.pending)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Session < out[j].Session })
	return out
}

// Stats counts what the Manager's actors went through since it started.
type Stats struct {
	Accepted        uint64 // inputs accepted (duplicates not counted)
	Duplicates      uint64 // inputs answered from the idempotency keys
	TurnsCompleted  uint64
	TurnsFailed     uint64
	Thaws           uint64 // actors started from a checkpoint (or from nothing)
	Hibernations    uint64
	StandDowns      uint64 // actors stopped without a clean hand-back
	Fenced          uint64 // checkpoint saves or log appends refused by the fence
	LogAppendErrors uint64 // replay-log appends that failed (not fenced)
	PublishErrors   uint64
	Forwards        uint64 // forward hops Submit made to other nodes
}

// Stats returns the Manager's counters.
func (m *Manager) Stats() Stats {
	c := &m.stats
	return Stats{
		Accepted:        c.accepted.Load(),
		Duplicates:      c.duplicates.Load(),
		TurnsCompleted:  c.turnsCompleted.Load(),
		TurnsFailed:     c.turnsFailed.Load(),
		Thaws:           c.thaws.Load(),
		Hibernations:    c.hibernations.Load(),
		StandDowns:      c.standDowns.Load(),
		Fenced:          c.fenced.Load(),
		LogAppendErrors: c.logAppendErrors.Load(),
		PublishErrors:   c.publishErrors.Load(),
		Forwards:        c.forwards.Load(),
	}
}

type counters struct {
	accepted, duplicates, turnsCompleted, turnsFailed, thaws, hibernations,
	standDowns, fenced, logAppendErrors, publishErrors, forwards atomic.Uint64
}

// LiveLease reads session id's lease without claiming it (one Get on the
// lease store): ok is false when no process holds a live lease (no row, or
// expired by the store's clock). Remaining is the holder's time left as the
// store reported it. Errors: ErrInvalidID; the store's error.
func (m *Manager) LiveLease(ctx context.Context, id string) (l Lease, ok bool, err error) {
	if !ValidID(id) {
		return Lease{}, false, ErrInvalidID
	}
	l, ok, err = m.cfg.Leases.Get(ctx, id)
	if err != nil || !ok || l.Remaining <= 0 {
		return Lease{}, false, err
	}
	return l, true, nil
}
