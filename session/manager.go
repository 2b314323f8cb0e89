package session

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	oteltrace "go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/trace"
)

// Config configures a Manager. Zero durations and sizes take the
// DefaultConfig value; Owner, Leases and Store are required.
type Config struct {
	// Owner is this process's identity in the lease table: node name + "/" +
	// a per-process incarnation id, so a restarted node never silently
	// extends its dead predecessor's lease (docs/OWNERSHIP.md "Storage").
	Owner string
	// Agent runs the turns. Nil means EchoAgent{}.
	Agent agent.Agent

	Leases LeaseStore
	// Store holds the sessions' fence rows, inboxes, histories and
	// idempotency keys (docs/OWNERSHIP.md "Durable inbox and history").
	Store SessionStore
	// Log is the replay log. Nil keeps no log.
	Log ReplayLog
	// Publisher delivers events live. Nil publishes nowhere.
	Publisher Publisher
	// Forwarder carries inputs to the node of another process's live lease
	// (Submit). Nil means a single node: such inputs are refused with a
	// retry directive.
	Forwarder Forwarder

	// LeaseTTL is the lease length asked for on every claim. Default 15 s.
	LeaseTTL time.Duration
	// RenewEvery is the renewer's beat. Default 5 s. Must be shorter than
	// LeaseTTL - RenewMargin.
	RenewEvery time.Duration
	// RenewMargin is the safety margin kept before the local deadline: the
	// renewer gives up (cancels the turn, stands down) at claim start +
	// Remaining - RenewMargin. Default 2 s. Must be shorter than LeaseTTL.
	RenewMargin time.Duration
	// IdleTimeout is how long an actor lives without input or turns before
	// it releases its lease and stops. Default 60 s.
	IdleTimeout time.Duration
	// MailboxSize bounds the inputs waiting for one actor; a full mailbox
	// answers ErrBusy. Default 64.
	MailboxSize int
	// MaxPending bounds the accepted inputs waiting for their turn (queued
	// behind a running one); past it an input answers ErrBusy. Default 64.
	MaxPending int
	// MaxIdempotencyKeys bounds the keys a live session remembers (oldest
	// forgotten first; a thaw loads the newest). Default 1000.
	MaxIdempotencyKeys int
	// IdempotencyTTL is how long an accepted idempotency key is remembered,
	// measured from its acceptance on the store's clock (and on Clock while
	// the session is live). Default 24 h.
	IdempotencyTTL time.Duration
	// HistoryWindow is how many of the newest history messages an actor
	// keeps and hands its agent (Turn.History). Default 50.
	HistoryWindow int
	// StoreAttempts bounds the tries of a turn's end-of-turn store write
	// when the store fails transiently (not fenced): retried with backoff
	// from 50 ms doubling up to 1 s, for as long as the lease's local
	// deadline allows. Default 8 (about 3.5 s of waiting).
	StoreAttempts int
	// MaxTurnAttempts is how many runs a turn gets before it ends as
	// turn_failed and its input leaves the inbox. A run is counted
	// (SessionStore.StartTurn) each time an owner starts or resumes the
	// turn, so a turn whose owner dies (or drains past its window) gets
	// MaxTurnAttempts-1 more runs elsewhere. An input that kills every
	// owner that runs it (out of memory, a crashing agent) is given up
	// after that many nodes, not all of them. Default 3: one kill and one
	// drain hand-over in a rolling deploy still leave a run. An error the
	// agent returns ends the turn at once (turn_failed) whatever the count.
	MaxTurnAttempts int
	// DoubleTexting is what an input without Input.Multitask does while a
	// turn runs, in a session whose first input named no mode:
	// MultitaskEnqueue (default), MultitaskReject or MultitaskInterrupt
	// (docs/OWNERSHIP.md "Turn control").
	DoubleTexting string
	// StoreTimeout bounds every session store call, log append, publish
	// and lease release the actor makes. Default 5 s.
	StoreTimeout time.Duration
	// ForwardTimeout bounds one forward hop of Submit, and Accept of a
	// forwarded input on the receiving node (HandleForward). Default 5 s.
	ForwardTimeout time.Duration
	// ReadTimeout bounds State's store read. Default 1 s.
	ReadTimeout time.Duration
	// Clock drives the renewer's deadline and the idle timer. Default
	// SystemClock().
	Clock Clock

	Logger *zap.Logger   // default zap.NewNop()
	Tracer *trace.Tracer // nil: no trace points
	// OnTurnEnd, when set, is called on the actor's goroutine as each turn
	// ends here, with its outcome (TurnCompleted, TurnFailed, TurnStopped,
	// TurnInterrupted) and its run time on this owner: from the start of
	// this attempt to the written end. It must not block (metrics).
	OnTurnEnd func(outcome string, d time.Duration)
	// OnTiming, when set, is called with each latency named by a Timing
	// (lease claim, forward hop, end-of-turn write, time to first delta)
	// as it is measured, on the goroutine that measured it. It must not
	// block (metrics).
	OnTiming func(t Timing, d time.Duration)
	// TracerProvider makes the OpenTelemetry spans of accepts, claims,
	// forward hops and turns (docs/ARCHITECTURE.md "Tracing"). Nil: no
	// spans (a no-op provider).
	TracerProvider oteltrace.TracerProvider
}

// DefaultConfig returns the docs/OWNERSHIP.md "Defaults" (lease 15 s, heartbeat 5 s,
// idle hibernate 60 s). Owner, Agent and the stores are left for the caller.
func DefaultConfig() Config {
	return Config{
		LeaseTTL:           15 * time.Second,
		RenewEvery:         5 * time.Second,
		RenewMargin:        2 * time.Second,
		IdleTimeout:        60 * time.Second,
		MailboxSize:        64,
		MaxPending:         64,
		MaxIdempotencyKeys: 1000,
		IdempotencyTTL:     24 * time.Hour,
		HistoryWindow:      50,
		StoreAttempts:      8,
		MaxTurnAttempts:    3,
		StoreTimeout:       5 * time.Second,
		ForwardTimeout:     5 * time.Second,
		ReadTimeout:        time.Second,
	}
}

// Accepted is where an input landed: its user_event's position. Duplicate
// is true when the input's idempotency key had been accepted before; the
// position is then the original one and nothing ran.
type Accepted struct {
	Session   string `json:"session"`
	Epoch     int64  `json:"epoch"`
	Seq       int64  `json:"seq"`
	Duplicate bool   `json:"duplicate"`
	// Control is the owner's answer to a control (Manager.Control); nil
	// for an input.
	Control *ControlResult `json:"control,omitempty"`
}

// Pos returns the position of the input's user_event.
func (a Accepted) Pos() agent.Position { return agent.Position{Epoch: a.Epoch, Seq: a.Seq} }

// Manager runs the sessions this node owns: one actor goroutine and one
// renewer goroutine per live session. Safe for concurrent use.
type Manager struct {
	cfg   Config
	log   *zap.Logger
	tr    *trace.Tracer
	otr   oteltrace.Tracer
	clock Clock
	stats counters

	// mu guards the fields below. It is never held while taking an actor's
	// mu (nor the other way round), nor across a store call or a wait.
	mu          sync.Mutex
	actors      map[string]*actor
	draining    bool
	closed      bool
	drainStart  chan struct{} // closed when Drain begins
	drainCancel chan struct{} // closed when Drain's ctx ends first
	cancelOnce  sync.Once

	wg sync.WaitGroup // every actor, renewer and turn goroutine
}

// NewManager returns a Manager for cfg. It panics when a required field is
// missing or the timings cannot work (a programming error).
func NewManager(cfg Config) *Manager {
	cfg = withDefaults(cfg)
	switch {
	case cfg.Owner == "":
		panic("session: Config.Owner is required")
	case cfg.Leases == nil:
		panic("session: Config.Leases is required")
	case cfg.Store == nil:
		panic("session: Config.Store is required")
	case !ValidMultitask(cfg.DoubleTexting):
		panic("session: Config.DoubleTexting must be enqueue, reject or interrupt")
	case cfg.RenewMargin >= cfg.LeaseTTL:
		panic("session: Config.RenewMargin must be shorter than LeaseTTL")
	case cfg.RenewEvery >= cfg.LeaseTTL-cfg.RenewMargin:
		panic("session: Config.RenewEvery must be shorter than LeaseTTL - RenewMargin")
	}
	return &Manager{
		cfg:         cfg,
		log:         cfg.Logger,
		tr:          cfg.Tracer,
		otr:         newTracer(cfg.TracerProvider),
		clock:       cfg.Clock,
		actors:      make(map[string]*actor),
		drainStart:  make(chan struct{}),
		drainCancel: make(chan struct{}),
	}
}

func withDefaults(cfg Config) Config {
	def := DefaultConfig()
	setDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	setDur(&cfg.LeaseTTL, def.LeaseTTL)
	setDur(&cfg.RenewEvery, def.RenewEvery)
	setDur(&cfg.RenewMargin, def.RenewMargin)
	setDur(&cfg.IdleTimeout, def.IdleTimeout)
	setDur(&cfg.StoreTimeout, def.StoreTimeout)
	setDur(&cfg.ReadTimeout, def.ReadTimeout)
	setDur(&cfg.ForwardTimeout, def.ForwardTimeout)
	setDur(&cfg.IdempotencyTTL, def.IdempotencyTTL)
	if cfg.HistoryWindow <= 0 {
		cfg.HistoryWindow = def.HistoryWindow
	}
	if cfg.MaxTurnAttempts <= 0 {
		cfg.MaxTurnAttempts = def.MaxTurnAttempts
	}
	if cfg.StoreAttempts <= 0 {
		cfg.StoreAttempts = def.StoreAttempts
	}
	if cfg.MailboxSize <= 0 {
		cfg.MailboxSize = def.MailboxSize
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = def.MaxPending
	}
	if cfg.MaxIdempotencyKeys <= 0 {
		cfg.MaxIdempotencyKeys = def.MaxIdempotencyKeys
	}
	if cfg.DoubleTexting == "" {
		cfg.DoubleTexting = MultitaskEnqueue
	}
	if cfg.Agent == nil {
		cfg.Agent = EchoAgent{}
	}
	if cfg.Log == nil {
		cfg.Log = noLog{}
	}
	if cfg.Publisher == nil {
		cfg.Publisher = noPublisher{}
	}
	if cfg.Clock == nil {
		cfg.Clock = SystemClock()
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	return cfg
}

// maxSubmitAttempts bounds how often Accept re-claims after meeting an actor
// that retired under it (hibernated, replaced, stood down).
const maxSubmitAttempts = 3

// Accept is the local half of Submit: it claims the lease for session id
// (one Claim statement), then hands in to the session's actor, thawing it
// from the store if needed, and waits until the input is accepted: written
// to the session's inbox by one fenced store write, then recorded as a
// user_event at its (epoch, seq), appended to the replay log and published. The turn runs when the actor is free; Accept does not
// wait for it. It never forwards: HandleForward runs it for inputs other
// nodes forwarded here, and Submit routes around it.
//
// Errors: ErrInvalidID; *LeaseHeldError (another process's lease is live);
// *InputError (errors.Is ErrInvalidInput: in breaks the input contract, nothing
// ran); ErrFenced; ErrBusy; ErrDraining; ErrClosed; ErrIdempotencyKeyReused (the
// key was accepted with another body: nothing ran); ErrStoreUnavailable
// (the claim or the inbox write got no answer: nothing was logged or
// published, nothing will run); ctx's error (the input may still be
// accepted after Accept returned). Any other error means ownership could
// not be decided (an actor could not start): the input never ran.
func (m *Manager) Accept(ctx context.Context, id string, in agent.Input) (Accepted, error) {
	if !agent.ValidID(id) {
		return Accepted{}, ErrInvalidID
	}
	// Checked on the owner too: a forward may come from a node that did
	// not check, and a store write of a refused input can fail.
	if err := agent.ValidateInput(in); err != nil {
		return Accepted{}, fmt.Errorf("session: accept %q: %w", id, err)
	}
	if !ValidMultitask(in.Multitask) {
		return Accepted{}, fmt.Errorf("session: accept %q: %w", id, refuse(agent.RuleMultitask, "multitask %q is not enqueue, reject or interrupt", in.Multitask))
	}
	ctx, span := m.startSpan(ctx, spanAccept, oteltrace.SpanKindInternal, id)
	acc, err := m.claimAndSubmit(ctx, id, &submitReq{in: in, trace: span.SpanContext()})
	var held *LeaseHeldError
	spanErr := err
	switch {
	case !span.IsRecording():
	case err == nil:
		span.SetAttributes(posAttrs(acc.Pos())...)
	case errors.As(err, &held):
		// Not a failure: Submit forwards to the holder.
		span.SetAttributes(attribute.String("relay.lease.holder", held.Holder))
		spanErr = nil
	}
	endSpan(span, spanErr)
	return acc, err
}

// claimAndSubmit claims the lease for id and hands req (an input or a
// control) to the session's actor, claiming again when the actor it met
// was retiring.
func (m *Manager) claimAndSubmit(ctx context.Context, id string, req *submitReq) (Accepted, error) {
	var last error
	var claimed *Lease // the latest lease this Submit claimed
	for range maxSubmitAttempts {
		if err := m.admitting(); err != nil {
			if claimed != nil && errors.Is(err, ErrDraining) {
				m.giveBack(ctx, id, *claimed)
			}
			return Accepted{}, err
		}
		start := m.clock.Now()
		cctx, span := m.startSpan(ctx, spanClaim, oteltrace.SpanKindInternal, id)
		l, err := m.claim(cctx, id, start)
		endSpan(span, err)
		var held *LeaseHeldError
		switch {
		case errors.As(err, &held):
			return Accepted{}, err
		case err != nil:
			return Accepted{}, fmt.Errorf("session: accept %q: %w: %w", id, ErrStoreUnavailable, err)
		}
		claimed = &l
		m.tr.Emit("session.claimed", "owner", m.cfg.Owner, "session", id, "epoch", l.Epoch)
		a, err := m.actorFor(ctx, id, l, start)
		if errors.Is(err, ErrDraining) {
			m.giveBack(ctx, id, l)
			return Accepted{}, err
		}
		if errors.Is(err, errRetry) {
			last = err
			continue
		}
		if err != nil {
			return Accepted{}, err
		}
		acc, retry, err := a.submit(ctx, req)
		if retry {
			last = err
			continue
		}
		return acc, err
	}
	return Accepted{}, fmt.Errorf("session: accept %q: gave up after %d attempts: %w", id, maxSubmitAttempts, last)
}

// claim runs one lease claim statement for id, begun at start, and
// reports its duration (TimingClaim).
func (m *Manager) claim(ctx context.Context, id string, start time.Time) (Lease, error) {
	l, err := m.cfg.Leases.Claim(ctx, id, m.cfg.Owner, m.cfg.LeaseTTL)
	m.timing(TimingClaim, m.clock.Now().Sub(start))
	return l, err
}

// errRetry tells Accept to claim again: the actor it found was retiring.
var errRetry = errors.New("session: actor retiring")

func (m *Manager) admitting() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.closed:
		return ErrClosed
	case m.draining:
		return ErrDraining
	}
	return nil
}

// actorFor returns the live actor for id at lease l's epoch, starting one if
// there is none. An actor of an older epoch is retired first (its lease
// lapsed and was re-claimed), and an actor already retiring is waited for:
// both answer errRetry so the caller claims afresh.
func (m *Manager) actorFor(ctx context.Context, id string, l Lease, claimStart time.Time) (*actor, error) {
	m.mu.Lock()
	switch {
	case m.closed:
		m.mu.Unlock()
		return nil, ErrClosed
	case m.draining:
		m.mu.Unlock()
		return nil, ErrDraining
	}
	if a := m.actors[id]; a != nil {
		m.mu.Unlock()
		if a.ctx.Err() == nil && a.epoch >= l.Epoch {
			return a, nil
		}
		a.retire(errReplaced)
		select {
		case <-a.done:
		case <-ctx.Done():
			return nil, fmt.Errorf("session: submit %q: %w", id, ctx.Err())
		}
		return nil, errRetry
	}
	a := newActor(m, id, l, claimStart)
	m.actors[id] = a
	m.wg.Add(1)
	go a.run()
	m.mu.Unlock()
	return a, nil
}

// giveBack releases lease l, claimed by a Submit that met the drain before
// an actor took the lease over (the claim was in flight when Drain began).
// Drain hands back only its actors' leases, so without this the lease would
// be left to lapse and the session refused elsewhere for up to a TTL. An
// actor of l's epoch still registered claimed before its own release and
// hands it back itself, finishing its turn first; l is left to it. A
// failed release (store down, lease already gone) leaves the lease to lapse.
func (m *Manager) giveBack(ctx context.Context, id string, l Lease) {
	m.mu.Lock()
	a := m.actors[id]
	m.mu.Unlock()
	if a != nil && a.epoch == l.Epoch {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.StoreTimeout)
	defer cancel()
	if err := m.cfg.Leases.Release(rctx, id, m.cfg.Owner, l.Epoch); err != nil {
		m.log.Debug("draining: claimed lease left to lapse", zap.String("session", id), zap.Error(err))
		return
	}
	m.tr.Emit("session.drain.released", "owner", m.cfg.Owner, "session", id, "epoch", l.Epoch)
}

// Recover runs inboxes a dead owner left behind (docs/OWNERSHIP.md
// "Durable inbox and history"): for each session the store lists as
// unfinished (up to limit) that has no live actor here, it claims the
// lease. A session another process holds is left to it; one this process
// takes (the lease lapsed or was handed back) is thawed, which runs its
// inbox. It returns how many sessions it started. Errors: ErrDraining,
// ErrClosed, or the store's when it cannot list; a session that cannot be
// claimed or started is skipped (the next call tries again).
func (m *Manager) Recover(ctx context.Context, limit int) (int, error) {
	if err := m.admitting(); err != nil {
		return 0, err
	}
	ids, err := m.cfg.Store.Unfinished(ctx, limit)
	if err != nil {
		return 0, fmt.Errorf("session: recover: %w", err)
	}
	started := 0
	for _, id := range ids {
		m.mu.Lock()
		a := m.actors[id]
		m.mu.Unlock()
		if a != nil && a.ctx.Err() == nil {
			continue
		}
		start := m.clock.Now()
		l, err := m.claim(ctx, id, start)
		if err != nil {
			continue
		}
		m.tr.Emit("session.recover.claimed", "owner", m.cfg.Owner, "session", id, "epoch", l.Epoch)
		if _, err := m.actorFor(ctx, id, l, start); err != nil {
			// A drain that began after this pass did must not leave
			// behind a lease no actor holds (docs/OWNERSHIP.md "Drain").
			if errors.Is(err, ErrDraining) {
				m.giveBack(ctx, id, l)
			}
			continue
		}
		started++
		m.tr.Emit("session.recovered", "owner", m.cfg.Owner, "session", id, "epoch", l.Epoch)
	}
	return started, nil
}

// remove forgets a if it is still the registered actor of its session.
func (m *Manager) remove(a *actor) {
	m.mu.Lock()
	if m.actors[a.id] == a {
		delete(m.actors, a.id)
	}
	m.mu.Unlock()
}

// Drain hands this node's sessions back: new input is refused with
// ErrDraining, running turns finish, each actor releases its lease (expiry
// now, so the next claim elsewhere succeeds at once), then stops. A turn
// still running when ctx ends is handed over, never dropped: it is halted
// with its input left in the store's inbox and its events in the replay
// log, the lease is released, and the next owner resumes it
// (docs/OWNERSHIP.md "Turn journal and resume"). Inputs accepted but not
// yet run stay in the inbox too.
// Drain returns when every actor has stopped; the error joins the release
// failures (a hand-over is not one: it is logged, traced as
// session.drain.handover and counted in Stats.HandOvers).
func (m *Manager) Drain(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return ErrClosed
	}
	if !m.draining {
		m.draining = true
		close(m.drainStart)
	}
	actors := make([]*actor, 0, len(m.actors))
	for _, a := range m.actors {
		actors = append(actors, a)
	}
	m.mu.Unlock()
	m.tr.Emit("session.drain", "owner", m.cfg.Owner, "sessions", len(actors))

	var errs []error
	for _, a := range actors {
		select {
		case <-a.done:
		case <-ctx.Done():
			m.cancelOnce.Do(func() { close(m.drainCancel) })
			<-a.done
		}
		if a.releaseErr != nil {
			errs = append(errs, a.releaseErr)
		}
	}
	if n := m.stats.handOvers.Load(); n > 0 {
		m.tr.Emit("session.drain.handover", "owner", m.cfg.Owner, "turns", n)
		m.log.Info("drain window ended: running turns handed over to the next owner, which resumes them", zap.Uint64("turns", n))
	}
	return errors.Join(errs...)
}

// Undrain ends a finished Drain: new input is accepted again and sessions
// are claimed as before (each by a fresh lease claim, so a session another
// node took meanwhile stays there). Call it only after Drain returned; it
// returns ErrClosed after Close, and is a no-op when not draining.
func (m *Manager) Undrain() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	if !m.draining {
		return nil
	}
	m.draining = false
	m.drainStart = make(chan struct{})
	m.drainCancel = make(chan struct{})
	m.cancelOnce = sync.Once{}
	m.tr.Emit("session.undrain", "owner", m.cfg.Owner)
	return nil
}

// Close stops every actor without handing leases back (they lapse after
// their TTL, as after a crash; call Drain first for a clean hand-back), and
// waits for all goroutines. Close is idempotent.
func (m *Manager) Close() {
	m.mu.Lock()
	if !m.closed {
		m.closed = true
		for _, a := range m.actors {
			a.retire(ErrClosed)
		}
	}
	m.mu.Unlock()
	m.wg.Wait()
}

// noLog is the replay log of a Manager configured without one.
type noLog struct{}

func (noLog) Append(context.Context, agent.Event) error { return nil }
func (noLog) Since(context.Context, string, agent.Position, int) ([]agent.Event, bool, error) {
	return nil, false, nil
}
func (noLog) Top(context.Context, string) (agent.Position, bool, error) {
	return agent.Position{}, false, nil
}

// noPublisher is the publisher of a Manager configured without one.
type noPublisher struct{}

func (noPublisher) Publish(context.Context, agent.Event) error { return nil }
