package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// reply is what the upstream answers to one request.
type reply struct {
	status int               // 0: 200 with the SSE file
	header map[string]string // extra response headers
	body   string            // a JSON body instead of the stream (status 200 unless set)
	file   string            // testdata file streamed as text/event-stream
	cut    bool              // after the file, drop the connection (no chunked terminator)
	hang   bool              // after the file, block until the client goes away
}

// upstream is a real local HTTP server speaking the chat completions wire
// format: it answers the scripted replies in order (the last one repeats),
// streaming an SSE file event by event with a flush after each, and keeps
// every request body and header it received.
type upstream struct {
	t      *testing.T
	srv    *httptest.Server
	mu     sync.Mutex
	script []reply
	reqs   []recorded
	gone   chan struct{} // closed when a hanging request's client went away
	goneMu sync.Once
}

type recorded struct {
	header http.Header
	body   []byte
}

func newUpstream(t *testing.T, script ...reply) *upstream {
	t.Helper()
	u := &upstream{t: t, script: script, gone: make(chan struct{})}
	u.srv = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) baseURL() string { return u.srv.URL + "/v1" }

func (u *upstream) serve(w http.ResponseWriter, r *http.Request) {
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(r.Body)
	u.mu.Lock()
	n := len(u.reqs)
	u.reqs = append(u.reqs, recorded{header: r.Header.Clone(), body: buf.Bytes()})
	rep := u.script[min(n, len(u.script)-1)]
	u.mu.Unlock()
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		http.Error(w, `{"error":{"message":"no route `+r.URL.Path+`","type":"invalid_request_error"}}`, http.StatusNotFound)
		return
	}
	for k, v := range rep.header {
		w.Header().Set(k, v)
	}
	if (rep.status != 0 && rep.status != http.StatusOK) || rep.body != "" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(max(rep.status, http.StatusOK))
		_, _ = w.Write([]byte(rep.body))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fl := w.(http.Flusher)
	fl.Flush()
	if rep.file != "" {
		for _, ev := range sseEvents(u.t, rep.file) {
			if _, err := w.Write(ev); err != nil {
				return
			}
			fl.Flush()
		}
	}
	switch {
	case rep.cut:
		panic(http.ErrAbortHandler) // closes the connection mid-body
	case rep.hang:
		<-r.Context().Done()
		u.goneMu.Do(func() { close(u.gone) })
	}
}

func (u *upstream) requests() []recorded {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]recorded(nil), u.reqs...)
}

// sseEvents splits a testdata SSE file into its events, each with its
// blank line, so the server writes and flushes them one by one.
func sseEvents(t *testing.T, name string) [][]byte {
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Error(err)
		return nil
	}
	sep := []byte("\n\n")
	if bytes.Contains(raw, []byte("\r\n\r\n")) {
		sep = []byte("\r\n\r\n")
	}
	var out [][]byte
	for len(raw) > 0 {
		i := bytes.Index(raw, sep)
		if i < 0 {
			out = append(out, raw)
			break
		}
		out = append(out, raw[:i+len(sep)])
		raw = raw[i+len(sep):]
	}
	return out
}

// ev is an event the agent emitted, its data as the actor encodes it.
type ev struct {
	Type string
	Data string
}

func (e ev) String() string { return e.Type + " " + e.Data }

// recEmit is an Emit that keeps what it is given (JSON-encoded, as the
// session's actor does) and calls hook, if set, after each event.
type recEmit struct {
	mu   sync.Mutex
	evs  []ev
	hook func(ev)
}

func (r *recEmit) emit(_ context.Context, typ string, data any) error {
	raw, err := json.Marshal(data)
	if err != nil {
		return err
	}
	e := ev{Type: typ, Data: string(raw)}
	r.mu.Lock()
	r.evs = append(r.evs, e)
	hook := r.hook
	r.mu.Unlock()
	if hook != nil {
		hook(e)
	}
	return nil
}

func (r *recEmit) events() []ev {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]ev(nil), r.evs...)
}

// testAgent is an Agent on u with fast retries and generous budgets (the
// budgets are hang guards, never what a test asserts).
func testAgent(t *testing.T, base string, mut func(*Config)) *Agent {
	t.Helper()
	cfg := Config{BaseURL: base, APIKey: "sk-test", Model: "test-model", RetryFirst: time.Millisecond, RetryMax: time.Millisecond,
		RetryBudget: 30 * time.Second, IdleTimeout: 60 * time.Second, MaxAttempts: 3}
	if mut != nil {
		mut(&cfg)
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func textInput(s string) agent.Input {
	d, _ := json.Marshal(map[string]string{"text": s})
	return agent.Input{Type: "message", Data: d}
}

func deltas(texts ...string) []ev {
	out := make([]ev, len(texts))
	for i, s := range texts {
		d, _ := json.Marshal(textData{Text: s})
		out[i] = ev{Type: agent.TypeDelta, Data: string(d)}
	}
	return out
}

func toolCallEv(id, name, args string) ev {
	d, _ := json.Marshal(ToolCall{ID: id, Type: "function", Function: ToolFunction{Name: name, Arguments: args}})
	return ev{Type: TypeToolCall, Data: string(d)}
}

func reasoningEv(s string) ev {
	d, _ := json.Marshal(textData{Text: s})
	return ev{Type: TypeReasoning, Data: string(d)}
}

func fmtEvs(evs []ev) string { return fmt.Sprint(evs) }
