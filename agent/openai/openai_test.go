package openai

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
)

var plainDeltas = deltas("Hello", "!", " How", " can", " I", " help", " you", " today", "?")

const plainText = "Hello! How can I help you today?"

// TestRecordedStreams: each recorded chunk sequence, served by a real HTTP
// server flushing event by event, gives the expected events, final
// message or error, and number of requests.
func TestRecordedStreams(t *testing.T) {
	cases := []struct {
		name     string
		script   []reply
		want     []ev
		msg      string   // the final message, when the turn succeeds
		errHas   []string // parts of the error, when it fails
		requests int
	}{
		{name: "plain text", script: []reply{{file: "plain.sse"}}, want: plainDeltas, msg: plainText, requests: 1},
		{name: "tool calls split over chunks", script: []reply{{file: "tool_call.sse"}},
			want: append(deltas("Let me check."), toolCallEv("call_Wx1", "get_weather", `{"city":"Paris"}`),
				toolCallEv("call_Yz2", "get_time", `{"tz":"Europe/Paris"}`)),
			msg: "Let me check.", requests: 1},
		{name: "reasoning, CRLF lines, usage chunk", script: []reply{{file: "reasoning_crlf.sse"}},
			want: append([]ev{reasoningEv("User greets."), reasoningEv(" Reply briefly.")}, deltas("Hi", " there")...),
			msg:  "Hi there", requests: 1},
		{name: "no [DONE] after a finish_reason", script: []reply{{file: "no_done.sse"}},
			want: deltas("Short", " reply."), msg: "Short reply.", requests: 1},
		{name: "error object mid-stream", script: []reply{{file: "error_midstream.sse"}},
			want: deltas("The answer", " is"), errHas: []string{"error mid-stream", "Engine loop has died", "InternalServerError", "code 500"}, requests: 1},
		{name: "vLLM's older error shape mid-stream", script: []reply{{file: "error_object.sse"}},
			want: deltas("Partial"), errHas: []string{"error mid-stream", "CUDA out of memory"}, requests: 1},
		{name: "disconnect mid-stream", script: []reply{{file: "disconnect.sse", cut: true}},
			want: deltas("Once", " upon"), errHas: []string{"stream broke after 3 chunks", "unexpected EOF"}, requests: 1},
		{name: "cut short: no finish_reason, no [DONE]", script: []reply{{file: "truncated.sse"}},
			want: deltas("Never", " finis"), errHas: []string{"ended after 3 chunks without [DONE] or a finish_reason"}, requests: 1},
		{name: "500 then 429 before output, then the stream", script: []reply{
			{status: 500, body: `{"object":"error","message":"model is loading","type":"InternalServerError","code":500}`},
			{status: 429, header: map[string]string{"Retry-After": "0"}, body: `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`},
			{file: "plain.sse"}}, want: plainDeltas, msg: plainText, requests: 3},
		{name: "empty stream before output is retried", script: []reply{{}, {file: "plain.sse"}}, want: plainDeltas, msg: plainText, requests: 2},
		{name: "disconnect before output is retried", script: []reply{{cut: true}, {file: "plain.sse"}}, want: plainDeltas, msg: plainText, requests: 2},
		{name: "500 every time", script: []reply{{status: 500, body: `{"object":"error","message":"Engine loop has died","type":"InternalServerError","code":500}`}},
			errHas: []string{"500 Internal Server Error", "Engine loop has died", "3 attempts", "gave up after 3 attempts"}, requests: 3},
		{name: "400 is not retried", script: []reply{{status: 400, body: `{"error":{"message":"This model's maximum context length is 4096 tokens","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`}},
			errHas: []string{"400 Bad Request", "maximum context length", "context_length_exceeded"}, requests: 1},
		{name: "401 with Ollama's string error", script: []reply{{status: 401, body: `{"error":"unauthorized"}`}},
			errHas: []string{"401 Unauthorized", "unauthorized"}, requests: 1},
		{name: "a whole completion when the server ignores stream", script: []reply{{body: `{"id":"chatcmpl-9","object":"chat.completion","created":1764590000,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Checking.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]},"finish_reason":"tool_calls"}]}`}},
			want: append(deltas("Checking."), toolCallEv("call_1", "get_weather", `{"city":"Oslo"}`)), msg: "Checking.", requests: 1},
		{name: "an error object with status 200", script: []reply{{body: `{"object":"error","message":"The model does not exist.","type":"NotFoundError","param":null,"code":404}`}},
			errHas: []string{"the provider reported an error: The model does not exist. (type NotFoundError, code 404)"}, requests: 1},
		{name: "502 with a non-JSON body", script: []reply{{status: 502, body: "<html>Bad Gateway</html>"}},
			errHas: []string{"502 Bad Gateway", "<html>Bad Gateway</html>"}, requests: 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			up := newUpstream(t, c.script...)
			a := testAgent(t, up.baseURL(), nil)
			rec := &recEmit{}
			msg, err := a.Run(context.Background(), agent.Turn{Session: "s1", Input: textInput("hi")}, rec.emit)
			got := rec.events()
			if !slices.Equal(got, c.want) {
				t.Errorf("events:\n got %s\nwant %s", fmtEvs(got), fmtEvs(c.want))
			}
			if c.errHas == nil {
				if err != nil || msg != (agent.Message{Role: "assistant", Content: c.msg}) {
					t.Errorf("Run = %+v, %v; want message %q", msg, err, c.msg)
				}
			} else {
				if err == nil {
					t.Fatalf("Run = %+v, nil; want an error with %q", msg, c.errHas)
				}
				for _, s := range append(c.errHas, "openai: POST "+a.URL()) {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not say %q", err, s)
					}
				}
			}
			if n := len(up.requests()); n != c.requests {
				t.Errorf("%d requests, want %d", n, c.requests)
			}
		})
	}
}

// TestRequestCarriesHistoryInOrder: the request is a streamed chat
// completion for the model, with the API key, the system prompt, the
// history in order and the input last.
func TestRequestCarriesHistoryInOrder(t *testing.T) {
	up := newUpstream(t, reply{file: "plain.sse"})
	a := testAgent(t, up.baseURL(), func(c *Config) { c.SystemPrompt = "You are terse." })
	turn := agent.Turn{Session: "s1", Input: textInput("and now?"), History: []agent.Message{
		{Role: "user", Content: "first question"}, {Role: "assistant", Content: "first answer"},
		{Role: "user", Content: "second question"}, {Role: "assistant", Content: "second answer"},
	}}
	if _, err := a.Run(context.Background(), turn, (&recEmit{}).emit); err != nil {
		t.Fatal(err)
	}
	reqs := up.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	r := reqs[0]
	if r.header.Get("Authorization") != "Bearer sk-test" || r.header.Get("Content-Type") != "application/json" || r.header.Get("Accept") != "text/event-stream" {
		t.Errorf("headers = %v", r.header)
	}
	var body struct {
		Model    string          `json:"model"`
		Stream   bool            `json:"stream"`
		Messages []ChatMessage   `json:"messages"`
		Extra    json.RawMessage `json:"extra"`
	}
	if err := json.Unmarshal(r.body, &body); err != nil {
		t.Fatalf("body %s: %v", r.body, err)
	}
	want := []ChatMessage{
		{"system", "You are terse."},
		{"user", "first question"}, {"assistant", "first answer"},
		{"user", "second question"}, {"assistant", "second answer"},
		{"user", "and now?"},
	}
	if body.Model != "test-model" || !body.Stream || !reflect.DeepEqual(body.Messages, want) {
		t.Errorf("request body = %s\nwant model test-model, stream true, messages %v", r.body, want)
	}
}

// TestMessagesJoinRepeatedRoles: a failed turn's user message, left
// without a reply, is joined with the next one so roles alternate; an
// input without data.text is sent as its JSON text; no API key, no header.
func TestMessagesJoinRepeatedRoles(t *testing.T) {
	up := newUpstream(t, reply{file: "plain.sse"})
	a := testAgent(t, up.baseURL(), func(c *Config) { c.APIKey = "" })
	turn := agent.Turn{Input: agent.Input{Type: "message", Data: json.RawMessage(`{"n":1}`)}, History: []agent.Message{
		{Role: "user", Content: "q1"}, {Role: "assistant", Content: "a1"}, {Role: "user", Content: "q2 (failed)"},
	}}
	if _, err := a.Run(context.Background(), turn, (&recEmit{}).emit); err != nil {
		t.Fatal(err)
	}
	r := up.requests()[0]
	var body chatRequest
	_ = json.Unmarshal(r.body, &body)
	want := []ChatMessage{{"user", "q1"}, {"assistant", "a1"}, {"user", "q2 (failed)\n\n{\"n\":1}"}}
	if !reflect.DeepEqual(body.Messages, want) {
		t.Errorf("messages = %v, want %v", body.Messages, want)
	}
	if h := r.header.Get("Authorization"); h != "" {
		t.Errorf("Authorization = %q without an API key", h)
	}
}

// TestMessagesMapInterruptRole: the chat API knows system, user and
// assistant only; an interrupt in the history is sent as the assistant's
// question (joined to its partial reply), an unknown role as the user's.
func TestMessagesMapInterruptRole(t *testing.T) {
	a := &Agent{}
	turn := agent.Turn{Input: textInput("yes"), History: []agent.Message{
		{Role: "user", Content: "deploy?"},
		{Role: "assistant", Content: "checking", Stopped: true},
		{Role: agent.RoleInterrupt, Content: `{"id":"i1","kind":"approval","payload":{"q":"ok?"},"turn":{"epoch":1,"seq":1}}`},
		{Role: agent.RoleInterrupt, Content: `not json`},
		{Role: "tool", Content: "t"},
	}}
	want := []ChatMessage{
		{"user", "deploy?"},
		{"assistant", "checking\n\n[interrupt approval] {\"q\":\"ok?\"}\n\nnot json"},
		{"user", "t\n\nyes"},
	}
	if got := a.Messages(turn); !reflect.DeepEqual(got, want) {
		t.Fatalf("messages = %q, want %q", got, want)
	}
}

// TestConnectRefusedRetriedThenFails: a base URL nobody listens on is
// tried MaxAttempts times, then the turn fails naming the refusal.
func TestConnectRefusedRetriedThenFails(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	a := testAgent(t, "http://"+addr+"/v1", nil)
	rec := &recEmit{}
	_, err = a.Run(context.Background(), agent.Turn{Input: textInput("hi")}, rec.emit)
	if err == nil || !strings.Contains(err.Error(), "connection refused") || !strings.Contains(err.Error(), "gave up after 3 attempts") {
		t.Fatalf("Run error = %v, want connection refused after 3 attempts", err)
	}
	if len(rec.events()) != 0 {
		t.Fatalf("events %v", rec.events())
	}
}

// TestRetryBudget: a Retry-After past the budget ends the turn at once,
// saying so.
func TestRetryBudget(t *testing.T) {
	up := newUpstream(t, reply{status: 429, header: map[string]string{"Retry-After": "3600"}, body: `{"error":{"message":"slow down"}}`})
	a := testAgent(t, up.baseURL(), nil)
	_, err := a.Run(context.Background(), agent.Turn{Input: textInput("hi")}, (&recEmit{}).emit)
	if err == nil || !strings.Contains(err.Error(), "429 Too Many Requests: slow down") || !strings.Contains(err.Error(), "retry budget") {
		t.Fatalf("Run error = %v", err)
	}
	if n := len(up.requests()); n != 1 {
		t.Fatalf("%d requests, want 1", n)
	}
}

// TestCancelClosesRequest: cancelling the turn's context while the
// provider is still streaming closes the request (the server sees its
// client go away) and Run returns at once with the cause.
func TestCancelClosesRequest(t *testing.T) {
	up := newUpstream(t, reply{file: "disconnect.sse", hang: true})
	a := testAgent(t, up.baseURL(), nil)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	stop := errors.New("session fenced")
	rec := &recEmit{hook: func(e ev) {
		if e.Data == `{"text":" upon"}` {
			cancel(stop)
		}
	}}
	_, err := a.Run(ctx, agent.Turn{Input: textInput("hi")}, rec.emit)
	if !errors.Is(err, stop) || !strings.Contains(err.Error(), "turn stopped") {
		t.Fatalf("Run error = %v, want the turn's cause", err)
	}
	select {
	case <-up.gone:
	case <-time.After(30 * time.Second): // hang guard
		t.Fatal("the upstream never saw its client go away")
	}
}

// TestIdleTimeout: a provider that stops sending fails the turn with a
// message saying so. What is asserted is the message, never a duration: on
// a loaded machine the watchdog may also fire before the headers or
// between the first chunks, which the message then names instead.
func TestIdleTimeout(t *testing.T) {
	up := newUpstream(t, reply{file: "disconnect.sse", hang: true})
	a := testAgent(t, up.baseURL(), func(c *Config) { c.IdleTimeout = 300 * time.Millisecond })
	rec := &recEmit{}
	_, err := a.Run(context.Background(), agent.Turn{Input: textInput("hi")}, rec.emit)
	if err == nil || !(strings.Contains(err.Error(), "the stream sent nothing for 300ms after") || strings.Contains(err.Error(), "no response within 300ms")) {
		t.Fatalf("Run error = %v", err)
	}
	got, all := rec.events(), deltas("Once", " upon")
	if len(got) > len(all) || !slices.Equal(got, all[:len(got)]) {
		t.Fatalf("events %v, want a prefix of %v", got, all)
	}
}

// TestReplyBound: a reply over MaxReplyBytes fails the turn.
func TestReplyBound(t *testing.T) {
	up := newUpstream(t, reply{file: "plain.sse"})
	a := testAgent(t, up.baseURL(), func(c *Config) { c.MaxReplyBytes = 10 })
	_, err := a.Run(context.Background(), agent.Turn{Input: textInput("hi")}, (&recEmit{}).emit)
	if err == nil || !strings.Contains(err.Error(), "the reply is over 10 bytes") {
		t.Fatalf("Run error = %v", err)
	}
}

// TestEmitErrorStopsTheTurn: when emit refuses (the turn is stopping), Run
// returns that error and sends nothing more.
func TestEmitErrorStopsTheTurn(t *testing.T) {
	up := newUpstream(t, reply{file: "plain.sse"})
	a := testAgent(t, up.baseURL(), nil)
	stop := errors.New("turn stopped: fenced")
	n := 0
	_, err := a.Run(context.Background(), agent.Turn{Input: textInput("hi")}, func(context.Context, string, any) error {
		n++
		if n == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || n != 2 || len(up.requests()) != 1 {
		t.Fatalf("Run error = %v after %d emits and %d requests", err, n, len(up.requests()))
	}
}

// TestNewRefusesBadConfig: a missing model or base URL, or a base URL
// that is not an absolute http(s) URL, is refused with a message naming it.
func TestNewRefusesBadConfig(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Model: "m"}, "base URL is required"},
		{Config{BaseURL: "127.0.0.1:8000/v1", Model: "m"}, "not an absolute http(s) URL"},
		{Config{BaseURL: "ftp://h/v1", Model: "m"}, "not an absolute http(s) URL"},
		{Config{BaseURL: "http://h/v1?x=1", Model: "m"}, "query or fragment"},
		{Config{BaseURL: "http://h/v1"}, "model is required"},
	} {
		if _, err := New(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v) = %v, want %q", c.cfg, err, c.want)
		}
	}
	a, err := New(Config{BaseURL: "http://127.0.0.1:8000/v1/", Model: "m"})
	if err != nil || a.URL() != "http://127.0.0.1:8000/v1/chat/completions" {
		t.Fatalf("New = %v, %v", a, err)
	}
}

// Test404NamesTheBaseURL: a 404 (a base URL without /v1) says what to check.
func Test404NamesTheBaseURL(t *testing.T) {
	up := newUpstream(t, reply{file: "plain.sse"})
	a := testAgent(t, up.srv.URL, nil) // no /v1
	_, err := a.Run(context.Background(), agent.Turn{Input: textInput("hi")}, (&recEmit{}).emit)
	if err == nil || !strings.Contains(err.Error(), "404 Not Found") || !strings.Contains(err.Error(), "/v1 included") {
		t.Fatalf("Run error = %v", err)
	}
	if len(up.requests()) != 1 {
		t.Fatalf("requests %d", len(up.requests()))
	}
}
