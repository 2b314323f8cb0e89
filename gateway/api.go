package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/session"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
)

// acceptedBody is the 202 response of an event POST and the ok reply of a
// channel "message" push: {"session":id,"epoch":E,"seq":S,"duplicate":bool}.
type acceptedBody struct {
	Session   string `json:"session"`
	Epoch     int64  `json:"epoch"`
	Seq       int64  `json:"seq"`
	Duplicate bool   `json:"duplicate"`
}

// DecodeInput parses an event body: {"type":…, "data":{…}, "idempotency_key":…,
// "multitask":…}; multitask, when present, is "enqueue", "reject" or
// "interrupt" (what the event does while a turn runs; README "Turn control").
// type defaults to "message"; data must be a JSON object when present. It is
// the one parser of outside event input (HTTP bodies and channel pushes).
// Errors are *apiError values: 400 invalid_body for a body that is not that
// shape (or not valid UTF-8: the input is relayed verbatim in WebSocket text
// frames), 422 invalid_input for one the input contract refuses
// (agent.ValidateInput: nesting depth, unpaired surrogates, numbers out of
// range, U+0000), which no store could keep.
func DecodeInput(body []byte) (agent.Input, error) {
	var in agent.Input
	if !utf8.Valid(body) {
		return in, errorf(http.StatusBadRequest, CodeInvalidBody, "body must be valid UTF-8")
	}
	if t := bytes.TrimSpace(body); len(t) == 0 || t[0] != '{' {
		return in, errorf(http.StatusBadRequest, CodeInvalidBody, "body must be a JSON object {type, data, idempotency_key}")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		// encoding/json stops at 10,000 levels before the input contract
		// sees data; a body that deep is refused by the depth rule, as one
		// of 66 levels is (the body object is one level above data).
		if nestsDeeper(body, agent.MaxInputDepth+1) {
			depth := &agent.InputError{Rule: agent.RuleDepth, Detail: fmt.Sprintf("data nests deeper than %d levels", agent.MaxInputDepth)}
			return in, errorf(http.StatusUnprocessableEntity, CodeInvalidInput, depth.Error())
		}
		return in, errorf(http.StatusBadRequest, CodeInvalidBody, "body must be a JSON object {type, data, idempotency_key}: "+err.Error())
	}
	if dec.More() {
		return in, errorf(http.StatusBadRequest, CodeInvalidBody, "body must hold exactly one JSON object")
	}
	if in.Type == "" {
		in.Type = "message"
	}
	if len(in.Type) > 64 {
		return in, errorf(http.StatusBadRequest, CodeInvalidBody, "type must be at most 64 characters")
	}
	if !session.ValidMultitask(in.Multitask) {
		return in, errorf(http.StatusBadRequest, CodeInvalidBody, `multitask must be "enqueue", "reject" or "interrupt"`)
	}
	if len(in.IdempotencyKey) > 256 {
		return in, errorf(http.StatusBadRequest, CodeInvalidBody, "idempotency_key must be at most 256 characters")
	}
	if t := bytes.TrimSpace(in.Data); len(t) == 0 {
		in.Data = json.RawMessage(`{}`)
	} else if t[0] != '{' {
		return in, errorf(http.StatusBadRequest, CodeInvalidBody, "data must be a JSON object")
	}
	if err := agent.ValidateInput(in); err != nil {
		return in, errorf(http.StatusUnprocessableEntity, CodeInvalidInput, err.Error())
	}
	return in, nil
}

// nestsDeeper reports whether the JSON text b nests objects and arrays
// deeper than limit levels (brackets inside strings do not count). b need
// not be valid JSON.
func nestsDeeper(b []byte, limit int) bool {
	depth := 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '{', '[':
			if depth++; depth > limit {
				return true
			}
		case '}', ']':
			depth--
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
		}
	}
	return false
}

// sessionParam reads the {id} route parameter and checks that it is valid
// and that the caller may use it; otherwise it writes the error.
func (n *Node) sessionParam(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := chi.URLParam(r, "id")
	if !agent.ValidID(id) {
		writeError(w, invalidSessionID())
		return "", false
	}
	if !callerFrom(r.Context()).allows(id) {
		writeError(w, errorf(http.StatusForbidden, CodeForbidden, "the token does not allow this session"))
		return "", false
	}
	return id, true
}

// bodyReadTimeout bounds reading one event body; a slower body is refused
// with invalid_body.
const bodyReadTimeout = 10 * time.Second

// refuse counts a refusal made before the event reaches the session
// (n.answer counts those after) and writes it.
func (n *Node) refuse(w http.ResponseWriter, e *apiError) {
	n.metrics.refused.WithLabelValues(e.Code).Inc()
	writeError(w, e)
}

// readBody checks the Content-Type and reads a JSON body of at most
// MAX_BODY_BYTES within bodyReadTimeout; otherwise it writes the refusal
// (415 unsupported_media, 413 body_too_large, 400 invalid_body).
func (n *Node) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			n.refuse(w, errorf(http.StatusUnsupportedMediaType, CodeUnsupportedMedia, "Content-Type must be application/json"))
			return nil, false
		}
	}
	// The server has no read timeout (sockets live long), so a body that
	// trickles in or stalls would hold the connection and its goroutine
	// forever.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(n.bodyTimeout))
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, n.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			n.refuse(w, errorf(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "body is larger than the configured maximum"))
			return nil, false
		}
		n.refuse(w, errorf(http.StatusBadRequest, CodeInvalidBody, "could not read body"))
		return nil, false
	}
	return body, true
}

// handlePostEvent serves POST /api/sessions/{id}/events. Its span
// (spanPostEvent) continues a W3C traceparent the request carries.
func (n *Node) handlePostEvent(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ctx, span := n.startHTTPSpan(r, spanPostEvent)
	defer span.End()
	id, ok := n.sessionParam(w, r)
	if !ok {
		return
	}
	body, ok := n.readBody(w, r)
	if !ok {
		return
	}
	in, err := DecodeInput(body)
	if err != nil {
		n.refuse(w, asAPIError(err))
		return
	}
	if span.IsRecording() {
		span.SetAttributes(attribute.String("relay.session", id))
	}
	acc, aerr := n.submit(ctx, id, in)
	if aerr != nil {
		span.SetStatus(codes.Error, aerr.Code)
		writeError(w, aerr)
		return
	}
	n.metrics.acceptLatency.Observe(time.Since(start).Seconds())
	writeJSON(w, http.StatusAccepted, acc)
}

// sessionBody is the GET /api/sessions/{id} response: one page of history
// (README "HTTP API").
type sessionBody struct {
	Session    string                  `json:"session"`
	Epoch      int64                   `json:"epoch"`
	Seq        int64                   `json:"seq"`
	History    []session.StoredMessage `json:"history"`
	Total      int64                   `json:"total"`
	NextBefore int64                   `json:"next_before"`
	Pending    []agent.Message         `json:"pending"`
	Running    bool                    `json:"running"`
	// DoubleTexting is enqueue, reject or interrupt: what an event sent
	// while a turn runs does in this session.
	DoubleTexting string `json:"double_texting"`
	Node          string `json:"node"`
	Owner         string `json:"owner"`
}

// historyQuery parses ?before=<n>&limit=<k>: before a positive message
// number (absent: the newest page), limit 1 to session.MaxHistoryPage
// (absent: session.DefaultHistoryPage).
func historyQuery(r *http.Request) (session.HistoryQuery, *apiError) {
	var q session.HistoryQuery
	v := r.URL.Query()
	if s := v.Get("before"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 1 {
			return q, errorf(http.StatusBadRequest, CodeInvalidQuery, "before must be a positive message number")
		}
		q.Before = n
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > session.MaxHistoryPage {
			return q, errorf(http.StatusBadRequest, CodeInvalidQuery, fmt.Sprintf("limit must be 1 to %d", session.MaxHistoryPage))
		}
		q.Limit = n
	}
	return q, nil
}

// handleGetSession serves GET /api/sessions/{id}?before=&limit=. It is a
// view: store reads use a short timeout and fall back to an empty state
// rather than fail.
func (n *Node) handleGetSession(w http.ResponseWriter, r *http.Request) {
	id, ok := n.sessionParam(w, r)
	if !ok {
		return
	}
	q, qerr := historyQuery(r)
	if qerr != nil {
		writeError(w, qerr)
		return
	}
	st, owner := n.view(r.Context(), id, q)
	if st.History == nil {
		st.History = []session.StoredMessage{}
	}
	if st.Pending == nil {
		st.Pending = []agent.Message{}
	}
	writeJSON(w, http.StatusOK, sessionBody{
		Session: id, Epoch: st.Epoch, Seq: st.Seq, History: st.History, Total: st.Total, NextBefore: st.NextBefore,
		Pending: st.Pending, Running: st.Running, DoubleTexting: st.DoubleTexting, Node: n.name, Owner: owner,
	})
}

// stopBody is the 200 answer of a stop (POST
// /api/sessions/{id}/turns/{turn}/stop, channel push "stop"):
//
//	{"stopped":true,"turn":"E-S"}
//	{"stopped":false,"turn":"E-S","reason":"not_running","running":"E2-S2"}
//
// running is the turn running now, absent when none runs.
type stopBody struct {
	Stopped bool   `json:"stopped"`
	Turn    string `json:"turn"`
	Reason  string `json:"reason,omitempty"`
	Running string `json:"running,omitempty"`
}

// parseTurnID parses a turn id "<epoch>-<seq>" from a route or a push.
func parseTurnID(s string) (agent.Position, *apiError) {
	p, ok := session.ParseTurnID(s)
	if !ok {
		return p, errorf(http.StatusBadRequest, CodeInvalidTurn, `turn must be "<epoch>-<seq>" (the position of the turn's input, e.g. 3-17)`)
	}
	return p, nil
}

// stop routes a stop of turn in session id to its owner
// (session.Manager.Control) and maps the outcome: the owner's answer as
// stopBody, or the error answer of an event (n.answer: a retry directive
// while ownership moves).
func (n *Node) stop(ctx context.Context, id string, turn agent.Position) (stopBody, *apiError) {
	out := n.manager.Control(ctx, id, session.Control{Op: session.OpStop, Turn: turn})
	if out.Kind != session.OutcomeAccepted || out.Accepted.Control == nil {
		if out.Kind == session.OutcomeAccepted {
			out = session.Outcome{Kind: session.OutcomeFailed, Err: session.ErrForwardFailed}
		}
		_, ae := n.answer(out)
		return stopBody{}, ae
	}
	r := out.Accepted.Control
	b := stopBody{Stopped: r.Stopped, Turn: r.Turn.String(), Reason: r.Reason}
	if r.Running != nil {
		b.Running = r.Running.String()
	}
	return b, nil
}

// handleStopTurn serves POST /api/sessions/{id}/turns/{turn}/stop. The body
// is ignored.
func (n *Node) handleStopTurn(w http.ResponseWriter, r *http.Request) {
	id, ok := n.sessionParam(w, r)
	if !ok {
		return
	}
	turn, ae := parseTurnID(chi.URLParam(r, "turn"))
	if ae != nil {
		writeError(w, ae)
		return
	}
	b, ae := n.stop(r.Context(), id, turn)
	if ae != nil {
		writeError(w, ae)
		return
	}
	writeJSON(w, http.StatusOK, b)
}

// decodeStopPush parses a "stop" push payload: {"turn":"<epoch>-<seq>"}.
func decodeStopPush(payload []byte) (agent.Position, *apiError) {
	var p struct {
		Turn string `json:"turn"`
	}
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil || dec.More() {
		return agent.Position{}, errorf(http.StatusBadRequest, CodeInvalidBody, `stop payload must be {"turn":"<epoch>-<seq>"}`)
	}
	return parseTurnID(p.Turn)
}

// DecodeAnswer parses the answer to interrupt iid of a session (the body
// of POST /api/sessions/{id}/interrupts/{iid}: {"value":…,
// "idempotency_key":…}; value any JSON, absent meaning null) into the
// session's resume input {"type":"resume","data":{"interrupt":iid,
// "value":…}}. Errors are *apiError values: 400 invalid_body for a body
// that is not that shape or an iid that is not 1-128 characters of
// [A-Za-z0-9_.:-], 422 invalid_input for a value the input contract
// refuses.
func DecodeAnswer(iid string, body []byte) (agent.Input, error) {
	var in agent.Input
	if !agent.ValidID(iid) {
		return in, errorf(http.StatusBadRequest, CodeInvalidBody, "the interrupt id must be 1-128 characters of [A-Za-z0-9_.:-]")
	}
	var b struct {
		Value          json.RawMessage `json:"value"`
		IdempotencyKey string          `json:"idempotency_key"`
	}
	if !utf8.Valid(body) {
		return in, errorf(http.StatusBadRequest, CodeInvalidBody, "body must be valid UTF-8")
	}
	if t := bytes.TrimSpace(body); len(t) == 0 || t[0] != '{' {
		return in, errorf(http.StatusBadRequest, CodeInvalidBody, `body must be a JSON object {"value":…}`)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil || dec.More() {
		return in, errorf(http.StatusBadRequest, CodeInvalidBody, `body must be one JSON object {"value":…, "idempotency_key":…}`)
	}
	if len(b.IdempotencyKey) > 256 {
		return in, errorf(http.StatusBadRequest, CodeInvalidBody, "idempotency_key must be at most 256 characters")
	}
	if len(bytes.TrimSpace(b.Value)) == 0 {
		b.Value = json.RawMessage("null")
	}
	data, err := json.Marshal(struct {
		Interrupt string          `json:"interrupt"`
		Value     json.RawMessage `json:"value"`
	}{iid, b.Value})
	if err != nil {
		return in, errorf(http.StatusBadRequest, CodeInvalidBody, "value must be JSON")
	}
	in = agent.Input{Type: agent.TypeResume, Data: data, IdempotencyKey: b.IdempotencyKey}
	if err := agent.ValidateInput(in); err != nil {
		return in, errorf(http.StatusUnprocessableEntity, CodeInvalidInput, err.Error())
	}
	return in, nil
}

// handleAnswerInterrupt serves POST /api/sessions/{id}/interrupts/{iid}:
// the answer is routed like an event and answered like one (202 with its
// user_event's position), or refused interrupt_answered,
// interrupt_expired or interrupt_not_found.
func (n *Node) handleAnswerInterrupt(w http.ResponseWriter, r *http.Request) {
	id, ok := n.sessionParam(w, r)
	if !ok {
		return
	}
	body, ok := n.readBody(w, r)
	if !ok {
		return
	}
	in, err := DecodeAnswer(chi.URLParam(r, "iid"), body)
	if err != nil {
		n.refuse(w, asAPIError(err))
		return
	}
	acc, aerr := n.submit(r.Context(), id, in)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	writeJSON(w, http.StatusAccepted, acc)
}

// decodeResumePush parses a "resume" push payload {"interrupt":iid,
// "value":…, "idempotency_key":…} into the resume input.
func decodeResumePush(payload []byte) (agent.Input, error) {
	var p struct {
		Interrupt      string          `json:"interrupt"`
		Value          json.RawMessage `json:"value"`
		IdempotencyKey string          `json:"idempotency_key"`
	}
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil || dec.More() {
		return agent.Input{}, errorf(http.StatusBadRequest, CodeInvalidBody, `resume payload must be {"interrupt":"<id>","value":…}`)
	}
	body, _ := json.Marshal(struct {
		Value          json.RawMessage `json:"value,omitempty"`
		IdempotencyKey string          `json:"idempotency_key,omitempty"`
	}{p.Value, p.IdempotencyKey})
	return DecodeAnswer(p.Interrupt, body)
}
