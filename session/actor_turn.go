package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	oteltrace "go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/relaygw/relay/agent"
)

// turnRun is the turn in flight.
type turnRun struct {
	started time.Time // when this attempt started here (Config.OnTurnEnd)
	ctx     context.Context
	cancel  context.CancelFunc
	stop    context.CancelCauseFunc // cancels ctx with a cause (ErrTurnStopped)
	input   pendingInput
	// stopped is set when the turn is being stopped (stopTurn); waiters
	// are the stop controls to answer once its end is written; partial is
	// the reply streamed so far (the resumed text, then every delta's
	// data.text).
	stopped bool
	waiters []chan submitReply
	partial strings.Builder
	// interrupt is the question the agent ended the turn with (emitted
	// TypeInterrupt), published with the turn's end.
	interrupt *agent.Interrupt
	// span is the turn's span (a no-op one before the run starts);
	// delta is set once its first delta was published.
	span  oteltrace.Span
	delta bool
}

// newTurnRun starts the context of a turn of p under parent.
func newTurnRun(parent context.Context, p pendingInput) *turnRun {
	ctx, stop := context.WithCancelCause(parent)
	return &turnRun{ctx: ctx, cancel: func() { stop(context.Canceled) }, stop: stop, input: p, span: oteltrace.SpanFromContext(ctx)}
}

type turnResult struct {
	msg agent.Message
	err error
}

type emitReq struct {
	typ   string
	data  json.RawMessage
	reply chan error // buffered 1
}

var emptyObject = json.RawMessage(`{}`)

// accept takes an input in (docs/OWNERSHIP.md "Durable inbox and
// history"). A known idempotency key answers the original position as a
// duplicate when the body is the same (InputHash), and
// ErrIdempotencyKeyReused when it is not. Otherwise the input is written to
// the store's inbox at the next (epoch, seq), with its key, by one fenced
// write; only once that landed is the user_event appended to the replay
// log and published, and the input accepted. A failed write leaves nothing
// behind: no event, no seq used, nothing that will run; the answer wraps
// ErrStoreUnavailable (or ErrFenced, which also stands the session down).
// A write whose outcome is unknown (ErrOutcomeUnknown) is repeated, since
// it is idempotent, until one lands; if none does, the input may still run
// (a later owner thaws it), so the answer wraps ErrOutcomeUnknown, never
// "nothing ran", and the session stands down so that owner settles it.
func (a *actor) accept(req *submitReq) {
	a.noticeDrain()
	if a.draining {
		req.reply <- submitReply{err: ErrDraining}
		return
	}
	in := req.in
	a.stopIdle()
	hash := InputHash(in)
	if in.IdempotencyKey != "" {
		e, ok, err := a.lookupKey(in.IdempotencyKey)
		if err != nil {
			req.reply <- submitReply{err: fmt.Errorf("session: submit %q: idempotency key: %w: %w", a.id, ErrStoreUnavailable, err)}
			return
		}
		if ok {
			if e.Hash != ([32]byte{}) && e.Hash != hash {
				a.m.tr.Emit("session.key_reused", "owner", a.m.cfg.Owner, "session", a.id, "key", in.IdempotencyKey)
				req.reply <- submitReply{err: fmt.Errorf("session: submit %q: key %q accepted at %v: %w", a.id, in.IdempotencyKey, e.Pos, ErrIdempotencyKeyReused)}
				return
			}
			a.m.stats.duplicates.Add(1)
			a.m.tr.Emit("session.duplicate", "owner", a.m.cfg.Owner, "session", a.id, "key", in.IdempotencyKey)
			req.reply <- submitReply{acc: Accepted{Session: a.id, Epoch: e.Pos.Epoch, Seq: e.Pos.Seq, Duplicate: true}}
			return
		}
	}
	if in.Type == agent.TypeResume {
		if err := a.checkAnswer(in); err != nil {
			a.m.tr.Emit("session.answer.refused", "owner", a.m.cfg.Owner, "session", a.id, "err", err.Error())
			req.reply <- submitReply{err: fmt.Errorf("session: submit %q: %w", a.id, err)}
			return
		}
	}
	// Double texting (docs/OWNERSHIP.md "Turn control"): the mode is
	// applied here and not stored with the input. The session's first
	// input, which no turn can be running for, sets the session's mode
	// instead, stored with its inbox write.
	mode := in.Multitask
	if mode == "" {
		mode = a.mode
	}
	if mode == "" {
		mode = a.m.cfg.DoubleTexting
	}
	setMode := ""
	if a.seq == 0 && a.mode == "" {
		setMode = in.Multitask
	}
	in.Multitask = ""
	running := a.turn != nil && !a.turn.stopped && a.turn.ctx.Err() == nil
	if running && mode == MultitaskReject {
		a.m.tr.Emit("session.turn.busy", "owner", a.m.cfg.Owner, "session", a.id, "turn", a.turn.input.pos().String())
		req.reply <- submitReply{err: fmt.Errorf("session: submit %q: %w", a.id, &TurnBusyError{Turn: a.turn.input.pos()})}
		return
	}
	if len(a.pending) >= a.m.cfg.MaxPending {
		req.reply <- submitReply{err: fmt.Errorf("session: submit %q: %d inputs already queued: %w", a.id, len(a.pending), ErrBusy)}
		return
	}
	data, err := userEventData(in)
	if err != nil {
		req.reply <- submitReply{err: fmt.Errorf("session: submit %q: encode input: %w", a.id, err)}
		return
	}
	p := pendingInput{Input: in, Epoch: a.epoch, Seq: a.seq + 1, trace: req.trace}
	a.m.tr.Emit("session.inbox.write", "owner", a.m.cfg.Owner, "session", a.id, "epoch", p.Epoch, "seq", p.Seq)
	err = a.writeInbox(InboxEntry{Epoch: p.Epoch, Seq: p.Seq, Input: in, BodyHash: hash, DoubleTexting: setMode})
	switch {
	case errors.Is(err, ErrOutcomeUnknown):
		a.m.stats.inboxErrors.Add(1)
		a.m.tr.Emit("session.inbox.unknown", "owner", a.m.cfg.Owner, "session", a.id, "err", err.Error())
		a.retire(fmt.Errorf("session: inbox write at %v: %w", p.pos(), err))
		req.reply <- submitReply{err: fmt.Errorf("session: submit %q: inbox write: %w", a.id, err)}
		return
	case errors.Is(err, ErrFenced):
		a.fence("accept", err)
		req.reply <- submitReply{err: err}
		return
	case err != nil:
		a.m.stats.inboxErrors.Add(1)
		a.m.tr.Emit("session.inbox.failed", "owner", a.m.cfg.Owner, "session", a.id, "err", err.Error())
		req.reply <- submitReply{err: fmt.Errorf("session: submit %q: inbox write: %w: %w", a.id, ErrStoreUnavailable, err)}
		return
	}
	a.keys.add(keyEntry{Key: in.IdempotencyKey, Pos: p.pos(), Hash: hash, Expires: a.m.clock.Now().Add(a.m.cfg.IdempotencyTTL)})
	if setMode != "" {
		a.mode = setMode
		a.m.tr.Emit("session.double_texting.set", "owner", a.m.cfg.Owner, "session", a.id, "mode", setMode)
	}
	a.pending = append(a.pending, p)
	// The input is durable from here: whatever happens to this actor, it
	// runs (here, or on the owner that thaws the inbox next), so the answer
	// is 202 even if the user_event cannot be logged or published.
	if _, err := a.emit(agent.TypeUserEvent, data); err != nil {
		a.m.log.Warn("accepted input's user_event not emitted", zap.String("session", a.id), zap.Stringer("pos", p.pos()), zap.Error(err))
	}
	a.noteAccepted(in)
	if running && mode == MultitaskInterrupt {
		// The new input runs next, with the stopped turn's partial reply
		// in its history.
		a.stopTurn("interrupt")
	}
	a.publishView()
	a.m.stats.accepted.Add(1)
	a.m.tr.Emit("session.accepted", "owner", a.m.cfg.Owner, "session", a.id, "epoch", p.Epoch, "seq", p.Seq)
	req.reply <- submitReply{acc: Accepted{Session: a.id, Epoch: p.Epoch, Seq: p.Seq}}
}

// lookupKey finds an idempotency key among the session's remembered keys:
// in memory, or, once the in-memory set may have forgotten live keys, in
// the store (one read bounded by StoreTimeout), so a key is remembered for
// IdempotencyTTL however many keys came after it. An error means the store
// could not tell.
func (a *actor) lookupKey(key string) (keyEntry, bool, error) {
	now := a.m.clock.Now()
	if e, ok := a.keys.lookup(key, now); ok || !a.keys.spilled {
		return e, ok, nil
	}
	ctx, cancel := context.WithTimeout(a.ctx, a.m.cfg.StoreTimeout)
	rec, ok, err := a.m.cfg.Store.LookupKey(ctx, a.id, key, a.m.cfg.IdempotencyTTL)
	cancel()
	a.m.tr.Emit("session.key.lookup", "owner", a.m.cfg.Owner, "session", a.id, "found", ok, "err", errText(err))
	if err != nil || !ok {
		return keyEntry{}, false, err
	}
	return keyEntry{Key: key, Pos: agent.Position{Epoch: rec.Epoch, Seq: rec.Seq}, Hash: rec.BodyHash, Expires: now.Add(a.m.cfg.IdempotencyTTL - rec.Age)}, true, nil
}

// userEventData is the data of in's user_event: {"type","data"}.
func userEventData(in agent.Input) (json.RawMessage, error) {
	return json.Marshal(struct {
		Type string          `json:"type"`
		Data json.RawMessage `json:"data"`
	}{in.Type, in.Data})
}

// inboxAttempts bounds the tries of an inbox write whose outcome stays
// unknown.
const inboxAttempts = 3

// writeInbox writes e to the inbox (one fenced store write, bounded by
// StoreTimeout). A write whose outcome is unknown is repeated (it is
// idempotent) up to inboxAttempts times in all, with a short backoff; the
// error then still wraps ErrOutcomeUnknown unless a repetition landed.
func (a *actor) writeInbox(e InboxEntry) error {
	wait := storeRetryFirst
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(a.ctx, a.m.cfg.StoreTimeout)
		err := a.m.cfg.Store.Accept(ctx, a.id, a.epoch, e, a.m.cfg.IdempotencyTTL)
		cancel()
		switch {
		case err == nil:
			return nil
		case attempt > 1:
			// An earlier try may have landed: whatever this one says,
			// the outcome stays unknown.
			if !errors.Is(err, ErrOutcomeUnknown) {
				err = fmt.Errorf("%w (after: %w)", ErrOutcomeUnknown, err)
			}
		case !errors.Is(err, ErrOutcomeUnknown):
			return err
		}
		if attempt >= inboxAttempts || a.ctx.Err() != nil {
			return err
		}
		a.m.tr.Emit("session.inbox.retry", "owner", a.m.cfg.Owner, "session", a.id, "attempt", attempt)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-a.ctx.Done():
			t.Stop()
			return err
		}
		wait = min(2*wait, storeRetryMax)
	}
}

// leaseLive reports whether the lease's local deadline has not passed; when
// it has, the actor retires (ErrLeaseDeadline) and it reports false. The
// renewer retires the actor at that deadline too, but a process stopped
// past it can run an emit before the renewer's timer fires.
func (a *actor) leaseLive() bool {
	now := a.m.clock.Now()
	if a.renewer.live(now) {
		return true
	}
	a.m.tr.Emit("session.lease.past_deadline", "owner", a.m.cfg.Owner, "session", a.id, "epoch", a.epoch)
	a.retire(fmt.Errorf("%w (session %q, epoch %d): nothing more is published", ErrLeaseDeadline, a.id, a.epoch))
	return false
}

// emit gives an event the next position, appends it to the replay log and
// then publishes it. A fenced append stands the session down and publishes
// nothing; other log errors are logged and counted, and publishing goes on.
// Past the lease's local deadline nothing is appended or published
// (leaseLive).
// Once the actor retires (halted turn) nothing more is published.
func (a *actor) emit(typ string, data json.RawMessage) (agent.Event, error) {
	if a.ctx.Err() != nil || !a.leaseLive() {
		return agent.Event{}, a.cause()
	}
	ev := agent.Event{Session: a.id, Epoch: a.epoch, Seq: a.seq + 1, Type: typ, Data: data, At: time.Now().UTC(), Prev: a.prev}
	ctx, cancel := context.WithTimeout(a.ctx, a.m.cfg.StoreTimeout)
	err := a.m.cfg.Log.Append(ctx, ev)
	cancel()
	switch {
	case errors.Is(err, ErrFenced):
		a.fence("append", err)
		return agent.Event{}, fmt.Errorf("session: emit %s %q at %v: %w", typ, a.id, ev.Pos(), err)
	case err != nil && a.ctx.Err() != nil:
		return agent.Event{}, a.cause()
	case err != nil:
		a.m.stats.logAppendErrors.Add(1)
		a.m.log.Warn("session replay log append failed", zap.String("session", a.id), zap.Stringer("pos", ev.Pos()), zap.Error(err))
	}
	a.seq, a.prev = ev.Seq, nil
	if a.ctx.Err() != nil || !a.leaseLive() {
		return agent.Event{}, a.cause()
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
// goroutine. The agent sees the history window before it; the input stays
// in the store's inbox until its turn's end is written.
//
// The run is the input's attempt Attempts+1, recorded first
// (startAttempt), so an owner that dies mid-turn leaves a count behind.
// Past MaxTurnAttempts the turn ends at once as turn_failed. A turn an
// earlier owner left unfinished is resumed when resumeFor can (the event is
// turn_resumed, and the agent gets Turn.Resume), else restarted (a new
// turn_started with the attempt number); docs/OWNERSHIP.md "Turn journal
// and resume".
func (a *actor) startTurn() {
	p := a.pending[0]
	a.pending = a.pending[1:]
	if len(a.pending) == 0 {
		a.pending = nil
	}
	attempt := p.Attempts + 1
	run := newTurnRun(a.ctx, p)
	if attempt > a.m.cfg.MaxTurnAttempts {
		a.journal = nil
		a.m.stats.turnsGivenUp.Add(1)
		a.m.tr.Emit("session.turn.giveup", "owner", a.m.cfg.Owner, "session", a.id, "input_epoch", p.Epoch,
			"input_seq", p.Seq, "attempts", p.Attempts)
		a.turn = run
		a.finishTurn(turnResult{err: fmt.Errorf("session: turn at %v gave up after %d attempts", p.pos(), p.Attempts)})
		return
	}
	resume := a.resumeFor(p, attempt)
	if err := a.startAttempt(p, attempt); err != nil {
		run.cancel()
		return
	}
	before := append([]agent.Message(nil), a.history...)
	typ, d := agent.TypeTurnStarted, turnData{Turn: p.pos(), Attempt: attempt}
	if resume != nil {
		typ, d.From = agent.TypeTurnResumed, &resume.From
	}
	data, _ := json.Marshal(d)
	if _, err := a.emit(typ, data); err != nil {
		run.cancel()
		return
	}
	switch {
	case resume != nil:
		a.m.stats.turnsResumed.Add(1)
	case attempt > 1:
		a.m.stats.turnsRestarted.Add(1)
	}
	if resume != nil {
		run.partial.WriteString(resume.Text)
	}
	run.started = a.m.clock.Now()
	run.ctx, run.span = a.m.startSpan(turnContext(run.ctx, p), spanTurn, oteltrace.SpanKindInternal, a.id)
	if run.span.IsRecording() {
		run.span.SetAttributes(attribute.Int64("relay.input.epoch", p.Epoch), attribute.Int64("relay.input.seq", p.Seq),
			attribute.Int("relay.turn.attempt", attempt), attribute.Bool("relay.turn.resumed", resume != nil))
	}
	a.turn = run
	ctx := run.ctx
	a.m.tr.Emit("session.turn.start", "owner", a.m.cfg.Owner, "session", a.id, "epoch", a.epoch, "seq", a.seq,
		"input_epoch", p.Epoch, "input_seq", p.Seq, "attempt", attempt, "resumed", resume != nil)
	turn := agent.Turn{Session: a.id, ID: p.pos(), Attempt: attempt, Input: p.Input, History: before, Resume: resume, Answer: a.answerFor(p)}
	a.m.wg.Add(1)
	go func() {
		defer a.m.wg.Done()
		msg, err := runAgent(ctx, a.m.cfg.Agent, turn, a.emitFunc(ctx))
		a.turnDone <- turnResult{msg: msg, err: err}
	}()
}

// runAgent runs one turn, turning a panic into an error.
func runAgent(ctx context.Context, ag agent.Agent, turn agent.Turn, emit agent.Emit) (msg agent.Message, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("session: agent panicked: %v", r)
		}
	}()
	return ag.Run(ctx, turn, emit)
}

// reservedTypes are the lifecycle events only the actor emits.
var reservedTypes = map[string]bool{
	agent.TypeUserEvent: true, agent.TypeTurnStarted: true, agent.TypeTurnResumed: true, agent.TypeMessage: true, agent.TypeTurnCompleted: true, agent.TypeTurnFailed: true,
	agent.TypeTurnStopped: true, agent.TypeInterruptExpired: true,
}

// emitFunc is the Emit handed to the agent of the turn running under tctx:
// it asks the actor goroutine to emit and waits for the outcome.
func (a *actor) emitFunc(tctx context.Context) agent.Emit {
	return func(ctx context.Context, typ string, data any) error {
		if typ == "" {
			typ = agent.TypeDelta
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
	if a.turn.interrupt != nil {
		req.reply <- fmt.Errorf("session: emit %q: the turn ended with interrupt %q", req.typ, a.turn.interrupt.ID)
		return
	}
	if req.typ == agent.TypeInterrupt {
		// Held until the turn's end is written, then published as its
		// last event (docs/OWNERSHIP.md "Interrupts").
		iv, err := parseInterrupt(req.data)
		if err == nil {
			iv.Turn = a.turn.input.pos()
			a.turn.interrupt = &iv
		}
		req.reply <- err
		return
	}
	if req.typ == agent.TypeDelta && !a.turn.delta {
		req.reply <- a.emitFirstDelta(req)
		return
	}
	_, err := a.emit(req.typ, req.data)
	if err == nil {
		a.turn.addPartial(req.typ, req.data)
	}
	req.reply <- err
}

// emitFirstDelta emits the turn's first delta under its own span and
// reports the time since the turn's start (TimingFirstDelta).
func (a *actor) emitFirstDelta(req *emitReq) error {
	t := a.turn
	_, span := a.m.startSpan(t.ctx, spanFirstDelta, oteltrace.SpanKindInternal, a.id)
	ev, err := a.emit(req.typ, req.data)
	if err == nil {
		t.delta = true
		t.addPartial(req.typ, req.data)
		if span.IsRecording() {
			span.SetAttributes(posAttrs(ev.Pos())...)
		}
		a.m.timing(TimingFirstDelta, a.m.clock.Now().Sub(t.started))
	}
	endSpan(span, err)
	return err
}

// finishTurn ends the turn: its end is written to the store first (the
// user message and the answer appended to the history, the input removed
// from the inbox, the seq covering the events about to go out), and only
// then are the final message and turn_completed (or turn_failed) appended
// and published. A fenced write stands the session down with nothing more
// published; so does a write that failed StoreAttempts times, since this
// node can then no longer prove it owns the session.
//
// A stopped turn (stopTurn) whose agent did not complete ends as
// turn_stopped: the history gets the user message and the partial reply
// marked stopped, and the stops waiting for it are answered once that is
// written (or with the error that kept it from being written: the next
// owner then resumes the turn, and a stop re-sent there stops it).
func (a *actor) finishTurn(res turnResult) {
	t := a.turn
	a.turn = nil
	t.cancel()
	defer func() { endSpan(t.span, res.err) }()
	if a.ctx.Err() != nil {
		t.answerStops(false, a.cause())
		return
	}
	stopped := t.stopped && res.err != nil
	failed := res.err != nil && !stopped
	asked := !stopped && !failed && t.interrupt != nil
	var askedData []byte
	if asked {
		askedData, _ = json.Marshal(t.interrupt)
	}
	msg := res.msg
	msg.Role = "assistant"
	msgs := []agent.Message{{Role: "user", Content: agent.InputText(t.input.Input)}}
	reserve := int64(2) // message + turn_completed
	switch {
	case stopped:
		reserve = 1 // turn_stopped
		msgs = append(msgs, agent.Message{Role: "assistant", Content: t.partial.String(), Stopped: true})
	case failed:
		reserve = 1 // turn_failed
	case asked:
		reserve = 1 // interrupt
		msgs = append(msgs, agent.Message{Role: agent.RoleInterrupt, Content: string(askedData)})
	default:
		msgs = append(msgs, msg)
	}
	// The trace points of the turn-end write keep the name "checkpoint".
	a.m.tr.Emit("session.checkpoint.before", "owner", a.m.cfg.Owner, "session", a.id, "epoch", a.epoch, "seq", a.seq)
	rec := TurnRecord{Input: t.input.pos(), Messages: msgs, Seq: a.seq + reserve}
	_, cspan := a.m.startSpan(t.ctx, spanCheckpoint, oteltrace.SpanKindInternal, a.id)
	cstart := a.m.clock.Now()
	err := a.completeTurn(rec)
	a.m.timing(TimingCheckpoint, a.m.clock.Now().Sub(cstart))
	endSpan(cspan, err)
	if err != nil {
		if errors.Is(err, ErrFenced) {
			a.fence("checkpoint", err)
			t.answerStops(false, err)
			return
		}
		a.m.tr.Emit("session.checkpoint.failed", "owner", a.m.cfg.Owner, "session", a.id, "err", err.Error())
		err = fmt.Errorf("session: end of turn: %w: %w", ErrStoreUnavailable, err)
		a.retire(err)
		t.answerStops(false, err)
		return
	}
	a.history = append(a.history, msgs...)
	if n := len(a.history) - a.m.cfg.HistoryWindow; n > 0 {
		a.history = append([]agent.Message(nil), a.history[n:]...)
	}
	a.m.tr.Emit("session.checkpoint.ok", "owner", a.m.cfg.Owner, "session", a.id, "epoch", a.epoch, "seq", a.seq+reserve)
	if stopped {
		a.m.stats.turnsStopped.Add(1)
		a.turnEnded(t, TurnStopped)
		data, _ := json.Marshal(stoppedData{Turn: t.input.pos(), Partial: t.partial.String()})
		a.emit(agent.TypeTurnStopped, data)
		t.answerStops(true, nil)
		return
	}
	// A stop that came after the agent had returned its reply changed
	// nothing: the turn completes.
	t.answerStops(false, nil)
	if asked {
		a.raise(*t.interrupt)
		a.m.stats.interrupts.Add(1)
		a.turnEnded(t, TurnInterrupted)
		a.m.tr.Emit("session.interrupt", "owner", a.m.cfg.Owner, "session", a.id, "interrupt", t.interrupt.ID)
		a.emit(agent.TypeInterrupt, askedData)
		return
	}
	if failed {
		a.m.stats.turnsFailed.Add(1)
		// The agent's error reaches clients in turn_failed; operators see it here.
		a.m.log.Warn("turn failed", zap.String("session", a.id), zap.Stringer("turn", t.input.pos()), zap.Error(res.err))
		a.turnEnded(t, TurnFailed)
		data, _ := json.Marshal(map[string]string{"error": res.err.Error()})
		a.emit(agent.TypeTurnFailed, data)
		return
	}
	data, _ := json.Marshal(msg)
	if _, err := a.emit(agent.TypeMessage, data); err != nil {
		return
	}
	a.m.stats.turnsCompleted.Add(1)
	a.turnEnded(t, TurnCompleted)
	a.emit(agent.TypeTurnCompleted, emptyObject)
}

// Turn outcomes passed to Config.OnTurnEnd.
const (
	TurnCompleted   = "completed"
	TurnFailed      = "failed"
	TurnStopped     = "stopped"
	TurnInterrupted = "interrupted"
)

// turnEnded reports t's end to Config.OnTurnEnd. A turn that never started
// here (given up before its first run) reports no duration.
func (a *actor) turnEnded(t *turnRun, outcome string) {
	if a.m.cfg.OnTurnEnd == nil || t.started.IsZero() {
		return
	}
	a.m.cfg.OnTurnEnd(outcome, a.m.clock.Now().Sub(t.started))
}

// Backoff between end-of-turn store attempts: from storeRetryFirst,
// doubling, at most storeRetryMax.
const (
	storeRetryFirst = 50 * time.Millisecond
	storeRetryMax   = time.Second
)

// completeTurn writes a turn's end (one fenced store write), retrying a
// transient failure up to StoreAttempts times with backoff. It gives up at
// once when fenced or when the actor retires (the renewer retires it at the
// lease's local deadline, so no attempt outlives the lease).
func (a *actor) completeTurn(rec TurnRecord) error {
	wait := storeRetryFirst
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(a.ctx, a.m.cfg.StoreTimeout)
		err := a.m.cfg.Store.CompleteTurn(ctx, a.id, a.epoch, rec)
		cancel()
		if err == nil || errors.Is(err, ErrFenced) || a.ctx.Err() != nil || attempt >= a.m.cfg.StoreAttempts {
			if err != nil {
				err = fmt.Errorf("session: end of turn %q epoch %d (attempt %d): %w", a.id, a.epoch, attempt, err)
			}
			return err
		}
		a.m.stats.storeRetries.Add(1)
		a.m.tr.Emit("session.checkpoint.retry", "owner", a.m.cfg.Owner, "session", a.id, "attempt", attempt, "err", err.Error())
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-a.ctx.Done():
			t.Stop()
			return fmt.Errorf("session: end of turn %q epoch %d: %w (after: %w)", a.id, a.epoch, a.cause(), err)
		}
		wait = min(2*wait, storeRetryMax)
	}
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
			a.turn.answerStops(false, cause)
			endSpan(a.turn.span, cause)
			a.turn = nil
			return
		}
	}
}
