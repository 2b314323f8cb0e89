package session

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// renewer keeps one owned session's lease alive on its own timer, outside
// the actor, so a turn stuck in a slow agent never stalls it (the seed's
// "supervised heartbeat"). Every RenewEvery it runs one Claim:
//
//   - renewed at the actor's epoch: the local deadline moves to
//     claim start + Remaining - RenewMargin;
//   - *LeaseHeldError, or the claim came back under a newer epoch (the lease
//     lapsed in between): the session stands down (ErrLeaseLost);
//   - any other error: retried on the beat, but never past the deadline.
//     When the local monotonic clock reaches the deadline, the running turn
//     is cancelled and the session stands down (ErrLeaseDeadline), before
//     the lease could lapse on the store's clock.
//
// The renewer stops when its actor retires (hibernation included).
type renewer struct {
	a      *actor
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	// Owned by the run goroutine. lapse is the local estimate of the lease
	// expiry (last successful claim start + Remaining); deadline is lapse -
	// RenewMargin.
	lapse, deadline time.Time
	// until mirrors deadline (UnixNano of the Manager's clock) for the
	// actor, which publishes nothing once it has passed (live).
	until atomic.Int64
}

func newRenewer(a *actor, lapse time.Time) *renewer {
	ctx, cancel := context.WithCancel(a.ctx)
	r := &renewer{
		a:        a,
		ctx:      ctx,
		cancel:   cancel,
		done:     make(chan struct{}),
		lapse:    lapse,
		deadline: lapse.Add(-a.m.cfg.RenewMargin),
	}
	r.until.Store(r.deadline.UnixNano())
	return r
}

// live reports whether now is before the lease's local deadline. A process
// that was stopped (SIGSTOP, a long pause) past it may find its timers not
// yet fired: the actor asks before every append and publish, so a stale
// owner puts nothing more out once its lease may have lapsed. Safe from
// any goroutine.
func (r *renewer) live(now time.Time) bool { return now.UnixNano() < r.until.Load() }

// stop ends the renewer and waits for it, including a claim in flight
// (renew), so no renewal lands after stop returns. It is safe before run
// started only if run is started afterwards (run always closes done).
func (r *renewer) stop() {
	r.cancel()
	r.a.m.tr.Emit("renewer.stopping", "owner", r.a.m.cfg.Owner, "session", r.a.id)
	<-r.done
}

func (r *renewer) run() {
	a, m := r.a, r.a.m
	defer m.wg.Done()
	defer close(r.done)
	for {
		wait := m.cfg.RenewEvery
		if d := r.deadline.Sub(m.clock.Now()); d < wait {
			wait = max(d, 0)
		}
		t := m.clock.NewTimer(wait)
		m.tr.Emit("renewer.armed", "owner", m.cfg.Owner, "session", a.id, "in", wait)
		select {
		case <-r.ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		now := m.clock.Now()
		if !now.Before(r.deadline) {
			r.expire(now)
			return
		}
		if !r.renew(now) {
			return
		}
	}
}

// renew runs one claim begun at start; it reports whether to go on.
func (r *renewer) renew(start time.Time) bool {
	a, m := r.a, r.a.m
	// The claim is not cancelled by stop: a cancelled statement can still
	// be applied by the database after the client gave up on it, and so
	// extend the lease after the actor's release (hand-back, stand-down).
	// stop waits for it instead; the lease's deadline bounds it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), r.deadline.Sub(start))
	l, err := m.claim(ctx, a.id, start)
	cancel()
	if r.ctx.Err() != nil {
		return false
	}
	var held *LeaseHeldError
	switch {
	case err == nil && l.Epoch == a.epoch:
		r.lapse = start.Add(l.Remaining)
		r.deadline = r.lapse.Add(-m.cfg.RenewMargin)
		r.until.Store(r.deadline.UnixNano())
		m.tr.Emit("renewer.renewed", "owner", m.cfg.Owner, "session", a.id, "epoch", l.Epoch, "remaining", l.Remaining)
		return true
	case err == nil:
		// The lease lapsed and this claim took it afresh: others may have
		// owned it in between. Hand the new epoch straight back.
		r.lost(fmt.Errorf("%w: epoch %d was re-claimed as %d", ErrLeaseLost, a.epoch, l.Epoch))
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(r.ctx), m.cfg.StoreTimeout)
		if err := m.cfg.Leases.Release(rctx, a.id, m.cfg.Owner, l.Epoch); err != nil {
			m.log.Warn("renewer: release of re-claimed lease failed", zap.String("session", a.id), zap.Error(err))
		}
		rcancel()
		return false
	case errors.As(err, &held):
		r.lost(fmt.Errorf("%w: %w", ErrLeaseLost, err))
		return false
	}
	m.tr.Emit("renewer.failed", "owner", m.cfg.Owner, "session", a.id, "err", err.Error())
	m.log.Warn("lease renewal failed", zap.String("session", a.id), zap.Error(err))
	if now := m.clock.Now(); !now.Before(r.deadline) {
		r.expire(now)
		return false
	}
	return true
}

func (r *renewer) lost(err error) {
	m := r.a.m
	m.tr.Emit("renewer.lost", "owner", m.cfg.Owner, "session", r.a.id, "epoch", r.a.epoch, "err", err.Error())
	r.a.retire(err)
}

// expire cancels the running turn and stands the session down: renewals
// failed until the local deadline. lapse_in is how long the lease still had
// by the local estimate.
func (r *renewer) expire(now time.Time) {
	m := r.a.m
	m.tr.Emit("renewer.deadline", "owner", m.cfg.Owner, "session", r.a.id, "epoch", r.a.epoch, "lapse_in", r.lapse.Sub(now))
	r.a.retire(fmt.Errorf("%w (session %q, epoch %d)", ErrLeaseDeadline, r.a.id, r.a.epoch))
}
