package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"
)

// journal is the turn journal of the inbox head a thaw found
// (docs/OWNERSHIP.md "Turn journal and resume"): the events its turn
// emitted so far, read back from the replay log. ok is false when the log
// could not prove it holds all of them.
type journal struct {
	input  Position
	events []Event
	ok     bool
}

// turnData is the data of turn_started and turn_resumed: the position of
// the turn's input (its user_event), the attempt number, and for
// turn_resumed the last journaled event the run continues after.
type turnData struct {
	Turn    Position  `json:"turn"`
	Attempt int       `json:"attempt"`
	From    *Position `json:"from,omitempty"`
}

// readTail reads the replay log after where the previous epoch left off
// (one Since, bounded by StoreTimeout): from the inbox head's user_event
// when the inbox holds a turn that started, else from the stored seq. It
// sets a.prev, the Prev of this epoch's first event, and a.journal for a
// head whose turn started. A log that cannot be read, or that does not
// reach back, leaves the journal unproven (the turn restarts) and prev at
// the stored position.
func (a *actor) readTail(th Thawed) {
	if th.FromEpoch == 0 {
		return
	}
	stored := Position{Epoch: th.FromEpoch, Seq: th.Seq}
	a.prev = &stored
	after := stored
	var head *InboxEntry
	if len(th.Inbox) > 0 && th.Inbox[0].Attempts > 0 {
		head = &th.Inbox[0]
		after = head.Pos()
	}
	ctx, cancel := context.WithTimeout(a.ctx, a.m.cfg.StoreTimeout)
	evs, complete, err := a.m.cfg.Log.Since(ctx, a.id, after, 0)
	cancel()
	if err != nil {
		a.m.tr.Emit("session.journal.unreadable", "owner", a.m.cfg.Owner, "session", a.id, "err", err.Error())
		evs, complete = nil, false
	}
	if complete && len(evs) > 0 {
		if last := evs[len(evs)-1].Pos(); stored.Less(last) {
			a.prev = &last
		}
	}
	if head == nil {
		return
	}
	j := &journal{input: head.Pos()}
	j.events, j.ok = turnJournal(evs, complete, head.Pos())
	a.journal = j
	a.m.tr.Emit("session.journal", "owner", a.m.cfg.Owner, "session", a.id, "input_epoch", head.Epoch,
		"input_seq", head.Seq, "events", len(j.events), "ok", j.ok)
	if !j.ok {
		a.m.log.Info("unfinished turn's journal not in the replay log: the turn restarts",
			zap.String("session", a.id), zap.Stringer("input", head.Pos()), zap.Int("read", len(evs)),
			zap.Bool("complete", complete), zap.Error(err))
	}
}

// turnJournal picks the journal of the turn of the input at head out of
// evs, the log's events after head. The journal starts at the last
// turn_started of that input (a restart begins afresh) and holds every
// later event but other inputs' user_events. ok is false when the log
// does not reach back to head (complete false), when it skips a seq inside
// an epoch, when an epoch's first event says its predecessor ended later
// than the log holds (Event.Prev), or when no turn_started of the input is
// found.
func turnJournal(evs []Event, complete bool, head Position) ([]Event, bool) {
	if !complete {
		return nil, false
	}
	start := -1
	top := head
	for i, ev := range evs {
		if missed(top, ev) {
			return nil, false
		}
		top = ev.Pos()
		if ev.Type != TypeTurnStarted {
			continue
		}
		var d turnData
		if json.Unmarshal(ev.Data, &d) == nil && d.Turn == head {
			start = i
		}
	}
	if start < 0 {
		return nil, false
	}
	out := make([]Event, 0, len(evs)-start)
	for _, ev := range evs[start:] {
		if ev.Type != TypeUserEvent {
			out = append(out, ev)
		}
	}
	return out, true
}

// missed reports whether ev, read right after an event (or cursor) at top,
// shows that events between them are missing: a seq jump inside one epoch,
// or an epoch's first event whose Prev is after top. Without Prev, a seq
// jump across epochs counts as missing too (the older rule).
func missed(top Position, ev Event) bool {
	switch {
	case ev.Epoch == top.Epoch:
		return ev.Seq > top.Seq+1
	case ev.Prev != nil:
		return top.Less(*ev.Prev)
	default:
		return ev.Seq > top.Seq+1
	}
}

// journalText is the partial output of a journal: the data.text of its
// delta events, concatenated.
func journalText(evs []Event) string {
	var b strings.Builder
	for _, ev := range evs {
		if ev.Type != TypeDelta {
			continue
		}
		var d deltaData
		if json.Unmarshal(ev.Data, &d) == nil {
			b.WriteString(d.Text)
		}
	}
	return b.String()
}

// resumeFor returns the TurnResume of attempt of input p when this actor
// can continue it: the agent is Resumable and the thaw proved p's journal.
// Nil means the attempt starts from the beginning. The journal is used once.
func (a *actor) resumeFor(p pendingInput, attempt int) *TurnResume {
	j := a.journal
	a.journal = nil
	if attempt <= 1 || j == nil || !j.ok || j.input != p.pos() || len(j.events) == 0 || !resumable(a.m.cfg.Agent) {
		return nil
	}
	return &TurnResume{
		Attempt: attempt,
		From:    j.events[len(j.events)-1].Pos(),
		Text:    journalText(j.events),
		Events:  j.events,
	}
}

// startAttempt records that attempt of p's turn starts (SessionStore.StartTurn,
// one fenced write), retrying a transient failure like a turn's end. A
// fenced write stands the session down; so does one that failed every try
// (the turn is not run uncounted; the next owner tries again).
func (a *actor) startAttempt(p pendingInput, attempt int) error {
	wait := storeRetryFirst
	for try := 1; ; try++ {
		ctx, cancel := context.WithTimeout(a.ctx, a.m.cfg.StoreTimeout)
		err := a.m.cfg.Store.StartTurn(ctx, a.id, a.epoch, p.pos(), attempt)
		cancel()
		switch {
		case err == nil:
			return nil
		case errors.Is(err, ErrFenced):
			a.fence("start turn", err)
			return err
		case a.ctx.Err() != nil || try >= a.m.cfg.StoreAttempts:
			err = fmt.Errorf("session: start turn %q at %v (attempt %d, try %d): %w", a.id, p.pos(), attempt, try, err)
			a.retire(err)
			return err
		}
		a.m.tr.Emit("session.turn.start.retry", "owner", a.m.cfg.Owner, "session", a.id, "try", try, "err", err.Error())
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-a.ctx.Done():
			t.Stop()
			return a.cause()
		}
		wait = min(2*wait, storeRetryMax)
	}
}
