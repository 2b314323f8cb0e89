package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// turnRun is the turn in flight.
type turnRun struct {
	ctx    context.Context
	cancel context.CancelFunc
	input  pendingInput
}

type turnResult struct {
	msg Message
	err error
}

type emitReq struct {
	typ   string
	data  json.RawMessage
	reply chan error // buffered 1
}

var emptyObject = json.RawMessage(`{}`)

// accept records an input as a user_event at the next position, unless its
// idempotency key was seen: then the original position comes back as a
// duplicate and nothing runs.
func (a *actor) accept(req *submitReq) {
	a.noticeDrain()
	if a.draining {
		req.reply <- submitReply{err: ErrDraining}
		return
	}
	in := req.in
	a.stopIdle()
	if in.IdempotencyKey != "" {
		if p, ok := a.keys.lookup(in.IdempotencyKey); ok {
			a.m.stats.duplicates.Add(1)
			a.m.tr.Emit("session.duplicate", "owner", a.m.cfg.Owner, "session", a.id, "key", in.IdempotencyKey)
			req.reply <- submitReply{acc: Accepted{Session: a.id, Epoch: p.Epoch, Seq: p.Seq, Duplicate: true}}
			return
		}
	}
	if len(a.pending) >= a.m.cfg.MaxPending {
		req.reply <- submitReply{err: fmt.Errorf("session: submit %q: %d inputs already queued: %w", a.id, len(a.pending), ErrBusy)}
		return
	}
	data, err := json.Marshal(struct {
		Type string          `json:"type"`
		Data json.RawMessage `json:"data"`
	}{in.Type, in.Data})
	if err != nil {
		req.reply <- submitReply{err: fmt.Errorf("session: submit %q: encode input: %w", a.id, err)}
		return
	}
	ev, err := a.emit(TypeUserEvent, data)
	if err != nil {
		req.reply <- submitReply{err: err}
		return
	}
	a.keys.add(in.IdempotencyKey, ev.Pos())
	a.pending = append(a.pending, pendingInput{Input: in, Epoch: ev.Epoch, Seq: ev.Seq})
	if a.turn != nil {
		// Queued behind a running turn: without a checkpoint now, the
		// accepted input and its key would live only in memory until the
		// turn ends, and a crash of this node would lose them. A failed
		// write answers the submit with its error (the input stays queued
		// here; a re-send with its key is a duplicate).
		if err := a.checkpoint(a.ctx, 0); err != nil {
			if errors.Is(err, ErrFenced) {
				a.fence("accept", err)
			}
			a.publishView()
			req.reply <- submitReply{err: err}
			return
		}
	}
	a.publishView()
	a.m.stats.accepted.Add(1)
	a.m.tr.Emit("session.accepted", "owner", a.m.cfg.Owner, "session", a.id, "epoch", ev.Epoch, "seq", ev.Seq)
	req.reply <- submitReply{acc: Accepted{Session: a.id, Epoch: ev.Epoch, Seq: ev.Seq}}
}

// emit gives an event the next position, appends it to the replay log and
// then publishes it. A fenced append stands the session down and publishes
// nothing; other log errors are logged and counted, and publishing goes on.
// Once the actor retires (halted turn) nothing more is published.
func (a *actor) emit(typ string, data json.RawMessage) (Event, error) {
	if a.ctx.Err() != nil {
		return Event{}, a.cause()
	}
	ev := Event{Session: a.id, Epoch: a.epoch, Seq: a.seq + 1, Type: typ, Data: data, At: time.Now().UTC()}
	ctx, cancel := context.WithTimeout(a.ctx, a.m.cfg.StoreTimeout)
	err := a.m.cfg.Log.Append(ctx, ev)
	cancel()
	switch {
	case errors.Is(err, ErrFenced):
		a.fence("append", err)
		return Event{}, fmt.Errorf("session: emit %s %q at %v: %w", typ, a.id, ev.Pos(), err)
	case err != nil && a.ctx.Err() != nil:
		return Event{}, a.cause()
	case err != nil:
		a.m.stats.logAppendErrors.Add(1)
		a.m.log.Warn("session replay log append failed", zap.String("session", a.id), zap.Stringer("pos", ev.Pos()), zap.Error(err))
	}
	a.seq = ev.Seq
	if a.ctx.Err() != nil {
		return Event{}, a.cause()
	}
	// Readers (State) see every event's effect by the time it is published.
	a.publishView()
	ctx, cancel = context.WithTimeout(a.ctx, a.m.cfg.StoreTimeout)
	if err := a.m.cfg.Publisher.Publish(ctx, ev); err != nil {
		a.m.stats.publishErrors.Add(1)
		a.m.log.Warn("session publish failed", zap.String("session", a.id), zap.Stringer("pos", ev.Pos()), zap.Error(err))
	}
	cancel()
	a.m.tr.Emit("session.emit", "owner", a.m.cfg.Owner, "session", a.id, "type", typ, "epoch", ev.Epoch, "seq", ev.Seq)
	return ev, nil
}

// startTurn takes the oldest pending input and runs its turn in a new
// goroutine. The user's message joins the history now; the agent sees the
// history before it.
func (a *actor) startTurn() {
	p := a.pending[0]
	a.pending = a.pending[1:]
	if len(a.pending) == 0 {
		a.pending = nil
	}
	before := append([]Message(nil), a.history...)
	a.history = append(a.history, Message{Role: "user", Content: inputText(p.Input)})
	if _, err := a.emit(TypeTurnStarted, emptyObject); err != nil {
		return
	}
	ctx, cancel := context.WithCancel(a.ctx)
	a.turn = &turnRun{ctx: ctx, cancel: cancel, input: p}
	a.m.tr.Emit("session.turn.start", "owner", a.m.cfg.Owner, "session", a.id, "epoch", a.epoch, "seq", a.seq)
	turn := Turn{Session: a.id, Input: p.Input, History: before}
	a.m.wg.Add(1)
	go func() {
		defer a.m.wg.Done()
		msg, err := runAgent(ctx, a.m.cfg.Agent, turn, a.emitFunc(ctx))
		a.turnDone <- turnResult{msg: msg, err: err}
	}()
}

// runAgent runs one turn, turning a panic into an error.
func runAgent(ctx context.Context, ag Agent, turn Turn, emit Emit) (msg Message, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("session: agent panicked: %v", r)
		}
	}()
	return ag.Run(ctx, turn, emit)
}

// reservedTypes are the lifecycle events only the actor emits.
var reservedTypes = map[string]bool{
	TypeUserEvent: true, TypeTurnStarted: true, TypeMessage: true, TypeTurnCompleted: true, TypeTurnFailed: true,
}

// emitFunc is the Emit handed to the agent of the turn running under tctx:
// it asks the actor goroutine to emit and waits for the outcome.
func (a *actor) emitFunc(tctx context.Context) Emit {
	return func(ctx context.Context, typ string, data any) error {
		if typ == "" {
			typ = TypeDelta
		}
		if reservedTypes[typ] {
			return fmt.Errorf("session: emit %q: type is reserved for the actor", typ)
		}
		raw, err := json.Marshal(data)
		if err != nil {
			return fmt.Errorf("session: emit %q: %w", typ, err)
		}
		req := &emitReq{typ: typ, data: raw, reply: make(chan error, 1)}
		select {
		case a.emits <- req:
		case <-tctx.Done():
			return fmt.Errorf("session: emit %q: turn stopped: %w", typ, context.Cause(tctx))
		case <-ctx.Done():
			return fmt.Errorf("session: emit %q: %w", typ, ctx.Err())
		}
		// The actor answers every request it receives before taking the next.
		return <-req.reply
	}
}

func (a *actor) handleEmit(req *emitReq) {
	if a.turn == nil || a.turn.ctx.Err() != nil {
		req.reply <- fmt.Errorf("session: emit %q: turn stopped", req.typ)
		return
	}
	_, err := a.emit(req.typ, req.data)
	req.reply <- err
}

// finishTurn ends the turn: the fenced checkpoint is written first, and only
// then are the final message and turn_completed (or turn_failed) appended
// and published. A fenced checkpoint stands the session down with nothing
// more published; so does a checkpoint that could not be written at all,
// since this node can then no longer prove it owns the session.
func (a *actor) finishTurn(res turnResult) {
	t := a.turn
	a.turn = nil
	t.cancel()
	if a.ctx.Err() != nil {
		return
	}
	failed := res.err != nil
	msg := res.msg
	msg.Role = "assistant"
	reserve := int64(2) // message + turn_completed
	if failed {
		reserve = 1 // turn_failed
	} else {
		a.history = append(a.history, msg)
	}
	a.m.tr.Emit("session.checkpoint.before", "owner", a.m.cfg.Owner, "session", a.id, "epoch", a.epoch, "seq", a.seq)
	if err := a.checkpoint(a.ctx, reserve); err != nil {
		if errors.Is(err, ErrFenced) {
			a.fence("checkpoint", err)
			return
		}
		a.m.tr.Emit("session.checkpoint.failed", "owner", a.m.cfg.Owner, "session", a.id, "err", err.Error())
		a.retire(fmt.Errorf("session: end of turn: %w", err))
		return
	}
	a.m.tr.Emit("session.checkpoint.ok", "owner", a.m.cfg.Owner, "session", a.id, "epoch", a.epoch, "seq", a.seq+reserve)
	if failed {
		a.m.stats.turnsFailed.Add(1)
		data, _ := json.Marshal(map[string]string{"error": res.err.Error()})
		a.emit(TypeTurnFailed, data)
		return
	}
	data, _ := json.Marshal(msg)
	if _, err := a.emit(TypeMessage, data); err != nil {
		return
	}
	a.m.stats.turnsCompleted.Add(1)
	a.emit(TypeTurnCompleted, emptyObject)
}

// checkpoint writes the session's state under the actor's epoch. reserve
// counts events about to be emitted: the stored seq covers them, so a new
// owner continues above them.
func (a *actor) checkpoint(ctx context.Context, reserve int64) error {
	history := a.history
	if history == nil {
		history = []Message{}
	}
	data, err := json.Marshal(snapshot{
		Version: snapshotVersion,
		Seq:     a.seq + reserve,
		History: history,
		Keys:    a.keys.entries(),
		Pending: a.pending,
	})
	if err != nil {
		return fmt.Errorf("session: checkpoint %q: %w", a.id, err)
	}
	ctx, cancel := context.WithTimeout(ctx, a.m.cfg.StoreTimeout)
	defer cancel()
	if err := a.m.cfg.Checkpoints.Save(ctx, a.id, a.epoch, data); err != nil {
		return fmt.Errorf("session: checkpoint %q epoch %d: %w", a.id, a.epoch, err)
	}
	return nil
}

// haltTurn cancels the running turn (if any) and waits for its goroutine,
// refusing its emits with cause meanwhile.
func (a *actor) haltTurn(cause error) {
	if a.turn == nil {
		return
	}
	a.turn.cancel()
	for {
		select {
		case req := <-a.emits:
			req.reply <- fmt.Errorf("session: emit %q: %w", req.typ, cause)
		case <-a.turnDone:
			a.turn = nil
			return
		}
	}
}
