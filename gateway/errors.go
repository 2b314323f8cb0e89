package gateway

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/channels"
	"github.com/relaygw/relay/session"
)

// Error codes of the HTTP API. Every error body is
//
//	{"error":"<code>", "message":"<human text>"}
//
// and the same codes appear as "reason" in WebSocket error replies. The README
// table lists them; keep the two in step.
const (
	CodeInvalidBody      = "invalid_body"           // 400: body is not the documented JSON shape
	CodeInvalidSessionID = "invalid_session_id"     // 400: id is not 1–128 chars of [A-Za-z0-9_.:-]
	CodeInvalidQuery     = "invalid_query"          // 400: a query parameter is out of its documented range
	CodeInvalidInput     = "invalid_input"          // 422: the input contract refuses the event (agent.ValidateInput)
	CodeKeyReused        = "idempotency_key_reused" // 422: the idempotency key was accepted with another body
	CodeOutcomeUnknown   = "outcome_unknown"        // 504: the session store did not confirm the event; it may have been accepted
	CodeUnauthorized     = "unauthorized"           // 401: missing or invalid credentials
	CodeForbidden        = "forbidden"              // 403: credentials do not allow this session or route
	CodeNotFound         = "not_found"              // 404: no such session
	CodeBodyTooLarge     = "body_too_large"         // 413: body over MAX_BODY_BYTES
	CodeUnsupportedMedia = "unsupported_media"      // 415: Content-Type is not application/json
	CodeSessionBusy      = "session_busy"           // 429: the session's mailbox is full
	CodeSessionMoving    = "session_moving"         // 503 + retry directive: ownership is elsewhere or undecidable
	CodeDraining         = "draining"               // 503 + retry directive: this node is draining
	CodeNotReady         = "not_ready"              // 503 on /readyz: a dependency check fails (reasons listed); also a refused new socket (+ retry directive)
	CodeFenced           = "fenced"                 // 409: this node lost the session mid-request
	CodeSessionBusyTurn  = "session_busy_turn"      // 409: a turn is running and the event's multitask is reject; "turn" names it
	CodeInvalidTurn      = "invalid_turn"           // 400: the turn id is not "<epoch>-<seq>"
	CodeAnswered         = "interrupt_answered"     // 409: the interrupt was answered already (the first answer wins)
	CodeExpired          = "interrupt_expired"      // 409: the interrupt's expires_at has passed
	CodeNoInterrupt      = "interrupt_not_found"    // 404: the session has no interrupt of that id
	CodeInternal         = "internal"               // 500: unexpected server error (logged)
)

// RetryDirective is the wire form of a session.RetryDirective: when a client
// re-sends a refused event and how long it may keep trying, in
// milliseconds (docs/OWNERSHIP.md "Wire contracts"). AfterMS comes from the
// holder's remaining lease time as the database reported it.
type RetryDirective struct {
	AfterMS  int64 `json:"after_ms"`
	BudgetMS int64 `json:"budget_ms"`
}

// apiError is an error with an HTTP status and a documented code.
type apiError struct {
	Status  int
	Code    string
	Message string
	Retry   *RetryDirective
	// Turn is the running turn's id "<epoch>-<seq>" (session_busy_turn),
	// sent as the body's "turn" field.
	Turn string
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

func errorf(status int, code, msg string) *apiError {
	return &apiError{Status: status, Code: code, Message: msg}
}

// CodeForwardTimeout and CodeForwardFailed answer a forward whose outcome
// is unknown: the owner node may have accepted the event.
const (
	CodeForwardTimeout = "forward_timeout" // 504: the owner did not answer in time
	CodeForwardFailed  = "forward_failed"  // 502: the owner answered with an error, or no usable answer came back
)

// asAPIError returns err's *apiError (DecodeInput's errors), or internal.
func asAPIError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	return errorf(http.StatusInternalServerError, CodeInternal, "internal error")
}

func invalidSessionID() *apiError {
	return errorf(http.StatusBadRequest, CodeInvalidSessionID, "session id must be 1-128 characters of [A-Za-z0-9_.:-]")
}

// answer maps the outcome of session.Manager.Submit to the documented
// answer, the one mapping for HTTP (writeError) and channel pushes
// (pushReply), and counts refusals by code:
//
//	accepted                          → 202 {"session","epoch","seq","duplicate"}
//	refused: draining / closed        → 503 draining + retry directive
//	refused: lease held, fenced,
//	  store unavailable, undecided    → 503 session_moving + retry directive
//	failed: invalid id                → 400 invalid_session_id
//	failed: key reused (here or at
//	  the owner) with another body    → 422 idempotency_key_reused
//	failed: busy (here or at owner)   → 429 session_busy
//	failed: a turn runs and the event
//	  says multitask reject           → 409 session_busy_turn + "turn"
//	failed: an answer to an interrupt
//	  answered / expired / unknown    → 409 interrupt_answered / 409
//	                                    interrupt_expired / 404 interrupt_not_found
//	failed: forward timeout           → 504 forward_timeout
//	failed: inbox write unconfirmed
//	  (here or at the owner)          → 504 outcome_unknown
//	failed: owner's error, other      → 502 forward_failed
//
// The retry directive's delay is the one Submit derived from the holder's
// remaining lease time as the lease store reported it.
func (n *Node) answer(out session.Outcome) (acceptedBody, *apiError) {
	if out.Kind == session.OutcomeAccepted {
		a := out.Accepted
		return acceptedBody{Session: a.Session, Epoch: a.Epoch, Seq: a.Seq, Duplicate: a.Duplicate}, nil
	}
	err := out.Err
	var ae *apiError
	var held *session.LeaseHeldError
	var remote *session.RemoteError
	if out.Kind == session.OutcomeRefused {
		retry := &RetryDirective{AfterMS: out.Retry.After.Milliseconds(), BudgetMS: out.Retry.Budget.Milliseconds()}
		ae = &apiError{Status: http.StatusServiceUnavailable, Code: CodeSessionMoving, Retry: retry}
		switch {
		case errors.As(err, &remote) && errors.Is(err, session.ErrDraining):
			ae.Code, ae.Message = CodeDraining, "the owner node is draining; retry (another node will take the session)"
		case (errors.Is(err, session.ErrDraining) || errors.Is(err, session.ErrClosed)) && n.cfg.NATSURL == "":
			ae.Code, ae.Message = CodeDraining, "this node is draining and no other node can take the session; retry once it is back"
		case errors.Is(err, session.ErrDraining), errors.Is(err, session.ErrClosed):
			ae.Code, ae.Message = CodeDraining, "this node is draining; retry (another node will take the session)"
		case errors.As(err, &held):
			ae.Message = "the session is owned by another node; retry after the delay"
		case errors.Is(err, session.ErrFenced):
			ae.Message = "this node lost the session to a newer owner; retry"
		default:
			ae.Message = "the session's store is unreachable; nothing was accepted or run, retry"
		}
	} else {
		switch {
		case errors.Is(err, session.ErrInvalidID):
			ae = invalidSessionID()
		case errors.Is(err, session.ErrIdempotencyKeyReused):
			ae = errorf(http.StatusUnprocessableEntity, CodeKeyReused, "this idempotency key was accepted with a different body; nothing was accepted")
		case errors.Is(err, agent.ErrInvalidInput):
			ae = errorf(http.StatusUnprocessableEntity, CodeInvalidInput, err.Error())
		case errors.Is(err, session.ErrTurnBusy):
			ae = errorf(http.StatusConflict, CodeSessionBusyTurn, "a turn is running and the event asked to be rejected (multitask reject); nothing was accepted")
			var busy *session.TurnBusyError
			if errors.As(err, &busy) {
				ae.Turn = busy.Turn.String()
			}
		case errors.Is(err, session.ErrInterruptAnswered):
			ae = errorf(http.StatusConflict, CodeAnswered, "the interrupt was answered already; the first answer wins")
		case errors.Is(err, session.ErrInterruptExpired):
			ae = errorf(http.StatusConflict, CodeExpired, "the interrupt has expired")
		case errors.Is(err, session.ErrInterruptNotFound):
			ae = errorf(http.StatusNotFound, CodeNoInterrupt, "the session has no interrupt of that id")
		case errors.Is(err, session.ErrInvalidControl):
			ae = errorf(http.StatusBadRequest, CodeInvalidBody, err.Error())
		case errors.Is(err, session.ErrBusy):
			ae = errorf(http.StatusTooManyRequests, CodeSessionBusy, "the session has too many queued events")
		case errors.Is(err, session.ErrOutcomeUnknown):
			ae = errorf(http.StatusGatewayTimeout, CodeOutcomeUnknown, "the session store did not confirm the event; it may have been accepted: re-send with the same idempotency key")
		case errors.Is(err, session.ErrForwardTimeout):
			ae = errorf(http.StatusGatewayTimeout, CodeForwardTimeout, "the owner node did not answer in time; the event may have been accepted")
		case errors.As(err, &remote):
			ae = errorf(http.StatusBadGateway, CodeForwardFailed, "owner node: "+remote.Code+": "+remote.Message)
		default:
			ae = errorf(http.StatusBadGateway, CodeForwardFailed, "forwarding to the owner node failed; the event may have been accepted")
		}
	}
	n.metrics.refused.WithLabelValues(ae.Code).Inc()
	return acceptedBody{}, ae
}

// pushReply is e as the error reply of a channel push (README "WebSocket
// API"): {"reason":"retry","retry":{…},"error":code,"message":…} when e
// carries a retry directive, else {"reason":code,"message":…}.
func (e *apiError) pushReply() *channels.ReplyError {
	if e.Retry != nil {
		return &channels.ReplyError{Reason: "retry", Fields: map[string]any{"retry": e.Retry, "error": e.Code, "message": e.Message}}
	}
	if e.Turn != "" {
		return &channels.ReplyError{Reason: e.Code, Fields: map[string]any{"message": e.Message, "turn": e.Turn}}
	}
	return replyErr(e.Code, e.Message)
}

// writeError writes e as the documented JSON error body. A retry directive
// adds the Retry-After header (whole seconds, rounded up) and the "retry" field.
func writeError(w http.ResponseWriter, e *apiError) {
	body := map[string]any{"error": e.Code, "message": e.Message}
	if e.Turn != "" {
		body["turn"] = e.Turn
	}
	if e.Retry != nil {
		body["retry"] = e.Retry
		secs := int64(math.Ceil(float64(e.Retry.AfterMS) / 1000))
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	}
	writeJSON(w, e.Status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
