// Package httpagent runs a session's turns on an agent served over HTTP: for
// each turn it POSTs a signed JSON request to the agent and streams the
// agent's answer (Server-Sent Events or NDJSON of Relay events, or a Vercel
// AI SDK UI message stream) into the turn. The wire protocol, with a complete
// example exchange, is docs/AGENT_PROTOCOL.md.
package httpagent

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/relaygw/relay/agent"
	"go.opentelemetry.io/otel/propagation"
	"go.uber.org/zap"
)

// Defaults of Config's zero fields.
const (
	DefaultTurnTimeout   = 5 * time.Minute
	DefaultRetryBudget   = 10 * time.Second
	DefaultMaxEventBytes = 64 << 10
	DefaultMaxReplyBytes = 1 << 20
	// DefaultSignatureTolerance is how old a request's timestamp Verify
	// accepts by default.
	DefaultSignatureTolerance = 5 * time.Minute
)

// Request headers (docs/AGENT_PROTOCOL.md "Request").
const (
	HeaderTimestamp      = "Relay-Timestamp"               // Unix seconds the request was signed at
	HeaderSignature      = "Relay-Signature"               // "v1=" + hex HMAC-SHA256(secret, timestamp + "." + body)
	HeaderIdempotencyKey = "Idempotency-Key"               // "<session>:<turn>"
	HeaderAISDKStream    = "X-Vercel-Ai-Ui-Message-Stream" // "v1" marks a Vercel AI SDK UI message stream response
)

// Backoff between tries before the first event: from retryFirst, doubling,
// at most retryMax.
const (
	retryFirst = 100 * time.Millisecond
	retryMax   = 2 * time.Second
)

// Config configures an Agent. URL and Secret are required; zero durations
// and sizes take the defaults above.
type Config struct {
	// URL is the agent's endpoint (http or https), POSTed once per try.
	URL string
	// Secret is the shared HMAC-SHA256 key the requests are signed with.
	Secret string
	// TurnTimeout bounds one turn run, from the first try to the stream's
	// end (AGENT_TURN_TIMEOUT); past it the turn fails.
	TurnTimeout time.Duration
	// RetryBudget bounds the time spent retrying a try that failed before
	// the first event (connection error, 5xx, 408, 429, or a stream that
	// broke before any event) (AGENT_RETRY_BUDGET).
	RetryBudget time.Duration
	// MaxEventBytes bounds one event of the response (an SSE event's data or
	// an NDJSON line), in bytes (AGENT_MAX_EVENT_BYTES).
	MaxEventBytes int
	// MaxReplyBytes bounds the whole reply of a turn: the bytes of every
	// event's data, the final message included (AGENT_MAX_REPLY_BYTES).
	MaxReplyBytes int
	// Client sends the requests; nil: a client with a 10 s dial timeout and
	// no overall timeout (streams are bounded by TurnTimeout).
	Client *http.Client
	// Now is the clock of the request timestamps; nil: time.Now.
	Now func() time.Time
	// Logger logs retried tries and failed turns; nil: zap.NewNop().
	Logger *zap.Logger
}

// Agent is an agent.Agent (and agent.Resumer) backed by an HTTP agent.
// It is safe for concurrent use by many sessions.
type Agent struct {
	cfg Config
}

var (
	_ agent.Agent   = (*Agent)(nil)
	_ agent.Resumer = (*Agent)(nil)
)

// New checks cfg and returns the agent. It errors when URL is not an
// absolute http(s) URL or Secret is empty.
func New(cfg Config) (*Agent, error) {
	if !strings.HasPrefix(cfg.URL, "http://") && !strings.HasPrefix(cfg.URL, "https://") {
		return nil, fmt.Errorf("httpagent: AGENT_URL %q is not an http:// or https:// URL", cfg.URL)
	}
	if _, err := http.NewRequest(http.MethodPost, cfg.URL, nil); err != nil {
		return nil, fmt.Errorf("httpagent: AGENT_URL %q: %w", cfg.URL, err)
	}
	if cfg.Secret == "" {
		return nil, errors.New("httpagent: AGENT_SECRET is empty; the agent could not tell Relay's requests from forged ones")
	}
	if cfg.TurnTimeout <= 0 {
		cfg.TurnTimeout = DefaultTurnTimeout
	}
	if cfg.RetryBudget <= 0 {
		cfg.RetryBudget = DefaultRetryBudget
	}
	if cfg.MaxEventBytes <= 0 {
		cfg.MaxEventBytes = DefaultMaxEventBytes
	}
	if cfg.MaxReplyBytes <= 0 {
		cfg.MaxReplyBytes = DefaultMaxReplyBytes
	}
	if cfg.Client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
		tr.MaxIdleConnsPerHost = 256
		cfg.Client = &http.Client{Transport: tr}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	return &Agent{cfg: cfg}, nil
}

// Resumable implements agent.Resumer: a turn an earlier owner left
// unfinished is sent again with its resume information, and the agent
// continues after the partial text (docs/AGENT_PROTOCOL.md "Resumed turns").
func (a *Agent) Resumable() bool { return true }

// Request is the JSON body POSTed for a turn (docs/AGENT_PROTOCOL.md
// "Request").
type Request struct {
	Session string           `json:"session"`
	Turn    string           `json:"turn"` // "<epoch>-<seq>" of the input
	Attempt int              `json:"attempt"`
	Input   agent.Input      `json:"input"`
	History []HistoryMessage `json:"history"`
	Resume  *Resume          `json:"resume,omitempty"`
	// Answer is set when the turn is a continuation: its input answers the
	// interrupt the session was waiting on (docs/AGENT_PROTOCOL.md
	// "Interrupts").
	Answer *Answer `json:"answer,omitempty"`
}

// HistoryMessage is one entry of a request's history:
//
//	{"role":"user"|"assistant"|"interrupt","content":string,"stopped"?:true,"interrupt"?:{…},"answer"?:{…}}
//
// Role "assistant" with Stopped: a reply cut short by a stop (Content is
// the partial reply clients saw). Role "interrupt": a turn that ended with
// a question; Content is the interrupt as stored (JSON text) and Interrupt
// the same parsed. A "user" message whose input answered the interrupt
// before it carries Answer (its Content is then the input's data as JSON
// text).
type HistoryMessage struct {
	Role      string             `json:"role"`
	Content   string             `json:"content"`
	Stopped   bool               `json:"stopped,omitempty"`
	Interrupt *InterruptInfo     `json:"interrupt,omitempty"`
	Answer    *HistoryAnswerInfo `json:"answer,omitempty"`
}

// InterruptInfo is an interrupt as a request shows it:
// {"id","kind","payload","expires_at"?,"turn":"<epoch>-<seq>"}. Turn is
// the id of the turn that asked; Payload is null when the agent sent none.
type InterruptInfo struct {
	ID        string          `json:"id"`
	Kind      string          `json:"kind"`
	Payload   json.RawMessage `json:"payload"`
	ExpiresAt *time.Time      `json:"expires_at,omitempty"`
	Turn      string          `json:"turn"`
}

// HistoryAnswerInfo marks a history user message that answered an
// interrupt: {"interrupt":"<id>","value":any}.
type HistoryAnswerInfo struct {
	Interrupt string          `json:"interrupt"`
	Value     json.RawMessage `json:"value"`
}

// Answer is the answer a continuation turn resumes from: the interrupt it
// answers and the client's value (any JSON; null when the client sent
// none).
type Answer struct {
	Interrupt InterruptInfo   `json:"interrupt"`
	Value     json.RawMessage `json:"value"`
}

// Resume is the resume information of a resumed turn.
type Resume struct {
	// From is the journal cursor: the position ("<epoch>-<seq>") of the last
	// journaled event of the turn.
	From string `json:"from"`
	// Text is the partial output so far (the deltas' text, concatenated).
	Text string `json:"text"`
	// Events are the turn's journaled events, oldest first.
	Events []agent.Event `json:"events"`
}

// Sign returns the Relay-Signature value for a request signed at ts (Unix
// seconds) with body: "v1=" + hex(HMAC-SHA256(secret, ts + "." + body)).
func Sign(secret string, ts int64, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(strconv.FormatInt(ts, 10)))
	mac.Write([]byte("."))
	mac.Write(body)
	return "v1=" + hex.EncodeToString(mac.Sum(nil))
}

// Verify checks a request's Relay-Timestamp and Relay-Signature header
// values against body, as an agent written in Go would: the signature must
// match (constant-time compare) and the timestamp be within tolerance of now
// (either way; 0: DefaultSignatureTolerance).
func Verify(secret, timestamp, signature string, body []byte, now time.Time, tolerance time.Duration) error {
	if tolerance <= 0 {
		tolerance = DefaultSignatureTolerance
	}
	ts, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return fmt.Errorf("httpagent: %s %q is not Unix seconds", HeaderTimestamp, timestamp)
	}
	if d := now.Sub(time.Unix(ts, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("httpagent: %s is %v away from now (tolerance %v)", HeaderTimestamp, d.Round(time.Second), tolerance)
	}
	if !hmac.Equal([]byte(Sign(secret, ts, body)), []byte(signature)) {
		return fmt.Errorf("httpagent: %s does not match the body", HeaderSignature)
	}
	return nil
}

// errTurnTimeout is the cause of a turn run's context past TurnTimeout.
type errTurnTimeout struct{ d time.Duration }

func (e errTurnTimeout) Error() string {
	return fmt.Sprintf("httpagent: the agent did not finish the turn within AGENT_TURN_TIMEOUT (%v)", e.d)
}

// Run implements agent.Agent: it POSTs the turn and streams the answer.
// Before the first event a failed try (connection error, 5xx, 408, 429, a
// stream broken before any event) is retried with backoff within
// RetryBudget; after it, a broken stream ends the run with an error (the
// turn fails; a later owner resumes it with the partial output).
//
// Cancelling ctx closes the request at once (the agent sees its client
// disconnect) and Run returns context.Cause(ctx): agent.ErrTurnStopped
// for a stop, the fence or shutdown cause otherwise. An interrupt event
// is emitted as agent.TypeInterrupt and ends the run (nil error, the
// reply so far as the message; the session records the interrupt), and
// the response is closed unread past it.
func (a *Agent) Run(ctx context.Context, turn agent.Turn, emit agent.Emit) (agent.Message, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, a.cfg.TurnTimeout, errTurnTimeout{a.cfg.TurnTimeout})
	defer cancel()
	body, err := json.Marshal(a.request(turn))
	if err != nil {
		return agent.Message{}, fmt.Errorf("httpagent: encode request: %w", err)
	}
	key := turn.Session + ":" + turn.ID.String()
	deadline := time.Now().Add(a.cfg.RetryBudget)
	wait := retryFirst
	for try := 1; ; try++ {
		msg, started, err := a.try(ctx, key, body, turn, emit)
		if err == nil {
			return msg, nil
		}
		if ctx.Err() != nil {
			err := context.Cause(ctx)
			if errors.As(err, new(errTurnTimeout)) {
				a.fail(turn, try, err)
			}
			return agent.Message{}, err
		}
		var re retryable
		if started || !errors.As(err, &re) {
			a.fail(turn, try, err)
			return agent.Message{}, err
		}
		if time.Now().Add(wait).After(deadline) {
			err = fmt.Errorf("httpagent: gave up after %d tries within AGENT_RETRY_BUDGET (%v): %w", try, a.cfg.RetryBudget, err)
			a.fail(turn, try, err)
			return agent.Message{}, err
		}
		a.cfg.Logger.Warn("agent try failed before its first event; retrying",
			zap.String("session", turn.Session), zap.Stringer("turn", turn.ID), zap.Int("try", try),
			zap.Duration("backoff", wait), zap.Error(err))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return agent.Message{}, context.Cause(ctx)
		case <-t.C:
		}
		wait = min(2*wait, retryMax)
	}
}

// fail logs a turn run that ends in an error of the agent (not a cancel).
func (a *Agent) fail(turn agent.Turn, try int, err error) {
	a.cfg.Logger.Warn("agent turn failed", zap.String("session", turn.Session), zap.Stringer("turn", turn.ID),
		zap.Int("attempt", turn.Attempt), zap.Int("try", try), zap.Error(err))
}

func (a *Agent) request(turn agent.Turn) Request {
	req := Request{Session: turn.Session, Turn: turn.ID.String(), Attempt: max(turn.Attempt, 1), Input: turn.Input, History: history(turn.History)}
	if len(req.Input.Data) == 0 {
		req.Input.Data = json.RawMessage(`{}`)
	}
	if r := turn.Resume; r != nil {
		req.Resume = &Resume{From: r.From.String(), Text: r.Text, Events: r.Events}
		if req.Resume.Events == nil {
			req.Resume.Events = []agent.Event{}
		}
	}
	if a := turn.Answer; a != nil {
		req.Answer = &Answer{Interrupt: interruptInfo(a.Interrupt), Value: orNull(a.Value)}
	}
	return req
}

func interruptInfo(iv agent.Interrupt) InterruptInfo {
	return InterruptInfo{ID: iv.ID, Kind: iv.Kind, Payload: orNull(iv.Payload), ExpiresAt: iv.ExpiresAt, Turn: iv.Turn.String()}
}

// history maps a turn's history to the request's: an interrupt entry gets
// its parsed interrupt, and the first later user message that answers it
// (its content a resume input's data {"interrupt":id,"value"}) gets the
// answer. Never nil.
func history(h []agent.Message) []HistoryMessage {
	out := make([]HistoryMessage, len(h))
	var last *InterruptInfo // the newest interrupt not yet answered
	for i, m := range h {
		out[i] = HistoryMessage{Role: m.Role, Content: m.Content, Stopped: m.Stopped}
		switch m.Role {
		case agent.RoleInterrupt:
			var iv agent.Interrupt
			if json.Unmarshal([]byte(m.Content), &iv) == nil {
				info := interruptInfo(iv)
				out[i].Interrupt, last = &info, &info
			}
		case "user":
			var d struct {
				Interrupt string          `json:"interrupt"`
				Value     json.RawMessage `json:"value"`
			}
			if last != nil && json.Unmarshal([]byte(m.Content), &d) == nil && d.Interrupt == last.ID {
				out[i].Answer = &HistoryAnswerInfo{Interrupt: d.Interrupt, Value: orNull(d.Value)}
				last = nil
			}
		}
	}
	return out
}

// retryable marks an error of a try that may be retried if it happened
// before the first event.
type retryable struct{ err error }

func (r retryable) Error() string { return r.err.Error() }
func (r retryable) Unwrap() error { return r.err }

// try POSTs once and streams the answer. started reports whether any event
// was emitted.
func (a *Agent) try(ctx context.Context, key string, body []byte, turn agent.Turn, emit agent.Emit) (msg agent.Message, started bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return msg, false, fmt.Errorf("httpagent: %w", err)
	}
	ts := a.cfg.Now().Unix()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream, application/x-ndjson")
	req.Header.Set(HeaderIdempotencyKey, key)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(HeaderSignature, Sign(a.cfg.Secret, ts, body))
	// The turn's span, when tracing is on: W3C traceparent (and
	// tracestate), outside the signature (docs/AGENT_PROTOCOL.md).
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	resp, err := a.cfg.Client.Do(req)
	if err != nil {
		return msg, false, retryable{fmt.Errorf("httpagent: POST %s: %w", a.cfg.URL, err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		err := fmt.Errorf("httpagent: the agent answered %s: %s", resp.Status, excerpt(bytes.TrimSpace(b)))
		switch {
		case resp.StatusCode >= 500, resp.StatusCode == http.StatusRequestTimeout, resp.StatusCode == http.StatusTooManyRequests:
			return msg, false, retryable{err}
		}
		return msg, false, err
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	var fr frameReader
	dec := &decoder{}
	switch mt {
	case "text/event-stream":
		fr = newSSEReader(resp.Body, a.cfg.MaxEventBytes)
		if resp.Header.Get(HeaderAISDKStream) != "" {
			dec.aiSDK, dec.decided = true, true
		}
	case "application/x-ndjson", "application/ndjson", "application/jsonl", "application/jsonlines":
		fr = newNDJSONReader(resp.Body, a.cfg.MaxEventBytes)
	default:
		return msg, false, fmt.Errorf("httpagent: the agent answered Content-Type %q; want text/event-stream or application/x-ndjson: %w", resp.Header.Get("Content-Type"), ErrProtocol)
	}
	return a.stream(ctx, fr, dec, turn, emit)
}

// stream reads the answer's frames until the end of the turn.
func (a *Agent) stream(ctx context.Context, fr frameReader, dec *decoder, turn agent.Turn, emit agent.Emit) (agent.Message, bool, error) {
	var reply strings.Builder
	if turn.Resume != nil {
		reply.WriteString(turn.Resume.Text)
	}
	started := false
	size := 0
	for {
		f, err := fr.next()
		if err != nil {
			if ctx.Err() != nil {
				return agent.Message{}, started, context.Cause(ctx)
			}
			switch {
			case errors.Is(err, errFrameTooLarge):
				return agent.Message{}, started, fmt.Errorf("%w (AGENT_MAX_EVENT_BYTES %d): %w", err, a.cfg.MaxEventBytes, ErrProtocol)
			case err == io.EOF:
				err = fmt.Errorf("httpagent: the agent's stream ended without a message or done event")
			default:
				err = fmt.Errorf("httpagent: the agent's stream broke: %w", err)
			}
			if !started {
				return agent.Message{}, false, retryable{err}
			}
			return agent.Message{}, true, err
		}
		s, err := dec.decode(f)
		if err != nil {
			return agent.Message{}, started, err
		}
		size += len(s.data) + len(s.text)
		if size > a.cfg.MaxReplyBytes {
			return agent.Message{}, started, fmt.Errorf("httpagent: the agent's reply exceeds AGENT_MAX_REPLY_BYTES (%d): %w", a.cfg.MaxReplyBytes, ErrProtocol)
		}
		switch s.kind {
		case stepEmit:
			started = true
			if err := emit(ctx, s.typ, s.data); err != nil {
				if ctx.Err() != nil {
					return agent.Message{}, true, context.Cause(ctx)
				}
				return agent.Message{}, true, fmt.Errorf("httpagent: emit %q: %w", s.typ, err)
			}
			reply.WriteString(s.text)
		case stepMessage:
			return agent.Message{Role: "assistant", Content: s.text}, true, nil
		case stepDone:
			return agent.Message{Role: "assistant", Content: reply.String()}, true, nil
		case stepInterrupt:
			// The turn ends with the question; the response is closed
			// unread past it.
			if err := emit(ctx, s.typ, s.data); err != nil {
				if ctx.Err() != nil {
					return agent.Message{}, true, context.Cause(ctx)
				}
				return agent.Message{}, true, fmt.Errorf("httpagent: emit %q: %w", s.typ, err)
			}
			return agent.Message{Role: "assistant", Content: reply.String()}, true, nil
		case stepError:
			return agent.Message{}, true, fmt.Errorf("httpagent: the agent reported an error: %s", s.text)
		}
	}
}
