// Package openai is an agent.Agent backed by an OpenAI-compatible chat
// completions endpoint: OpenAI and other hosted providers, vLLM, Ollama,
// llama.cpp's server, LM Studio. For each turn it POSTs
// {base}/chat/completions with "stream": true and the messages built from
// the system prompt, the session's history (Turn.History, oldest first)
// and the turn's input, then reads the Server-Sent Events reply:
//
//   - choices[0].delta.content fragments become delta events {"text":…},
//     and their concatenation the turn's final message;
//   - choices[0].delta.reasoning_content (or .reasoning) fragments become
//     reasoning events {"text":…}, not part of the message;
//   - choices[0].delta.tool_calls fragments are assembled by index and each
//     call becomes a tool_call event (ToolCall) once the chunk with the
//     finish_reason (or the end of the stream) arrives. Relay does not run
//     tools: the turn ends with the text the model wrote (maybe empty),
//     and whoever watches the session acts on the tool call;
//   - data: [DONE] ends the reply. A body that ends without [DONE] after a
//     finish_reason is whole too; one that ends without either is cut short
//     and the turn fails;
//   - a server that ignores "stream" and answers one application/json
//     chat.completion gives the same events at once: its content as one
//     delta, then its tool calls.
//
// Failures end the turn with an error naming what happened (the session
// publishes it as turn_failed {"error":…}): an HTTP status other than 200
// (with the provider's error message), an error object in the stream, a
// chunk that is not JSON, a broken connection, a reply over
// Config.MaxReplyBytes, or no data for Config.IdleTimeout. A connection
// error, a 5xx, a 429 and a stream that ends or breaks before any output
// are retried with backoff (honouring Retry-After) within Config.RetryBudget
// and Config.MaxAttempts; once anything was emitted nothing is retried.
// Cancelling the turn's context closes the request.
//
// The agent does not implement agent.Resumer: a turn left unfinished by
// a dead or drained owner restarts on the next owner (a new turn_started
// with the attempt number), and the model is asked again from the same
// messages. The chat completions API has no portable way to continue a
// partial assistant message (vLLM's continue_final_message and Ollama's
// raw mode differ, and hosted providers have none), and asking a model "go
// on" after its own partial text gives a seam that differs from what it
// would have written; a restarted turn's clients drop the partial deltas
// (README "WebSocket API"), so they never show two half-replies.
package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/relaygw/relay/agent"
)

// Config configures an Agent. BaseURL and Model are required; zero values
// of the other fields take the defaults shown.
type Config struct {
	// BaseURL is the API root the chat completions path is appended to,
	// "/v1" included: http://127.0.0.1:8000/v1 (vLLM),
	// http://127.0.0.1:11434/v1 (Ollama), https://api.openai.com/v1.
	BaseURL string
	// APIKey is sent as "Authorization: Bearer <APIKey>" when not empty.
	APIKey string
	// Model is the request's "model".
	Model string
	// SystemPrompt, when not empty, is the first message (role system).
	SystemPrompt string

	// HTTPClient sends the requests. Default: a client with no overall
	// timeout (the turn's context and IdleTimeout bound a request).
	HTTPClient *http.Client
	// IdleTimeout fails a request that receives nothing (no response
	// headers, then no bytes of the stream) for this long. Default 120 s.
	IdleTimeout time.Duration
	// RetryBudget bounds a turn's retries: no retry starts later than
	// RetryBudget after the turn's first request. Default 15 s.
	RetryBudget time.Duration
	// MaxAttempts bounds the requests of one turn. Default 4.
	MaxAttempts int
	// RetryFirst is the first wait between attempts, doubled after each up
	// to RetryMax. Defaults 250 ms and 4 s.
	RetryFirst, RetryMax time.Duration
	// MaxChunkBytes bounds one line, and one event's data, of the stream.
	// Default 1 MiB.
	MaxChunkBytes int
	// MaxReplyBytes bounds a reply's content, reasoning and tool call
	// bytes together. Default 4 MiB.
	MaxReplyBytes int
}

// Agent is the OpenAI-compatible backend. Create it with New; it is safe
// for concurrent use by many sessions.
type Agent struct {
	cfg Config
	url string
}

var _ agent.Agent = (*Agent)(nil)

// New checks cfg and returns its Agent. The error names the missing or
// invalid field: an empty Model, or a BaseURL that is not an absolute
// http or https URL.
func New(cfg Config) (*Agent, error) {
	if cfg.BaseURL == "" {
		return nil, errors.New("openai: the base URL is required (e.g. http://127.0.0.1:8000/v1)")
	}
	u, err := url.Parse(cfg.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("openai: base URL %q is not an absolute http(s) URL (e.g. http://127.0.0.1:8000/v1)", cfg.BaseURL)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("openai: base URL %q has a query or fragment; give the API root only (e.g. http://127.0.0.1:8000/v1)", cfg.BaseURL)
	}
	if strings.TrimSpace(cfg.Model) == "" {
		return nil, errors.New("openai: the model is required (the request's \"model\", e.g. Qwen/Qwen2.5-7B-Instruct)")
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.IdleTimeout, 120*time.Second)
	def(&cfg.RetryBudget, 15*time.Second)
	def(&cfg.RetryFirst, 250*time.Millisecond)
	def(&cfg.RetryMax, 4*time.Second)
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 4
	}
	if cfg.MaxChunkBytes <= 0 {
		cfg.MaxChunkBytes = 1 << 20
	}
	if cfg.MaxReplyBytes <= 0 {
		cfg.MaxReplyBytes = 4 << 20
	}
	return &Agent{cfg: cfg, url: strings.TrimRight(cfg.BaseURL, "/") + "/chat/completions"}, nil
}

// URL is the endpoint the agent POSTs to: the base URL + /chat/completions.
func (a *Agent) URL() string { return a.url }

// ChatMessage is one message of a chat completions request.
type ChatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// chatRequest is the body POSTed for a turn.
type chatRequest struct {
	Model    string        `json:"model"`
	Messages []ChatMessage `json:"messages"`
	Stream   bool          `json:"stream"`
}

// Messages returns the chat messages of a turn: the system prompt (if
// any), then the history in order, then the input as a user message (its
// data.text, else its data as JSON text, as the session stores it).
// Consecutive messages of one role (a failed turn leaves its user message
// without a reply) are joined into one, separated by a blank line, because
// many models' chat templates refuse roles that do not alternate. Roles the
// chat API does not know are mapped (chatRole): an interrupt the turn
// ended with becomes the assistant's question.
func (a *Agent) Messages(turn agent.Turn) []ChatMessage {
	msgs := make([]ChatMessage, 0, len(turn.History)+2)
	if a.cfg.SystemPrompt != "" {
		msgs = append(msgs, ChatMessage{Role: "system", Content: a.cfg.SystemPrompt})
	}
	add := func(role, content string) {
		if n := len(msgs); n > 0 && msgs[n-1].Role == role && role != "system" {
			msgs[n-1].Content += "\n\n" + content
			return
		}
		msgs = append(msgs, ChatMessage{Role: role, Content: content})
	}
	for _, m := range turn.History {
		add(chatRole(m))
	}
	add("user", agent.InputText(turn.Input))
	return msgs
}

// chatRole maps a history message to a chat role and content. system,
// user and assistant pass as they are. An interrupt (agent.RoleInterrupt,
// content the agent.Interrupt as JSON) was the assistant's question:
// "[interrupt <kind>] <payload JSON>". Any other role is the user's.
func chatRole(m agent.Message) (role, content string) {
	switch m.Role {
	case "system", "user", "assistant":
		return m.Role, m.Content
	case agent.RoleInterrupt:
		var in agent.Interrupt
		if err := json.Unmarshal([]byte(m.Content), &in); err != nil || in.Kind == "" {
			return "assistant", m.Content
		}
		if len(in.Payload) == 0 {
			return "assistant", "[interrupt " + in.Kind + "]"
		}
		return "assistant", "[interrupt " + in.Kind + "] " + string(in.Payload)
	default:
		return "user", m.Content
	}
}

// Run implements agent.Agent: one streamed chat completion, retried
// before any output as the package documentation says. The message is
// {"assistant", the concatenated content}.
func (a *Agent) Run(ctx context.Context, turn agent.Turn, emit agent.Emit) (agent.Message, error) {
	body, err := json.Marshal(chatRequest{Model: a.cfg.Model, Messages: a.Messages(turn), Stream: true})
	if err != nil {
		return agent.Message{}, fmt.Errorf("openai: encode request: %w", err)
	}
	start := time.Now()
	wait := a.cfg.RetryFirst
	for attempt := 1; ; attempt++ {
		st := newStream(a.cfg.MaxReplyBytes)
		err := a.attempt(ctx, body, st, emit)
		if err == nil {
			return agent.Message{Role: "assistant", Content: st.text.String()}, nil
		}
		if ctx.Err() != nil {
			return agent.Message{}, fmt.Errorf("openai: turn stopped: %w", context.Cause(ctx))
		}
		var ae *attemptError
		if !errors.As(err, &ae) {
			return agent.Message{}, err // emit's error: the turn is stopping
		}
		if !ae.retryable || st.emitted {
			return agent.Message{}, ae.final(a.url, attempt, "")
		}
		if attempt >= a.cfg.MaxAttempts {
			return agent.Message{}, ae.final(a.url, attempt, fmt.Sprintf("gave up after %d attempts", attempt))
		}
		d := wait
		if ae.retryAfter > 0 {
			d = ae.retryAfter
		}
		if time.Since(start)+d > a.cfg.RetryBudget {
			return agent.Message{}, ae.final(a.url, attempt, fmt.Sprintf("gave up: the next try in %v would pass the %v retry budget", d, a.cfg.RetryBudget))
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return agent.Message{}, fmt.Errorf("openai: turn stopped: %w", context.Cause(ctx))
		case <-t.C:
		}
		wait = min(2*wait, a.cfg.RetryMax)
	}
}

// attemptError is a failed request: what went wrong, whether it may be
// sent again, and the wait the provider asked for (Retry-After).
type attemptError struct {
	msg        string
	retryable  bool
	retryAfter time.Duration
}

func (e *attemptError) Error() string { return e.msg }

// final is the turn's error: "openai: POST <url>: <what> (<n> attempts;
// <note>)".
func (e *attemptError) final(url string, attempts int, note string) error {
	var tail []string
	if attempts > 1 {
		tail = append(tail, fmt.Sprintf("%d attempts", attempts))
	}
	if note != "" {
		tail = append(tail, note)
	}
	s := "openai: POST " + url + ": " + e.msg
	if len(tail) > 0 {
		s += " (" + strings.Join(tail, "; ") + ")"
	}
	return errors.New(s)
}

// errIdle is the cause of a request cancelled for silence.
var errIdle = errors.New("idle")

// attempt sends the request once and reads its stream into st. It returns
// nil for a whole reply, an *attemptError for a failure of the request or
// the stream, or emit's error.
func (a *Agent) attempt(ctx context.Context, body []byte, st *stream, emit agent.Emit) error {
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w := newWatchdog(a.cfg.IdleTimeout, func() { cancel(errIdle) })
	defer w.stop()

	req, err := http.NewRequestWithContext(rctx, http.MethodPost, a.url, bytes.NewReader(body))
	if err != nil {
		return &attemptError{msg: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if a.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+a.cfg.APIKey)
	}
	resp, err := a.cfg.HTTPClient.Do(req)
	if err != nil {
		if context.Cause(rctx) == errIdle {
			return &attemptError{msg: fmt.Sprintf("no response within %v", a.cfg.IdleTimeout), retryable: true}
		}
		return &attemptError{msg: "request failed: " + unwrapURLError(err).Error(), retryable: true}
	}
	defer resp.Body.Close()
	w.touch()
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		msg := resp.Status + ": " + errorText(raw)
		if resp.StatusCode == http.StatusNotFound {
			msg += " (is the base URL the API root, /v1 included, and the model one the server serves?)"
		}
		retry := resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500
		return &attemptError{msg: msg, retryable: retry, retryAfter: retryAfter(resp.Header.Get("Retry-After"))}
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "application/json" {
		// A server that ignores "stream": one whole completion, or an error.
		raw, err := io.ReadAll(io.LimitReader(w.reader(resp.Body), int64(a.cfg.MaxReplyBytes)+64<<10))
		if err != nil {
			return &attemptError{msg: "reading the completion failed: " + err.Error(), retryable: true}
		}
		if err := st.whole(ctx, raw, emit); err != nil {
			var se *streamError
			if errors.As(err, &se) {
				return &attemptError{msg: se.Error()}
			}
			return err
		}
		return nil
	}
	err = st.read(ctx, w.reader(resp.Body), a.cfg.MaxChunkBytes, emit)
	var se *streamError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &se):
		if context.Cause(rctx) == errIdle {
			return &attemptError{msg: fmt.Sprintf("the stream sent nothing for %v after %d chunks", a.cfg.IdleTimeout, st.chunks), retryable: true}
		}
		return &attemptError{msg: se.Error(), retryable: se.retryable}
	default:
		return err
	}
}

// unwrapURLError drops *url.Error's "Post <url>:" prefix (the turn's error
// names the URL once).
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// retryAfter reads a Retry-After header given in seconds (0 when absent or
// not a number of seconds; an HTTP date is not honoured).
func retryAfter(h string) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(h))
	if err != nil || n <= 0 {
		return 0
	}
	return time.Duration(n) * time.Second
}

// watchdog calls fire once nothing has touched it for d.
type watchdog struct {
	d time.Duration
	t *time.Timer
}

func newWatchdog(d time.Duration, fire func()) *watchdog {
	return &watchdog{d: d, t: time.AfterFunc(d, fire)}
}

func (w *watchdog) touch() { w.t.Reset(w.d) }

func (w *watchdog) stop() { w.t.Stop() }

// reader returns r whose every read touches the watchdog.
func (w *watchdog) reader(r io.Reader) io.Reader { return touchReader{r: r, w: w} }

type touchReader struct {
	r io.Reader
	w *watchdog
}

func (t touchReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if n > 0 {
		t.w.touch()
	}
	return n, err
}
