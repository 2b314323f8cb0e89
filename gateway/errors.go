package gateway

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/relaygw/relay/session"
)

// Error codes of the HTTP API. Every error body is
//
//	{"error":"<code>", "message":"<human text>"}
//
// and the same codes appear as "reason" in WebSocket error replies. The README
// table lists them; keep the two in step.
const (
	CodeInvalidBody      = "invalid_body"       // 400: body is not the documented JSON shape
	CodeInvalidSessionID = "invalid_session_id" // 400: id is not 1–128 chars of [A-Za-z0-9_.:-]
	CodeInvalidInput     = "invalid_input"      // 422: the input contract refuses the event (session.ValidateInput)
	CodeUnauthorized     = "unauthorized"       // 401: missing or invalid credentials
	CodeForbidden        = "forbidden"          // 403: credentials do not allow this session or route
	CodeNotFound         = "not_found"          // 404: no such session
	CodeBodyTooLarge     = "body_too_large"     // 413: body over MAX_BODY_BYTES
	CodeUnsupportedMedia = "unsupported_media"  // 415: Content-Type is not application/json
	CodeSessionBusy      = "session_busy"       // 429: the session's mailbox is full
	CodeSessionMoving    = "session_moving"     // 503 + retry directive: ownership is elsewhere or undecidable
	CodeDraining         = "draining"           // 503 + retry directive: this node is draining
	CodeFenced           = "fenced"             // 409: this node lost the session mid-request
	CodeInternal         = "internal"           // 500: unexpected server error (logged)
)

// RetryDirective tells a client when to re-send a refused event and how long
// it may keep trying (docs/OWNERSHIP.md "Wire contracts"). AfterMS comes from the
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
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

func errorf(status int, code, msg string) *apiError {
	return &apiError{Status: status, Code: code, Message: msg}
}

// retryFor builds the retry directive for a refused event. remaining is the
// holder's lease time left (zero when unknown); the delay is that plus a small
// slack so the retry lands after expiry, never below minDelay. The budget
// covers a full lease TTL after the delay.
func retryFor(remaining, ttl time.Duration) *RetryDirective {
	const minDelay = 100 * time.Millisecond
	const slack = 50 * time.Millisecond
	d := remaining + slack
	if remaining <= 0 {
		d = minDelay
	}
	if d < minDelay {
		d = minDelay
	}
	return &RetryDirective{AfterMS: d.Milliseconds(), BudgetMS: (d + ttl + time.Second).Milliseconds()}
}

// classify maps an error from the session layer to an apiError. ttl is the
// lease TTL used for retry budgets.
func classify(err error, ttl time.Duration) *apiError {
	var ae *apiError
	var held *session.LeaseHeldError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, session.ErrInvalidID):
		return errorf(http.StatusBadRequest, CodeInvalidSessionID, "session id must be 1-128 characters of [A-Za-z0-9_.:-]")
	case errors.As(err, &held):
		return &apiError{Status: http.StatusServiceUnavailable, Code: CodeSessionMoving,
			Message: "the session is owned by another node; retry after the delay",
			Retry:   retryFor(held.Remaining, ttl)}
	case errors.Is(err, session.ErrBusy):
		return errorf(http.StatusTooManyRequests, CodeSessionBusy, "the session has too many queued events")
	case errors.Is(err, session.ErrDraining), errors.Is(err, session.ErrClosed):
		return &apiError{Status: http.StatusServiceUnavailable, Code: CodeDraining,
			Message: "this node is draining; retry (another node will take the session)",
			Retry:   retryFor(0, ttl)}
	case errors.Is(err, session.ErrFenced):
		return &apiError{Status: http.StatusServiceUnavailable, Code: CodeSessionMoving,
			Message: "this node lost the session to a newer owner; retry",
			Retry:   retryFor(0, ttl)}
	case errors.Is(err, errStoreUnavailable):
		return &apiError{Status: http.StatusServiceUnavailable, Code: CodeSessionMoving,
			Message: "the lease store is unreachable; nothing was run, retry",
			Retry:   retryFor(0, ttl)}
	default:
		return errorf(http.StatusInternalServerError, CodeInternal, "internal error")
	}
}

var errStoreUnavailable = errors.New("gateway: lease store unavailable")

// writeError writes e as the documented JSON error body. A retry directive
// adds the Retry-After header (whole seconds, rounded up) and the "retry" field.
func writeError(w http.ResponseWriter, e *apiError) {
	body := map[string]any{"error": e.Code, "message": e.Message}
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
