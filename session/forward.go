package session

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/relaygw/relay/agent"
)

// Forwarding carries an input from a node that does not hold a session's
// lease to the node that does (docs/OWNERSHIP.md "Event (write)"). The
// sending side is a Forwarder; the receiving side hands the request to its
// Manager's HandleForward, which runs the local Accept (so the owner
// re-checks its lease) and never forwards further: the hop limit belongs to
// the node that took the input in.

// Forwarder carries one forwarded input to the node of a lease holder and
// returns that node's answer. Implementations: session/natsforward (NATS
// request/reply) and session/memforward (in-process, with fault injection).
//
// Forward sends req to the node of holder (an owner identity
// "<node>/<incarnation>"; see NodeOf) and waits until ctx ends. It returns
// the owner's Accepted, or an error that is one of:
//   - wrapping ErrUnreachable: nothing reached the holder's node (no
//     responders, link down, connection closed); nothing ran there;
//   - wrapping ErrForwardTimeout: ctx's deadline passed without an answer;
//     the input may have been, or may yet be, accepted there;
//   - a *RemoteError: the node answered with an error code (a
//     *LeaseHeldError inside it when that node does not hold the lease);
//   - wrapping ErrForwardFailed: the request may have reached the node but
//     no usable answer came back (transport error, malformed reply);
//   - ctx's error when ctx was cancelled (not a deadline).
type Forwarder interface {
	Forward(ctx context.Context, holder string, req ForwardRequest) (Accepted, error)
}

// ForwardHandler runs forwarded requests on the receiving node. *Manager
// is the implementation; transports decode the wire message and call it.
type ForwardHandler interface {
	HandleForward(ctx context.Context, req ForwardRequest) ForwardReply
}

// ForwardRequest is the message of one forward hop:
//
//	{"session":id, "input":{"type":…, "data":{…}, "idempotency_key":…, "multitask":…}}
//	{"session":id, "control":{"op":"stop","turn":{"epoch":E,"seq":S}}}
//
// A request with Control is a control (Manager.Control), answered by
// ControlLocal with the result in the reply's accepted.control; Input is
// then empty. Transports send controls where a node of an older version
// does not listen (natsforward: the "ctl" subject), so such a node can
// never take a control for an (empty) input: the sender finds no
// responders and re-resolves, then refuses with a retry directive
// (docs/OWNERSHIP.md "Turn control").
type ForwardRequest struct {
	Session string      `json:"session"`
	Input   agent.Input `json:"input"`
	Control *Control    `json:"control,omitempty"`
}

// ForwardReply is the receiving node's answer: exactly one of Accepted (the
// input's position, possibly a duplicate) and Error.
//
//	{"accepted":{"session","epoch","seq","duplicate"}} | {"error":{"code","message","held"}}
type ForwardReply struct {
	Accepted *Accepted    `json:"accepted,omitempty"`
	Error    *RemoteError `json:"error,omitempty"`
}

// Result turns a decoded reply into Forward's return values. A reply with
// neither field is malformed (ErrForwardFailed).
func (r ForwardReply) Result() (Accepted, error) {
	switch {
	case r.Error != nil:
		return Accepted{}, r.Error
	case r.Accepted != nil:
		return *r.Accepted, nil
	}
	return Accepted{}, fmt.Errorf("%w: empty reply", ErrForwardFailed)
}

// Errors of a forward hop (see Forwarder).
var (
	// ErrUnreachable means the holder's node could not be reached at all:
	// nothing ran there. Submit re-resolves the owner with a fresh claim.
	ErrUnreachable = errors.New("session: owner node unreachable")
	// ErrForwardTimeout means the owner node did not answer in time. The
	// input may have been accepted there; a re-send with the same
	// idempotency key is safe.
	ErrForwardTimeout = errors.New("session: owner node did not answer in time")
	// ErrForwardFailed means the forward may have reached the owner node
	// but no usable answer came back. The input may have been accepted.
	ErrForwardFailed = errors.New("session: forward to the owner node failed")
	// ErrStoreUnavailable means a store the decision needs (the lease
	// store's claim, the session store's thaw that starts an actor, the
	// inbox write that accepts an input) did not
	// answer. Nothing ran; the caller refuses with a retry directive.
	ErrStoreUnavailable = errors.New("session: store unavailable")
)

// Codes of a RemoteError: what the receiving node's Accept answered, in the
// session's own terms (the gateway maps them to HTTP and channel replies).
const (
	CodeLeaseHeld   = "lease_held"             // another process holds a live lease; Held says which
	CodeBusy        = "busy"                   // ErrBusy
	CodeDraining    = "draining"               // ErrDraining or ErrClosed: nothing ran
	CodeFenced      = "fenced"                 // ErrFenced: the node lost the session mid-request
	CodeUnavailable = "unavailable"            // the node could not decide (ErrStoreUnavailable or another error): nothing ran
	CodeInvalidID   = "invalid_id"             // ErrInvalidID
	CodeKeyReused   = "idempotency_key_reused" // ErrIdempotencyKeyReused: nothing was accepted
	CodeInvalid     = "invalid_input"          // ErrInvalidInput: the input contract refuses the input; nothing was accepted
	CodeUnknown     = "outcome_unknown"        // ErrOutcomeUnknown: the input may have been accepted
	CodeTurnBusy    = "turn_busy"              // *TurnBusyError: a turn runs and the input asked to be rejected; Turn says which
	CodeBadControl  = "invalid_control"        // ErrInvalidControl: the control's op is unknown; nothing changed
	CodeAnswered    = "interrupt_answered"     // ErrInterruptAnswered: nothing was accepted
	CodeExpired     = "interrupt_expired"      // ErrInterruptExpired: nothing was accepted
	CodeNoInterrupt = "interrupt_not_found"    // ErrInterruptNotFound: nothing was accepted
	CodeBadRequest  = "bad_request"            // the forward request could not be decoded
	CodeInternal    = "internal"               // anything else a node may answer
)

// RemoteError is an error answered by the node a forward reached. Code is
// one of the Code constants (a node of another version may send others);
// Held is set for CodeLeaseHeld and keeps the holder, epoch and remaining
// lease time the database reported to that node. errors.Is and errors.As
// see through it: Unwrap returns Held, or the sentinel of the code
// (ErrBusy, ErrDraining, ErrFenced, ErrStoreUnavailable, ErrInvalidID,
// ErrIdempotencyKeyReused, ErrOutcomeUnknown), so
// a remote refusal is classified like a local one.
type RemoteError struct {
	Code    string          `json:"code"`
	Message string          `json:"message,omitempty"`
	Held    *LeaseHeldError `json:"held,omitempty"`
	// Turn is the running turn's input position (CodeTurnBusy).
	Turn *agent.Position `json:"turn,omitempty"`
}

func (e *RemoteError) Error() string {
	return "session: owner node answered " + e.Code + ": " + e.Message
}

// Unwrap returns the error the code stands for (nil for CodeBadRequest,
// CodeInternal and unknown codes).
func (e *RemoteError) Unwrap() error {
	if e.Held != nil {
		return e.Held
	}
	switch e.Code {
	case CodeBusy:
		return ErrBusy
	case CodeDraining:
		return ErrDraining
	case CodeFenced:
		return ErrFenced
	case CodeUnavailable:
		return ErrStoreUnavailable
	case CodeInvalidID:
		return ErrInvalidID
	case CodeKeyReused:
		return ErrIdempotencyKeyReused
	case CodeInvalid:
		return agent.ErrInvalidInput
	case CodeUnknown:
		return ErrOutcomeUnknown
	case CodeTurnBusy:
		if e.Turn != nil {
			return &TurnBusyError{Turn: *e.Turn}
		}
		return ErrTurnBusy
	case CodeBadControl:
		return ErrInvalidControl
	case CodeAnswered:
		return ErrInterruptAnswered
	case CodeExpired:
		return ErrInterruptExpired
	case CodeNoInterrupt:
		return ErrInterruptNotFound
	}
	return nil
}

// RemoteErrorOf encodes an error of Accept for the wire.
func RemoteErrorOf(err error) *RemoteError {
	var held *LeaseHeldError
	var busy *TurnBusyError
	code := CodeUnavailable
	switch {
	case errors.As(err, &held):
		return &RemoteError{Code: CodeLeaseHeld, Message: err.Error(), Held: held}
	case errors.As(err, &busy):
		return &RemoteError{Code: CodeTurnBusy, Message: err.Error(), Turn: &busy.Turn}
	case errors.Is(err, ErrInvalidControl):
		code = CodeBadControl
	case errors.Is(err, ErrInterruptAnswered):
		code = CodeAnswered
	case errors.Is(err, ErrInterruptExpired):
		code = CodeExpired
	case errors.Is(err, ErrInterruptNotFound):
		code = CodeNoInterrupt
	case errors.Is(err, ErrInvalidID):
		code = CodeInvalidID
	case errors.Is(err, ErrIdempotencyKeyReused):
		code = CodeKeyReused
	case errors.Is(err, agent.ErrInvalidInput):
		code = CodeInvalid
	case errors.Is(err, ErrOutcomeUnknown):
		code = CodeUnknown
	case errors.Is(err, ErrBusy):
		code = CodeBusy
	case errors.Is(err, ErrDraining), errors.Is(err, ErrClosed):
		code = CodeDraining
	case errors.Is(err, ErrFenced):
		code = CodeFenced
	}
	return &RemoteError{Code: code, Message: err.Error()}
}

// HandleForward runs a forwarded request on this node: Accept, bounded by
// ForwardTimeout, so the lease is claimed (re-checked) here before the
// input is accepted. It never forwards further. An error comes back as a
// RemoteError (RemoteErrorOf). ctx carries the sender's span context when
// the transport extracted one: the request's server span starts under it.
func (m *Manager) HandleForward(ctx context.Context, req ForwardRequest) (rep ForwardReply) {
	if !agent.ValidID(req.Session) {
		return ForwardReply{Error: &RemoteError{Code: CodeInvalidID, Message: ErrInvalidID.Error()}}
	}
	ctx, cancel := context.WithTimeout(ctx, m.cfg.ForwardTimeout)
	defer cancel()
	ctx, span := m.startSpan(ctx, spanServe, oteltrace.SpanKindServer, req.Session)
	if span.IsRecording() {
		defer func() {
			if rep.Error != nil {
				span.SetAttributes(attribute.String("relay.error", rep.Error.Code))
				endSpan(span, rep.Error)
				return
			}
			span.End()
		}()
	}
	m.tr.Emit("session.forward.serve", "owner", m.cfg.Owner, "session", req.Session)
	var acc Accepted
	var err error
	if req.Control != nil {
		var r ControlResult
		r, err = m.ControlLocal(ctx, req.Session, *req.Control)
		acc = Accepted{Session: req.Session, Control: &r}
	} else {
		acc, err = m.Accept(ctx, req.Session, req.Input)
	}
	if err != nil {
		return ForwardReply{Error: RemoteErrorOf(err)}
	}
	return ForwardReply{Accepted: &acc}
}

// NodeOf returns the node name of an owner identity "<node>/<incarnation>"
// (the whole string when it has no "/").
func NodeOf(owner string) string {
	name, _, _ := strings.Cut(owner, "/")
	return name
}
