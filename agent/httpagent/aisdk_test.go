package httpagent

import (
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"testing"

	"github.com/relaygw/relay/agent"
)

// serveRecording answers every turn with a recorded Vercel AI SDK UI
// message stream, as an AI SDK route handler (toUIMessageStreamResponse)
// sends it; header selects whether the protocol header is set (else the
// stream is recognized by its chunks).
func serveRecording(t *testing.T, file string, header bool) *agentServer {
	t.Helper()
	rec, err := os.ReadFile("testdata/" + file)
	if err != nil {
		t.Fatal(err)
	}
	return newAgentServer(t, func(w http.ResponseWriter, _ *http.Request, _ Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		if header {
			w.Header().Set(HeaderAISDKStream, "v1")
		}
		w.Write(rec)
	})
}

// A recorded AI SDK stream with text, a tool call with its output and
// reasoning becomes delta, tool_call, tool_result and reasoning events, and
// the final message is the concatenated text.
func TestAISDKStreamToolCall(t *testing.T) {
	for _, header := range []bool{true, false} {
		t.Run(map[bool]string{true: "header", false: "chunk_shape"}[header], func(t *testing.T) {
			srv := serveRecording(t, "aisdk-tool-call.sse", header)
			st := newStores()
			m := st.manager(t, "n1", newAgent(t, srv.URL, nil))
			post(t, m, "s1", "weather in Paris?")
			turn := lastTurn(st.rec.waitEvents(t, "s1", turnsEnded(1)))
			want := []string{"turn_started", "delta", "delta", "tool_call", "tool_result", "reasoning", "delta", "message", "turn_completed"}
			if !slices.Equal(types(turn), want) {
				t.Fatalf("events %v, want %v%s", types(turn), want, summary(turn))
			}
			for i, w := range map[int]string{
				1: `{"text":"Let me "}`,
				3: `{"id":"call_W1","input":{"city":"Paris"},"name":"getWeather"}`,
				4: `{"id":"call_W1","name":"getWeather","output":{"tempC":18,"sky":"cloudy"}}`,
				5: `{"text":"18 C is mild."}`,
			} {
				if !jsonEqual(t, turn[i].Data, w) {
					t.Fatalf("event %d (%s) data %s, want %s", i, turn[i].Type, turn[i].Data, w)
				}
			}
			completedWith(t, turn, "Let me check the weather. It is 18°C and cloudy in Paris.")
		})
	}
}

// A recorded AI SDK stream that fails (a tool error, then an error chunk)
// streams what came before and ends the turn as turn_failed with the
// stream's errorText; the session's next turn runs.
func TestAISDKStreamError(t *testing.T) {
	srv := serveRecording(t, "aisdk-error.sse", true)
	st := newStores()
	m := st.manager(t, "n1", newAgent(t, srv.URL, nil))
	post(t, m, "s1", "search relay")
	turn := lastTurn(st.rec.waitEvents(t, "s1", turnsEnded(1)))
	if want := []string{"turn_started", "delta", "tool_call", "tool_result", "turn_failed"}; !slices.Equal(types(turn), want) {
		t.Fatalf("events %v, want %v%s", types(turn), want, summary(turn))
	}
	if w := `{"id":"call_X","name":"search","error":"search backend unavailable"}`; !jsonEqual(t, turn[3].Data, w) {
		t.Fatalf("tool_result data %s, want %s", turn[3].Data, w)
	}
	failedWith(t, turn, "the agent reported an error: Rate limit exceeded for model")
	post(t, m, "s1", "again")
	if evs := st.rec.waitEvents(t, "s1", turnsEnded(2)); evs[len(evs)-1].Type != agent.TypeTurnFailed || len(lastTurn(evs)) != 5 {
		t.Fatalf("the next turn did not run the same way: %s", summary(lastTurn(evs)))
	}
}

func jsonEqual(t *testing.T, got json.RawMessage, want string) bool {
	t.Helper()
	var a, b any
	if err := json.Unmarshal(got, &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(want), &b); err != nil {
		t.Fatal(err)
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}
