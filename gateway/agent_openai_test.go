package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/testkit/phxtest"
)

// TestConfigAgentOpenAI: AGENT=openai without OPENAI_BASE_URL or
// OPENAI_MODEL, with a base URL that is not an absolute http(s) URL, or an
// unknown AGENT, is refused naming the setting; a complete one is valid.
func TestConfigAgentOpenAI(t *testing.T) {
	cases := []struct {
		name, agent, base, model string
		want                     []string // nil: valid
	}{
		{name: "echo default", agent: "echo"},
		{name: "complete", agent: "openai", base: "http://127.0.0.1:8000/v1", model: "m"},
		{name: "nothing", agent: "openai", want: []string{"AGENT=openai needs", "OPENAI_BASE_URL", "OPENAI_MODEL"}},
		{name: "no model", agent: "openai", base: "http://127.0.0.1:8000/v1", want: []string{"AGENT=openai needs OPENAI_MODEL"}},
		{name: "no base URL", agent: "openai", model: "m", want: []string{"AGENT=openai needs OPENAI_BASE_URL", "/v1 included"}},
		{name: "relative base URL", agent: "openai", base: "127.0.0.1:8000/v1", model: "m", want: []string{"OPENAI_BASE_URL", "not an absolute http(s) URL"}},
		{name: "unknown agent", agent: "gpt", want: []string{`AGENT="gpt" is not an agent backend`, "openai"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Agent, cfg.OpenAIBaseURL, cfg.OpenAIModel = c.agent, c.base, c.model
			err := cfg.Validate()
			if c.want == nil {
				if err != nil {
					t.Fatalf("Validate() = %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate() = nil, want a refusal")
			}
			for _, s := range c.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
		})
	}
}

// sseUpstream is a local chat completions server: request i gets
// replies[i] (the last repeats), a testdata SSE file of agent/openai
// streamed event by event, or a status with a JSON error body.
type sseUpstream struct {
	mu      sync.Mutex
	bodies  [][]byte
	replies []upstreamReply
}

type upstreamReply struct {
	file   string
	status int
	body   string
}

func (u *sseUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(r.Body)
	u.mu.Lock()
	rep := u.replies[min(len(u.bodies), len(u.replies)-1)]
	u.bodies = append(u.bodies, buf.Bytes())
	u.mu.Unlock()
	if r.URL.Path != "/v1/chat/completions" {
		http.NotFound(w, r)
		return
	}
	if rep.status != 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rep.status)
		_, _ = w.Write([]byte(rep.body))
		return
	}
	raw, err := os.ReadFile("../agent/openai/testdata/" + rep.file)
	if err != nil {
		http.Error(w, err.Error(), 500)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	for _, ev := range bytes.SplitAfter(raw, []byte("\n\n")) {
		_, _ = w.Write(ev)
		w.(http.Flusher).Flush()
	}
}

// TestGatewayOpenAIAgent: a node with AGENT=openai streams a recorded
// completion (text, then two tool calls split over chunks) to a joined
// socket as delta, tool_call, tool_call, message, turn_completed; the next
// turn sends the first turn's input and reply as history; a provider
// error ends that turn as turn_failed with the provider's message.
func TestGatewayOpenAIAgent(t *testing.T) {
	up := &sseUpstream{replies: []upstreamReply{{file: "tool_call.sse"},
		{status: 400, body: `{"error":{"message":"This model's maximum context length is 4096 tokens","type":"invalid_request_error","code":"context_length_exceeded"}}`}}}
	usrv := httptest.NewServer(up)
	defer usrv.Close()
	n, srv, _ := testNode(t, func(c *Config) {
		c.Agent, c.OpenAIBaseURL, c.OpenAIModel, c.SystemPrompt = "openai", usrv.URL+"/v1", "test-model", "Be brief."
	})
	tok, err := n.Auth().Mint("u", []string{"*"}, 3600e9)
	if err != nil {
		t.Fatal(err)
	}
	ws := phxtest.DialT(t, phxtest.URL(srv.URL, tok))
	ws.Join("session:oa1", map[string]any{})

	if code, _, body := do(t, "POST", srv.URL+"/api/sessions/oa1/events", testAPIKey, "", `{"data":{"text":"weather in Paris?"}}`); code != 202 {
		t.Fatalf("POST: %d %v", code, body)
	}
	var types []string
	var tools []string
	for _, ev := range ws.EventsUntil(agent.TypeTurnCompleted) {
		types = append(types, ev.Type)
		if ev.Type == "tool_call" {
			var tc struct {
				Function struct{ Name, Arguments string }
			}
			_ = json.Unmarshal(ev.Data, &tc)
			tools = append(tools, tc.Function.Name+" "+tc.Function.Arguments)
		}
	}
	want := "user_event turn_started delta tool_call tool_call message turn_completed"
	if got := strings.Join(types, " "); got != want {
		t.Fatalf("events %s, want %s", got, want)
	}
	if got := strings.Join(tools, "; "); got != `get_weather {"city":"Paris"}; get_time {"tz":"Europe/Paris"}` {
		t.Fatalf("tool calls %s", got)
	}

	if code, _, body := do(t, "POST", srv.URL+"/api/sessions/oa1/events", testAPIKey, "", `{"data":{"text":"and tomorrow?"}}`); code != 202 {
		t.Fatalf("POST: %d %v", code, body)
	}
	evs := ws.EventsUntil(agent.TypeTurnFailed)
	var failed struct{ Error string }
	_ = json.Unmarshal(evs[len(evs)-1].Data, &failed)
	if !strings.Contains(failed.Error, "400 Bad Request: This model's maximum context length is 4096 tokens") {
		t.Fatalf("turn_failed error %q", failed.Error)
	}
	up.mu.Lock()
	second := up.bodies[1]
	up.mu.Unlock()
	var req struct {
		Model    string
		Stream   bool
		Messages []struct{ Role, Content string }
	}
	if err := json.Unmarshal(second, &req); err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for _, m := range req.Messages {
		msgs = append(msgs, m.Role+": "+m.Content)
	}
	if got, want := strings.Join(msgs, " | "), "system: Be brief. | user: weather in Paris? | assistant: Let me check. | user: and tomorrow?"; got != want || req.Model != "test-model" || !req.Stream {
		t.Fatalf("second request: model %q stream %v messages %s, want %s", req.Model, req.Stream, got, want)
	}
}
