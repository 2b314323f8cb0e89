package session

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	oteltrace "go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/relaygw/relay/agent"
)

// actor runs one session on this node: a goroutine (run) that owns the
// session's state and serializes everything that assigns a position, a
// mailbox of inputs, at most one turn goroutine at a time, and a renewer.
//
// Lifecycle: the actor is live until a.ctx is cancelled; the cancel cause is
// why it retires. errHibernated and errDrained retire cleanly (release the
// lease; the store already holds everything); every other cause stands the session down (the turn
// is halted, nothing more is published or written, in-memory state is
// dropped). a.done closes when the actor has fully stopped.
type actor struct {
	previous string // the lease's owner before this actor's claim (Lease.Previous)
	m        *Manager
	id       string
	epoch    int64

	ctx    context.Context
	retire context.CancelCauseFunc

	mailbox  chan *submitReq
	emits    chan *emitReq
	turnDone chan turnResult // buffered 1: a turn goroutine never blocks
	done     chan struct{}

	renewer *renewer

	// releaseErr is set before done closes when a clean retirement could not
	// hand the lease back.
	releaseErr error
	// thawFailed is set before done closes when the session could not be
	// thawed (fenced, loaded) at this epoch.
	thawFailed bool

	// Owned by the run goroutine. history is the newest HistoryWindow
	// messages (the agent's context); pending mirrors the store's inbox
	// minus the running turn's input.
	seq      int64
	history  []agent.Message
	keys     *keySet
	pending  []pendingInput
	turn     *turnRun
	draining bool
	idle     Timer
	// prev is the previous epoch's last position, carried by this epoch's
	// first event (Event.Prev) and then cleared; journal is the inbox
	// head's turn journal found at thaw, used by its first run here.
	prev    *agent.Position
	journal *journal
	// tailExpired holds the ids of the interrupts an interrupt_expired in
	// the replay log's tail names (readTail), so a thawed interrupt an
	// earlier owner expired is not expired again (thawWait).
	tailExpired []string
	// wait is the session's newest interrupt (nil: none known).
	wait *waitState
	// mode is the session's double-texting mode, set by its first input
	// ("": Config.DoubleTexting).
	mode string

	mu   sync.Mutex // guards view
	view actorView
}

// actorView is what readers (State, Sessions) see of the actor's state,
// republished by the run goroutine after every step. The slice is shared
// read-only: the run goroutine only appends beyond its length or replaces
// it. running is the running turn's input (nil when none runs).
type actorView struct {
	seq     int64
	pending []pendingInput
	running *pendingInput
	mode    string // the session's double-texting mode ("" when unset)
}

// submitReq is an input, or a control when ctl is set.
type submitReq struct {
	in    agent.Input
	ctl   *Control
	trace oteltrace.SpanContext // the accepting span (an input's turn starts under it)
	reply chan submitReply      // buffered 1
}

type submitReply struct {
	acc Accepted
	err error
}

func newActor(m *Manager, id string, l Lease, claimStart time.Time) *actor {
	ctx, cancel := context.WithCancelCause(context.Background())
	a := &actor{
		m:        m,
		id:       id,
		epoch:    l.Epoch,
		previous: l.Previous,
		ctx:      ctx,
		retire:   cancel,
		mailbox:  make(chan *submitReq, m.cfg.MailboxSize),
		emits:    make(chan *emitReq),
		turnDone: make(chan turnResult, 1),
		done:     make(chan struct{}),
	}
	a.renewer = newRenewer(a, claimStart.Add(l.Remaining))
	return a
}

// submit hands in to the actor and waits for its answer. retry is true when
// the actor retired before answering: the caller should claim again.
func (a *actor) submit(ctx context.Context, req *submitReq) (acc Accepted, retry bool, err error) {
	select {
	case <-a.done:
		return Accepted{}, a.retryable(), a.cause()
	default:
	}
	req.reply = make(chan submitReply, 1)
	select {
	case a.mailbox <- req:
	default:
		return Accepted{}, false, ErrBusy
	}
	a.m.tr.Emit("session.submit.queued", "owner", a.m.cfg.Owner, "session", a.id)
	select {
	case r := <-req.reply:
		return r.acc, false, r.err
	case <-a.done:
		select {
		case r := <-req.reply:
			return r.acc, false, r.err
		default:
			return Accepted{}, a.retryable(), a.cause()
		}
	case <-ctx.Done():
		return Accepted{}, false, fmt.Errorf("session: submit %q: waiting for the owner's answer: %w", a.id, ctx.Err())
	}
}

// cause is why the actor retired (nil while live).
func (a *actor) cause() error { return context.Cause(a.ctx) }

// retryable reports whether an Accept that met this retired actor should
// claim again: always, except when the Manager closed or the actor could not
// thaw (the store's error is the answer). Call only once done is closed.
func (a *actor) retryable() bool { return !errors.Is(a.cause(), ErrClosed) && !a.thawFailed }

// run is the actor goroutine.
func (a *actor) run() {
	defer a.m.wg.Done()
	a.m.wg.Add(1)
	go a.renewer.run()
	if err := a.thaw(); err != nil {
		a.thawFailed = true
		a.retire(err)
	}
	drainStart, drainCancel := a.m.drainStart, a.m.drainCancel
	for a.ctx.Err() == nil {
		a.schedule()
		a.publishView()
		var idleC <-chan time.Time
		if a.idle != nil {
			idleC = a.idle.C()
		}
		var cancelC <-chan struct{}
		if a.draining && a.turn != nil && a.turn.ctx.Err() == nil {
			cancelC = drainCancel
		}
		select {
		case <-a.ctx.Done():
		case req := <-a.mailbox:
			if req.ctl != nil {
				a.control(req)
			} else {
				a.accept(req)
			}
		case req := <-a.emits:
			a.handleEmit(req)
		case res := <-a.turnDone:
			a.finishTurn(res)
		case <-a.expiryC():
			a.expire()
		case <-idleC:
			a.idle = nil
			a.hibernate()
		case <-drainStart:
			drainStart = nil
			a.draining = true
		case <-cancelC:
			// Past the drain window the turn is handed over, not ended:
			// its input stays in the inbox and its events in the replay
			// log, and the next owner resumes it.
			a.m.tr.Emit("session.turn.cancel", "owner", a.m.cfg.Owner, "session", a.id, "reason", "drain")
			a.m.stats.handOvers.Add(1)
			a.retire(errDrained)
		}
	}
	a.exit()
}

// schedule starts the next turn when the actor is free, retires a draining
// actor whose turn has ended, and keeps the idle timer armed exactly while
// the actor has nothing to do.
func (a *actor) schedule() {
	a.noticeDrain()
	if a.turn == nil && len(a.pending) > 0 && !a.draining {
		a.startTurn()
	}
	if a.draining && a.turn == nil {
		a.retire(errDrained)
		return
	}
	idle := a.turn == nil && len(a.pending) == 0 && !a.draining && a.ctx.Err() == nil
	switch {
	case idle && a.idle == nil:
		a.idle = a.m.clock.NewTimer(a.m.cfg.IdleTimeout)
		a.m.tr.Emit("session.idle", "owner", a.m.cfg.Owner, "session", a.id)
	case !idle:
		a.stopIdle()
	}
}

// noticeDrain marks the actor draining once Drain has begun, without
// waiting for the run loop to pick the drain signal, so no turn starts after
// Drain returned from announcing itself.
func (a *actor) noticeDrain() {
	if a.draining {
		return
	}
	select {
	case <-a.m.drainStart:
		a.draining = true
	default:
	}
}

func (a *actor) stopIdle() {
	if a.idle != nil {
		a.idle.Stop()
		a.idle = nil
	}
}

func (a *actor) publishView() {
	v := actorView{seq: a.seq, pending: a.pending[:len(a.pending):len(a.pending)], mode: a.mode}
	if a.turn != nil {
		in := a.turn.input
		v.running = &in
	}
	a.mu.Lock()
	a.view = v
	a.mu.Unlock()
}

// view returns the actor's published view.
func (a *actor) currentView() actorView {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.view
}

// thaw fences the session at this actor's epoch and loads what the store
// holds: from here on the fence refuses every write of an older owner. The
// inbox's inputs are run in order; one whose turn was running when its
// owner stopped is resumed from its journal, or restarted
// (docs/OWNERSHIP.md "Turn journal and resume"; readTail).
func (a *actor) thaw() error {
	ctx, cancel := context.WithTimeout(a.ctx, a.m.cfg.StoreTimeout)
	th, err := a.m.cfg.Store.Thaw(ctx, a.id, a.epoch, ThawQuery{
		HistoryWindow: a.m.cfg.HistoryWindow,
		KeyTTL:        a.m.cfg.IdempotencyTTL,
		MaxKeys:       a.m.cfg.MaxIdempotencyKeys,
	})
	cancel()
	if errors.Is(err, ErrFenced) {
		a.fence("thaw", err)
		return fmt.Errorf("session: thaw %q: %w", a.id, err)
	}
	if err != nil {
		return fmt.Errorf("session: thaw %q: %w: %w", a.id, ErrStoreUnavailable, err)
	}
	a.seq = th.Seq
	if ValidMultitask(th.DoubleTexting) {
		a.mode = th.DoubleTexting
	}
	a.history = make([]agent.Message, 0, len(th.History))
	for _, m := range th.History {
		a.history = append(a.history, m.Message)
	}
	a.keys = newKeySet(a.m.cfg.MaxIdempotencyKeys, a.m.cfg.IdempotencyTTL, a.m.clock.Now(), th.Keys)
	for _, e := range th.Inbox {
		a.pending = append(a.pending, pendingInput{Input: e.Input, Epoch: e.Epoch, Seq: e.Seq, Attempts: e.Attempts})
	}
	a.readTail(th)
	a.thawWait(th.History, th.Inbox)
	a.m.stats.thaws.Add(1)
	if a.previous != "" && a.previous != a.m.cfg.Owner && a.epoch > 1 {
		// Another owner held this session before: it handed it back
		// (drain, hibernation) or its lease lapsed (crash, partition).
		a.m.stats.takeovers.Add(1)
		a.m.log.Info("session taken over", zap.String("session", a.id), zap.String("old_owner", a.previous),
			zap.String("new_owner", a.m.cfg.Owner), zap.Int64("epoch", a.epoch), zap.Int64("from_epoch", th.FromEpoch),
			zap.Int("pending", len(a.pending)))
	}
	a.m.tr.Emit("session.thaw", "owner", a.m.cfg.Owner, "session", a.id, "epoch", a.epoch,
		"seq", a.seq, "from_epoch", th.FromEpoch, "history", len(a.history), "pending", len(a.pending))
	return nil
}

// hibernate retires an idle actor cleanly.
func (a *actor) hibernate() {
	if a.turn != nil || len(a.pending) > 0 || a.draining {
		return
	}
	a.m.stats.hibernations.Add(1)
	a.m.tr.Emit("session.hibernate", "owner", a.m.cfg.Owner, "session", a.id, "epoch", a.epoch, "seq", a.seq)
	a.retire(errHibernated)
}

// exit runs once a.ctx is cancelled. A clean retirement releases the
// lease; any other stands the session down.
func (a *actor) exit() {
	cause := a.cause()
	a.stopIdle()
	a.stopExpiry()
	a.haltTurn(cause)
	a.renewer.stop()
	clean := errors.Is(cause, errHibernated) || errors.Is(cause, errDrained)
	if clean {
		a.handBack()
	} else {
		a.m.stats.standDowns.Add(1)
		a.m.tr.Emit("session.standdown", "owner", a.m.cfg.Owner, "session", a.id, "epoch", a.epoch, "reason", cause.Error())
		if !errors.Is(cause, ErrClosed) && !errors.Is(cause, errReplaced) {
			a.m.log.Warn("session stood down", zap.String("session", a.id), zap.Int64("epoch", a.epoch), zap.Error(cause))
			a.giveUpLease()
		}
	}
	a.history, a.pending, a.keys = nil, nil, nil
	a.publishView()
	a.m.remove(a)
	a.m.tr.Emit("session.exited", "owner", a.m.cfg.Owner, "session", a.id, "epoch", a.epoch)
	close(a.done)
}

// handBack releases the lease (expiry now). The store already holds the
// session: every accepted input is in the inbox and every completed turn in
// the history. The renewer has stopped, so nothing extends the lease after
// the release.
func (a *actor) handBack() {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(a.ctx), a.m.cfg.StoreTimeout)
	defer cancel()
	if err := a.m.cfg.Leases.Release(ctx, a.id, a.m.cfg.Owner, a.epoch); err != nil {
		a.releaseErr = fmt.Errorf("session: hand back %q: %w", a.id, err)
		a.m.log.Warn("session hand-back: release failed", zap.String("session", a.id), zap.Error(err))
		return
	}
	a.m.tr.Emit("session.released", "owner", a.m.cfg.Owner, "session", a.id, "epoch", a.epoch)
	if errors.Is(a.cause(), errDrained) {
		a.m.stats.handBacks.Add(1)
		a.m.log.Info("session handed back", zap.String("session", a.id), zap.String("owner", a.m.cfg.Owner), zap.Int64("epoch", a.epoch))
	}
}

// giveUpLease expires a stood-down actor's lease (only if it is still this
// owner's at this epoch), so the next claim starts epoch+1 from the store.
// Without it, a claim by this same owner would extend the live
// lease at the same epoch, and the new actor would re-use the seqs its
// predecessor had already logged beyond the stored seq: every append would
// come back fenced and the session could never run again here. The turn has
// halted and the renewer has stopped, so nothing runs or renews after this.
// A failure (store down, another owner) leaves the lease to lapse.
func (a *actor) giveUpLease() {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(a.ctx), a.m.cfg.StoreTimeout)
	defer cancel()
	if err := a.m.cfg.Leases.Release(ctx, a.id, a.m.cfg.Owner, a.epoch); err != nil {
		a.m.log.Debug("stood-down session: lease left to lapse", zap.String("session", a.id), zap.Error(err))
		return
	}
	a.m.tr.Emit("session.standdown.released", "owner", a.m.cfg.Owner, "session", a.id, "epoch", a.epoch)
}

// fence records that a write came back fenced and stands the session down.
func (a *actor) fence(op string, err error) {
	a.m.stats.fenced.Add(1)
	a.m.tr.Emit("session.fenced", "owner", a.m.cfg.Owner, "session", a.id, "epoch", a.epoch, "op", op)
	a.retire(err)
}
