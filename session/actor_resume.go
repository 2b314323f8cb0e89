package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/relaygw/relay/agent"
)

// journal is the turn journal of the inbox head a thaw found
// (docs/OWNERSHIP.md "Turn journal and resume"): the events its turn
// emitted so far, read back from the replay log. ok is false when the log
// could not prove it holds all of them.
type journal struct {
	input  agent.Position
	events []agent.Event
	ok     bool
}

// turnData is the data of turn_started and turn_resumed: the position of
// the turn's input (its user_event), the attempt number, and for
// turn_resumed the last journaled event the run continues after.
type turnData struct {
	Turn    agent.Position  `json:"turn"`
	Attempt int             `json:"attempt"`
	From    *agent.Position `json:"from,omitempty"`
}

// readTail reads the replay log where the previous epochs left off (one
// Since, bounded by StoreTimeout), from the earliest of: the stored seq, the
// oldest inbox entry, and the input of the last completed turn. With what it
// read it
//   - repairs the tail (repairTail): events an earlier owner took a position
//     for in the store but never logged are logged now, at those positions;
//   - moves a.seq up to the log's top, so seq keeps growing across epochs and
//     a missed tail of a dead epoch shows as a seq jump;
//   - sets a.prev, the Prev of this epoch's first event (the log's top, or
//     the stored position when the log could not be read);
//   - sets a.journal for an inbox head whose turn started;
//   - notes the interrupts an earlier owner published interrupt_expired for
//     (a.tailExpired), so the thawed interrupt is not expired twice.
//
// A log that cannot be read, or that does not reach back, repairs nothing,
// leaves the journal unproven (the turn restarts) and prev at the stored
// position (docs/OWNERSHIP.md "Turn journal and resume", "Tail repair").
func (a *actor) readTail(th Thawed) {
	if th.FromEpoch == 0 {
		return
	}
	stored := agent.Position{Epoch: th.FromEpoch, Seq: th.Seq}
	top := stored
	after := stored
	if len(th.Inbox) > 0 {
		if p := (agent.Position{Epoch: th.Inbox[0].Epoch, Seq: th.Inbox[0].Seq - 1}); p.Less(after) {
			after = p
		}
	}
	last, lastOK := lastTurn(th.History)
	if lastOK && last.Less(after) {
		after = last
	}
	var head *InboxEntry
	if len(th.Inbox) > 0 && th.Inbox[0].Attempts > 0 {
		head = &th.Inbox[0]
	}
	ctx, cancel := context.WithTimeout(a.ctx, a.m.cfg.StoreTimeout)
	evs, complete, err := a.m.cfg.Log.Since(ctx, a.id, after, 0)
	cancel()
	if err != nil {
		a.m.tr.Emit("session.journal.unreadable", "owner", a.m.cfg.Owner, "session", a.id, "err", err.Error())
		evs, complete = nil, false
	}
	for _, ev := range evs {
		if ev.Type == agent.TypeInterruptExpired {
			var d struct {
				Interrupt string `json:"interrupt"`
			}
			if json.Unmarshal(ev.Data, &d) == nil {
				a.tailExpired = append(a.tailExpired, d.Interrupt)
			}
		}
	}
	if complete {
		logTop := after
		if len(evs) > 0 {
			logTop = evs[len(evs)-1].Pos()
		}
		// The log is the better witness of where the last epoch ended,
		// unless the store took seqs the log (even repaired) lacks.
		if t := a.repairTail(th, evs, logTop, last, lastOK); t.Seq >= th.Seq {
			top = t
		}
		a.seq = max(a.seq, top.Seq)
	}
	if th.FromEpoch < a.epoch {
		a.prev = &top
	}
	if head == nil {
		return
	}
	j := &journal{input: head.Pos()}
	j.events, j.ok = turnJournal(eventsAfter(evs, head.Pos()), complete, head.Pos())
	a.journal = j
	a.m.tr.Emit("session.journal", "owner", a.m.cfg.Owner, "session", a.id, "input_epoch", head.Epoch,
		"input_seq", head.Seq, "events", len(j.events), "ok", j.ok)
	if !j.ok {
		a.m.log.Info("unfinished turn's journal not in the replay log: the turn restarts",
			zap.String("session", a.id), zap.Stringer("input", head.Pos()), zap.Int("read", len(evs)),
			zap.Bool("complete", complete), zap.Error(err))
	}
}

// lastTurn returns the input position of the newest history message's turn
// (ok false: no history, or history carried over without positions).
func lastTurn(h []StoredMessage) (agent.Position, bool) {
	if len(h) == 0 || h[len(h)-1].Turn.Epoch == 0 {
		return agent.Position{}, false
	}
	return h[len(h)-1].Turn, true
}

// eventsAfter returns the events of evs (ordered) strictly after p.
func eventsAfter(evs []agent.Event, p agent.Position) []agent.Event {
	for i, ev := range evs {
		if p.Less(ev.Pos()) {
			return evs[i:]
		}
	}
	return nil
}

// repairTail logs what an earlier owner took a position for but never
// logged, in position order, each above logTop, the log's last event
// (docs/OWNERSHIP.md "Tail repair"):
//   - the end of the last completed turn (the input at last): the store
//     holds its completion, whose write took the seqs of its message and
//     turn_completed (or of turn_failed), but the log's events after that
//     turn's last start hold no end. The end is rebuilt from the stored
//     history: message with the stored reply, then turn_completed;
//     turn_stopped with the partial reply when the stored reply is marked
//     stopped; or turn_failed when the stored turn has no reply.
//   - the user_event of every inbox entry above logTop: its inbox write
//     landed (the input was accepted) but its owner stopped before logging
//     it.
//
// evs are the log's events read after a position at or before last and the
// inbox's oldest entry. It returns the log's top afterwards. A repair
// append that fails (the log refused it or is unreachable) ends the repair:
// what is not logged stays a hole that the next event's seq (or prev)
// shows.
func (a *actor) repairTail(th Thawed, evs []agent.Event, logTop agent.Position, last agent.Position, lastOK bool) agent.Position {
	var fix []agent.Event
	if lastOK {
		fix = a.turnEnd(th, evs, logTop, last)
	}
	for _, e := range th.Inbox {
		p := e.Pos()
		if !logTop.Less(p) || len(fix) > 0 && !fix[len(fix)-1].Pos().Less(p) {
			continue
		}
		data, err := userEventData(e.Input)
		if err != nil {
			continue
		}
		fix = append(fix, agent.Event{Session: a.id, Epoch: p.Epoch, Seq: p.Seq, Type: agent.TypeUserEvent, Data: data})
	}
	for _, ev := range fix {
		if !a.relog(ev) {
			break
		}
		logTop = ev.Pos()
	}
	return logTop
}

// turnEnd returns the end events of the turn of the input at last, at the
// positions its completion took, when the log lacks them: the log's events
// after the turn's last start hold no turn end and no other turn's start,
// the log's top is the turn's last event, and the stored seq covers the
// missing events. Otherwise nil.
func (a *actor) turnEnd(th Thawed, evs []agent.Event, logTop agent.Position, last agent.Position) []agent.Event {
	start := -1
	for i, ev := range evs {
		if d, ok := turnOf(ev); ok && d.Turn == last {
			start = i
		}
	}
	if start < 0 {
		return nil
	}
	hasMessage := false
	for _, ev := range evs[start+1:] {
		switch ev.Type {
		case agent.TypeTurnCompleted, agent.TypeTurnFailed, agent.TypeTurnStopped, agent.TypeInterrupt, agent.TypeTurnStarted, agent.TypeTurnResumed:
			return nil
		case agent.TypeMessage:
			hasMessage = true
		}
	}
	reply := th.History[len(th.History)-1]
	var types []string
	var datas []json.RawMessage
	switch {
	case reply.Role == agent.RoleInterrupt:
		types, datas = []string{agent.TypeInterrupt}, []json.RawMessage{json.RawMessage(reply.Content)}
	case reply.Role == "assistant" && reply.Stopped:
		data, _ := json.Marshal(stoppedData{Turn: last, Partial: reply.Content})
		types, datas = []string{agent.TypeTurnStopped}, []json.RawMessage{data}
	case reply.Role != "assistant":
		data, _ := json.Marshal(map[string]string{"error": "session: the turn failed; its owner stopped before logging its end"})
		types, datas = []string{agent.TypeTurnFailed}, []json.RawMessage{data}
	case hasMessage:
		types, datas = []string{agent.TypeTurnCompleted}, []json.RawMessage{emptyObject}
	default:
		data, _ := json.Marshal(reply.Message)
		types, datas = []string{agent.TypeMessage, agent.TypeTurnCompleted}, []json.RawMessage{data, emptyObject}
	}
	if logTop.Seq+int64(len(types)) > th.Seq {
		return nil
	}
	out := make([]agent.Event, len(types))
	for i := range types {
		out[i] = agent.Event{Session: a.id, Epoch: logTop.Epoch, Seq: logTop.Seq + 1 + int64(i), Type: types[i], Data: datas[i]}
	}
	return out
}

// turnOf returns the data of a turn_started or turn_resumed event.
func turnOf(ev agent.Event) (turnData, bool) {
	var d turnData
	if ev.Type != agent.TypeTurnStarted && ev.Type != agent.TypeTurnResumed || json.Unmarshal(ev.Data, &d) != nil {
		return turnData{}, false
	}
	return d, true
}

// relog appends ev, an event at a position an earlier owner took but never
// logged, and publishes it. It reports whether the append landed.
func (a *actor) relog(ev agent.Event) bool {
	if !a.leaseLive() {
		return false
	}
	ev.At = time.Now().UTC()
	ctx, cancel := context.WithTimeout(a.ctx, a.m.cfg.StoreTimeout)
	err := a.m.cfg.Log.Append(ctx, ev)
	cancel()
	if err != nil {
		a.m.tr.Emit("session.relog.failed", "owner", a.m.cfg.Owner, "session", a.id, "epoch", ev.Epoch, "seq", ev.Seq, "err", err.Error())
		a.m.log.Info("tail repair stopped: append refused", zap.String("session", a.id), zap.Stringer("pos", ev.Pos()), zap.Error(err))
		return false
	}
	a.m.stats.relogged.Add(1)
	a.m.tr.Emit("session.relog", "owner", a.m.cfg.Owner, "session", a.id, "type", ev.Type, "epoch", ev.Epoch, "seq", ev.Seq)
	ctx, cancel = context.WithTimeout(a.ctx, a.m.cfg.StoreTimeout)
	if err := a.m.cfg.Publisher.Publish(ctx, ev); err != nil {
		a.m.stats.publishErrors.Add(1)
	}
	cancel()
	return true
}

// turnJournal picks the journal of the turn of the input at head out of
// evs, the log's events after head. The journal starts at the last
// turn_started of that input (a restart begins afresh) and holds every
// later event but other inputs' user_events. ok is false when the log
// does not reach back to head (complete false), when it skips a seq inside
// an epoch, when an epoch's first event says its predecessor ended later
// than the log holds (Event.Prev), or when no turn_started of the input is
// found.
func turnJournal(evs []agent.Event, complete bool, head agent.Position) ([]agent.Event, bool) {
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
		if ev.Type != agent.TypeTurnStarted {
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
	out := make([]agent.Event, 0, len(evs)-start)
	for _, ev := range evs[start:] {
		if ev.Type != agent.TypeUserEvent {
			out = append(out, ev)
		}
	}
	return out, true
}

// missed reports whether ev, read right after an event (or cursor) at top,
// shows that events between them are missing: a seq jump inside one epoch,
// or an epoch's first event whose Prev is after top. Without Prev, a seq
// jump across epochs counts as missing too (the older rule).
func missed(top agent.Position, ev agent.Event) bool {
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
func journalText(evs []agent.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		if ev.Type != agent.TypeDelta {
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
func (a *actor) resumeFor(p pendingInput, attempt int) *agent.TurnResume {
	j := a.journal
	a.journal = nil
	if attempt <= 1 || j == nil || !j.ok || j.input != p.pos() || len(j.events) == 0 || !resumable(a.m.cfg.Agent) {
		return nil
	}
	return &agent.TurnResume{
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
