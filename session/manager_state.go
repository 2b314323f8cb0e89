package session

import (
	"context"
	"sort"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/relaygw/relay/agent"
)

// Where a State was read from.
const (
	SourceActor       = "actor"       // the live actor on this node (epoch, seq, pending) and the store (history)
	SourceStore       = "store"       // the session store (the owner may be elsewhere)
	SourceNone        = "none"        // the store has no such session: no history yet
	SourceUnavailable = "unavailable" // the store could not be read in time
)

// History page bounds of State (docs/OWNERSHIP.md "Durable inbox and
// history"): a query without a limit gets DefaultHistoryPage messages, and
// no page holds more than MaxHistoryPage.
const (
	DefaultHistoryPage = 100
	MaxHistoryPage     = 1000
)

// State is a session as GET /api/sessions/{id} shows it. Epoch is the
// owner's epoch and Seq the last sequence number assigned (a late joiner may
// pass them as last_event). History is one page of the completed turns'
// messages, oldest first, each numbered (N) from 1 in the whole history;
// Total counts them all, and NextBefore is the Before of the page of older
// messages (0 when this page reaches the first). Pending lists the accepted
// inputs whose turn has not completed, oldest first (the running turn's
// first when Running).
type State struct {
	Session    string          `json:"session"`
	Epoch      int64           `json:"epoch"`
	Seq        int64           `json:"seq"`
	History    []StoredMessage `json:"history"`
	Total      int64           `json:"total"`
	NextBefore int64           `json:"next_before"`
	Pending    []agent.Message `json:"pending"`
	Running    bool            `json:"running"`
	// DoubleTexting is what an input sent while a turn runs does in this
	// session: enqueue, reject or interrupt (Config.DoubleTexting when the
	// session's first input set none).
	DoubleTexting string `json:"double_texting"`
	Source        string `json:"source"`
}

// State returns one page of session id's history (q: the Limit newest
// messages numbered below Before; Limit <= 0 means DefaultHistoryPage,
// above MaxHistoryPage it is capped) with its epoch, last seq and pending
// inputs: from the live actor if this node runs it, else from the store,
// one store read within ReadTimeout. A read only feeds a view, so store
// trouble is not an error: the State comes back without history, Source
// SourceUnavailable. The only error is ErrInvalidID.
func (m *Manager) State(ctx context.Context, id string, q HistoryQuery) (State, error) {
	if !agent.ValidID(id) {
		return State{}, ErrInvalidID
	}
	if q.Limit <= 0 {
		q.Limit = DefaultHistoryPage
	}
	q.Limit = min(q.Limit, MaxHistoryPage)
	m.mu.Lock()
	a := m.actors[id]
	m.mu.Unlock()
	st := State{Session: id, History: []StoredMessage{}, Pending: []agent.Message{}}
	ctx, cancel := context.WithTimeout(ctx, m.cfg.ReadTimeout)
	defer cancel()
	stored, ok, err := m.cfg.Store.Read(ctx, id, q)
	switch {
	case err != nil:
		m.log.Warn("session state: store unreadable", zap.String("session", id), zap.Error(err))
		st.Source = SourceUnavailable
	case !ok:
		st.Source = SourceNone
	default:
		st.Source = SourceStore
		st.Epoch, st.Seq, st.Total = stored.Epoch, stored.Seq, stored.Total
		st.DoubleTexting = stored.DoubleTexting
		if len(stored.History) > 0 {
			st.History = stored.History
			st.NextBefore = stored.History[0].N
			if st.NextBefore <= 1 {
				st.NextBefore = 0
			}
		}
		for _, e := range stored.Inbox {
			st.Pending = append(st.Pending, agent.Message{Role: "user", Content: agent.InputText(e.Input)})
		}
	}
	if a != nil && a.ctx.Err() == nil {
		v := a.currentView()
		st.Epoch, st.Seq, st.Running = a.epoch, v.seq, v.running != nil
		if v.mode != "" {
			st.DoubleTexting = v.mode
		}
		st.Pending = make([]agent.Message, 0, len(v.pending)+1)
		if v.running != nil {
			st.Pending = append(st.Pending, agent.Message{Role: "user", Content: agent.InputText(v.running.Input)})
		}
		for _, p := range v.pending {
			st.Pending = append(st.Pending, agent.Message{Role: "user", Content: agent.InputText(p.Input)})
		}
		if st.Source != SourceUnavailable {
			st.Source = SourceActor
		}
	}
	if st.DoubleTexting == "" {
		st.DoubleTexting = m.cfg.DoubleTexting
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
		out = append(out, Info{Session: a.id, Epoch: a.epoch, Seq: v.seq, Running: v.running != nil, Pending: len(v.pending)})
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
	Thaws           uint64 // actors started from the store (or from nothing)
	Hibernations    uint64
	StandDowns      uint64 // actors stopped without a clean hand-back
	Fenced          uint64 // store writes or log appends refused by the fence
	LogAppendErrors uint64 // replay-log appends that failed (not fenced)
	PublishErrors   uint64
	Forwards        uint64 // forward hops Submit made to other nodes
	InboxErrors     uint64 // inbox writes that failed (the input was refused)
	StoreRetries    uint64 // end-of-turn store writes retried after a transient failure
	TurnsResumed    uint64 // unfinished turns continued from their journal (turn_resumed)
	TurnsRestarted  uint64 // unfinished turns run again from the beginning (attempt > 1)
	TurnsGivenUp    uint64 // turns ended turn_failed after MaxTurnAttempts attempts
	HandOvers       uint64 // turns a drain stopped past its window, left in the inbox for the next owner
	Relogged        uint64 // events a thaw logged at positions an earlier owner took but never logged (tail repair)
	TurnsStopped    uint64 // turns ended turn_stopped (a stop, or a double-texting interrupt)
	Interrupts      uint64 // turns ended with an interrupt (a question for the client)
	Takeovers       uint64 // sessions thawed here at epoch > 1 whose lease another owner held before (it handed back or lapsed)
	HandBacks       uint64 // sessions a drain handed back (lease released for the next owner)
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
		InboxErrors:     c.inboxErrors.Load(),
		StoreRetries:    c.storeRetries.Load(),
		TurnsResumed:    c.turnsResumed.Load(),
		TurnsRestarted:  c.turnsRestarted.Load(),
		TurnsGivenUp:    c.turnsGivenUp.Load(),
		HandOvers:       c.handOvers.Load(),
		Relogged:        c.relogged.Load(),
		TurnsStopped:    c.turnsStopped.Load(),
		Interrupts:      c.interrupts.Load(),
		Takeovers:       c.takeovers.Load(),
		HandBacks:       c.handBacks.Load(),
	}
}

type counters struct {
	accepted, duplicates, turnsCompleted, turnsFailed, thaws, hibernations,
	standDowns, fenced, logAppendErrors, publishErrors, forwards, inboxErrors, storeRetries,
	turnsResumed, turnsRestarted, turnsGivenUp, handOvers, relogged, turnsStopped, interrupts, takeovers, handBacks atomic.Uint64
}

// LiveLease reads session id's lease without claiming it (one Get on the
// lease store): ok is false when no process holds a live lease (no row, or
// expired by the store's clock). Remaining is the holder's time left as the
// store reported it. Errors: ErrInvalidID; the store's error.
func (m *Manager) LiveLease(ctx context.Context, id string) (l Lease, ok bool, err error) {
	if !agent.ValidID(id) {
		return Lease{}, false, ErrInvalidID
	}
	l, ok, err = m.cfg.Leases.Get(ctx, id)
	if err != nil || !ok || l.Remaining <= 0 {
		return Lease{}, false, err
	}
	return l, true, nil
}
