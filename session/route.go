package session

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"go.opentelemetry.io/otel/attribute"
	oteltrace "go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/relaygw/relay/agent"
)

// OutcomeKind says which of the three answers an Outcome is.
type OutcomeKind uint8

// The kinds of Outcome.
const (
	// OutcomeAccepted: the input landed at Outcome.Accepted (on this node
	// or on the owner a forward reached).
	OutcomeAccepted OutcomeKind = iota + 1
	// OutcomeRefused: nothing ran; re-send after Outcome.Retry.
	// Outcome.Err says why: a *LeaseHeldError (another process's lease is
	// live and the input could not be forwarded to it), ErrDraining or
	// ErrClosed (this node or the owner is draining), ErrFenced,
	// ErrStoreUnavailable, or another error that left ownership undecided.
	OutcomeRefused
	// OutcomeFailed: Outcome.Err is the failure. ErrInvalidID,
	// ErrInvalidInput, ErrBusy and ErrIdempotencyKeyReused (here or at the
	// owner) mean nothing ran.
	// ErrOutcomeUnknown means the inbox write may have landed: the input
	// may run; a re-send with the same idempotency key is safe. ErrForwardTimeout,
	// ErrForwardFailed and a *RemoteError with another code mean the input
	// may have been accepted at the owner: a re-send with the same
	// idempotency key is safe.
	OutcomeFailed
)

func (k OutcomeKind) String() string {
	switch k {
	case OutcomeAccepted:
		return "accepted"
	case OutcomeRefused:
		return "refused"
	case OutcomeFailed:
		return "failed"
	}
	return fmt.Sprintf("OutcomeKind(%d)", uint8(k))
}

// Outcome is the one answer of Manager.Submit.
type Outcome struct {
	Kind OutcomeKind
	// Accepted is the input's position (OutcomeAccepted only).
	Accepted Accepted
	// Retry is when to re-send and for how long to keep trying
	// (OutcomeRefused only).
	Retry RetryDirective
	// Err is why the input was refused or how it failed; nil when accepted.
	Err error
	// Hops counts the forwards made (0: everything happened on this node).
	Hops int
}

// RetryDirective tells a client when to re-send a refused input (After)
// and how long it may keep trying (Budget), both measured from the refusal
// (docs/OWNERSHIP.md "Wire contracts").
type RetryDirective struct {
	After  time.Duration
	Budget time.Duration
}

// Retry delay bounds: a refusal never asks for a re-send sooner than
// minRetryDelay, and a delay derived from a holder's remaining lease adds
// retrySlack so the re-send lands after the lease has expired. Every delay
// then gets a random RetryJitter share on top, so clients refused together
// (a draining node's, a lost owner's) do not all re-send in the same
// instant.
const (
	minRetryDelay = 100 * time.Millisecond
	retrySlack    = 50 * time.Millisecond
	// RetryJitter bounds the random delay added to every retry directive:
	// After is its base delay plus a uniform draw from [0, RetryJitter).
	RetryJitter = time.Second
)

// NewRetryDirective builds the directive for a refusal. remaining is the
// holder's lease time left as the lease store reported it (zero when
// unknown or irrelevant); After is remaining plus a 50 ms slack, at least
// 100 ms, plus a uniform random jitter in [0, RetryJitter). Budget covers a
// whole lease TTL and one second more after After.
func NewRetryDirective(remaining, ttl time.Duration) RetryDirective {
	d := max(remaining+retrySlack, minRetryDelay)
	if remaining <= 0 {
		d = minRetryDelay
	}
	d += rand.N(RetryJitter)
	return RetryDirective{After: d, Budget: d + ttl + time.Second}
}

// maxRouteSteps bounds the forwards (and local re-runs after a node
// answered that this process holds the lease) one Submit makes.
const maxRouteSteps = 4

// Submit takes input in for session id on any node and answers with one
// Outcome (docs/OWNERSHIP.md "Event (write)"):
//
//  1. It refuses at once while this node drains (ErrDraining).
//  2. It runs Accept: one claim statement, and the input is accepted here
//     when this process holds or takes the lease.
//  3. When another process holds a live lease it forwards the input through
//     Config.Forwarder to the holder's node, whose HandleForward claims
//     again before accepting. A holder under this node's name is a
//     predecessor process (this one took the name): it cannot answer, so
//     the input is refused with a retry directive and nothing is sent. A
//     node answering that this process holds the lease makes Submit run
//     Accept here again; one answering that a third process holds it makes
//     Submit forward there.
//  4. An unreachable holder (ErrUnreachable: no responders, link down)
//     makes Submit re-resolve with a fresh claim: that takes the session
//     over when the lease lapsed, or names the holder to forward to. A
//     second unreachable hop is refused with a retry directive.
//
// Nothing runs here while another process's lease is live. Refusals carry
// NewRetryDirective of the holder's remaining lease time as the lease store
// reported it (zero for refusals without a holder). Without a Forwarder
// (single node) another process's live lease is refused the same way.
func (m *Manager) Submit(ctx context.Context, id string, in agent.Input) Outcome {
	return m.route(ctx, id, in, nil)
}

// route is Submit for an input (ctl nil) or a control (Control).
func (m *Manager) route(ctx context.Context, id string, in agent.Input, ctl *Control) Outcome {
	if !agent.ValidID(id) {
		return Outcome{Kind: OutcomeFailed, Err: ErrInvalidID}
	}
	if err := m.admitting(); err != nil {
		return m.refused(id, err, 0, 0)
	}
	local := func() (Accepted, error) {
		if ctl == nil {
			return m.Accept(ctx, id, in)
		}
		r, err := m.ControlLocal(ctx, id, *ctl)
		if err != nil {
			return Accepted{}, err
		}
		return Accepted{Session: id, Control: &r}, nil
	}
	acc, err := local()
	remote := false
	hops, steps, unreachable := 0, 0, 0
	for {
		var held *LeaseHeldError
		switch {
		case err == nil:
			return Outcome{Kind: OutcomeAccepted, Accepted: acc, Hops: hops}
		case !errors.As(err, &held):
			return m.settle(id, err, remote, hops)
		case m.cfg.Forwarder == nil || steps >= maxRouteSteps:
			return m.refused(id, err, held.Remaining, hops)
		case held.Holder == m.cfg.Owner:
			// A node answered that the lease moved back to this process.
			steps++
			acc, err = local()
			remote = false
			continue
		case NodeOf(held.Holder) == NodeOf(m.cfg.Owner):
			// A predecessor process under this node's name holds the lease:
			// it is gone (this process took the name), so nothing can be
			// forwarded; the client retries once the lease lapses.
			return m.refused(id, err, held.Remaining, hops)
		}
		steps++
		hops++
		acc, err = m.forward(ctx, held.Holder, ForwardRequest{Session: id, Input: in, Control: ctl})
		remote = true
		if errors.Is(err, ErrUnreachable) {
			unreachable++
			m.log.Info("owner unreachable; re-resolving with a fresh claim",
				zap.String("session", id), zap.String("owner", held.Holder), zap.Error(err))
			if unreachable >= 2 {
				return m.refused(id, held, held.Remaining, hops)
			}
			m.tr.Emit("session.route.reresolve", "owner", m.cfg.Owner, "session", id, "holder", held.Holder)
			acc, err = local()
			remote = false
		}
	}
}

// forward makes one hop to holder, bounded by ForwardTimeout.
func (m *Manager) forward(ctx context.Context, holder string, req ForwardRequest) (Accepted, error) {
	id := req.Session
	m.stats.forwards.Add(1)
	m.tr.Emit("session.forward", "owner", m.cfg.Owner, "session", id, "holder", holder)
	ctx, cancel := context.WithTimeout(ctx, m.cfg.ForwardTimeout)
	defer cancel()
	// The Forwarder carries the span's context to the owner node
	// (natsforward: W3C trace context in the request's headers).
	ctx, span := m.startSpan(ctx, spanForward, oteltrace.SpanKindClient, id)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("relay.holder", holder))
	}
	start := m.clock.Now()
	acc, err := m.cfg.Forwarder.Forward(ctx, holder, req)
	m.timing(TimingForward, m.clock.Now().Sub(start))
	if err == nil && req.Control != nil && acc.Control == nil {
		// A node that answered a control with an input's answer does not
		// know controls; nothing was applied there.
		err = fmt.Errorf("%w: the owner node answered a control without a control result", ErrForwardFailed)
	}
	endSpan(span, err)
	m.tr.Emit("session.forward.done", "owner", m.cfg.Owner, "session", id, "holder", holder, "err", errText(err), "unreachable", errors.Is(err, ErrUnreachable))
	return acc, err
}

// settle classifies an error that names no lease holder. Locally, bad input,
// a refused input, a reused idempotency key, a full mailbox and an inbox write of unknown
// outcome fail and everything else refuses (ownership could not
// be decided, nothing ran). From the owner node, its refusals (draining,
// fenced, store unavailable) refuse and everything else fails: the input
// may have been accepted there.
func (m *Manager) settle(id string, err error, remote bool, hops int) Outcome {
	refuse := !errors.Is(err, ErrInvalidID) && !errors.Is(err, agent.ErrInvalidInput) && !errors.Is(err, ErrBusy) &&
		!errors.Is(err, ErrIdempotencyKeyReused) && !errors.Is(err, ErrOutcomeUnknown) && !errors.Is(err, ErrTurnBusy) &&
		!errors.Is(err, ErrInvalidControl) && !errors.Is(err, ErrInterruptAnswered) && !errors.Is(err, ErrInterruptExpired) &&
		!errors.Is(err, ErrInterruptNotFound)
	if remote {
		var re *RemoteError
		refuse = errors.As(err, &re) && (errors.Is(err, ErrDraining) || errors.Is(err, ErrFenced) || errors.Is(err, ErrStoreUnavailable))
	}
	if refuse {
		return m.refused(id, err, 0, hops)
	}
	return Outcome{Kind: OutcomeFailed, Err: err, Hops: hops}
}

// refused builds a refusal whose retry delay follows remaining.
func (m *Manager) refused(id string, err error, remaining time.Duration, hops int) Outcome {
	var held *LeaseHeldError
	if !errors.As(err, &held) && !errors.Is(err, ErrDraining) && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrFenced) {
		m.log.Warn("event refused: ownership undecided", zap.String("session", id), zap.Error(err))
	}
	m.tr.Emit("session.route.refused", "owner", m.cfg.Owner, "session", id, "err", errText(err))
	return Outcome{Kind: OutcomeRefused, Retry: NewRetryDirective(remaining, m.cfg.LeaseTTL), Err: err, Hops: hops}
}

// errText is err's message for a trace point ("" for nil): trace points
// record plain values, and error values carry unexported fields.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
