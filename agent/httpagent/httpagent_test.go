package httpagent

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
)

// A turn streams the agent's deltas and its own event types to the
// session in order and ends with the agent's final message; the request is
// signed, carries the turn id (the input's position), the attempt, the
// input and the history, and the Idempotency-Key "<session>:<turn>".
func TestTurnStreamsEventsAndMessage(t *testing.T) {
	formats := map[string]func(w http.ResponseWriter){
		"sse": func(w http.ResponseWriter) {
			sse(w, `{"type":"delta","data":{"text":"Hel"}}`, `{"type":"tool_call","data":{"id":"c1","name":"lookup","input":{"q":"x"}}}`,
				`{"type":"delta","data":{"text":"lo"}}`, `{"type":"message","data":{"content":"Hello"}}`)
		},
		"sse_event_names": func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, ": keep-alive\n\nevent: delta\r\ndata: {\"text\":\"Hel\"}\r\n\r\nevent: tool_call\ndata: {\"id\":\"c1\",\n")
			fmt.Fprint(w, "data: \"name\":\"lookup\",\"input\":{\"q\":\"x\"}}\nid: 7\n\nevent: delta\rdata: {\"text\":\"lo\"}\r\revent: message\ndata: {\"content\":\"Hello\"}\n\n")
		},
		"ndjson": func(w http.ResponseWriter) {
			ndjson(w, `{"type":"delta","data":{"text":"Hel"}}`, ``, `{"type":"tool_call","data":{"id":"c1","name":"lookup","input":{"q":"x"}}}`,
				`{"type":"delta","data":{"text":"lo"}}`, `{"type":"done"}`)
		},
	}
	for name, write := range formats {
		t.Run(name, func(t *testing.T) {
			srv := newAgentServer(t, func(w http.ResponseWriter, _ *http.Request, _ Request) { write(w) })
			st := newStores()
			m := st.manager(t, "n1", newAgent(t, srv.URL, nil))
			first := post(t, m, "s1", "hi")
			st.rec.waitEvents(t, "s1", turnsEnded(1))
			acc := post(t, m, "s1", "again")
			evs := st.rec.waitEvents(t, "s1", turnsEnded(2))
			turn := lastTurn(evs)
			want := []string{"turn_started", "delta", "tool_call", "delta", "message", "turn_completed"}
			if !slices.Equal(types(turn), want) {
				t.Fatalf("events %v, want %v", types(turn), want)
			}
			var call map[string]any
			json.Unmarshal(turn[2].Data, &call)
			if call["name"] != "lookup" || call["id"] != "c1" {
				t.Fatalf("tool_call data %s", turn[2].Data)
			}
			completedWith(t, turn, "Hello")

			reqs := srv.requests()
			if len(reqs) != 2 {
				t.Fatalf("%d requests, want 2", len(reqs))
			}
			r := reqs[1]
			turnID := fmt.Sprintf("%d-%d", acc.Epoch, acc.Seq)
			if r.SigError != nil || r.Req.Turn != turnID || r.Key != "s1:"+turnID || r.Req.Session != "s1" || r.Req.Attempt != 1 || r.Req.Resume != nil {
				t.Fatalf("request %+v; want turn %s, key s1:%s, attempt 1, a valid signature", r, turnID, turnID)
			}
			if reqs[0].Req.Turn != fmt.Sprintf("%d-%d", first.Epoch, first.Seq) || len(reqs[0].Req.History) != 0 {
				t.Fatalf("first request %+v", reqs[0])
			}
			var in struct{ Text string }
			json.Unmarshal(r.Req.Input.Data, &in)
			h := r.Req.History
			if r.Req.Input.Type != "user_message" || in.Text != "again" || len(h) != 2 || h[0] != (HistoryMessage{Role: "user", Content: "hi"}) || h[1] != (HistoryMessage{Role: "assistant", Content: "Hello"}) {
				t.Fatalf("request input %+v history %+v", r.Req.Input, h)
			}
		})
	}
}

// failureCase is one agent failure: the agent server answers with fail
// for the first turn; the turn must end with the outcome check, and the
// next turn (the server healthy again) must complete.
type failureCase struct {
	name string
	edit func(*Config)
	fail func(w http.ResponseWriter, r *http.Request)
	// check asserts the failed turn's events.
	check func(t *testing.T, turn []agent.Event)
}

func runFailure(t *testing.T, c failureCase) {
	var failing atomic.Bool
	failing.Store(true)
	srv := newAgentServer(t, func(w http.ResponseWriter, r *http.Request, req Request) {
		if failing.Load() {
			c.fail(w, r)
			return
		}
		okStream(w, r, req)
	})
	st := newStores()
	m := st.manager(t, "n1", newAgent(t, srv.URL, c.edit))
	post(t, m, "s1", "one")
	c.check(t, lastTurn(st.rec.waitEvents(t, "s1", turnsEnded(1))))
	failing.Store(false)
	post(t, m, "s1", "two")
	completedWith(t, st.rec.waitEvents(t, "s1", turnsEnded(2)), "hello world")
}

// Each agent failure ends the turn in a documented event (turn_failed with
// a clear error, docs/AGENT_PROTOCOL.md "Failures") and the session keeps
// working: the next turn runs.
func TestAgentFailures(t *testing.T) {
	onlyFailed := func(parts ...string) func(t *testing.T, turn []agent.Event) {
		return func(t *testing.T, turn []agent.Event) {
			t.Helper()
			if want := []string{"turn_started", "turn_failed"}; !slices.Equal(types(turn), want) {
				t.Fatalf("events %v, want %v", types(turn), want)
			}
			failedWith(t, turn, parts...)
		}
	}
	cases := []failureCase{
		{
			name: "500_always",
			fail: func(w http.ResponseWriter, _ *http.Request) {
				http.Error(w, "model overloaded", http.StatusInternalServerError)
			},
			edit:  func(c *Config) { c.RetryBudget = 300 * time.Millisecond },
			check: onlyFailed("gave up after", "AGENT_RETRY_BUDGET", "500 Internal Server Error", "model overloaded"),
		},
		{
			name:  "400_not_retried",
			fail:  func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "no such tool", http.StatusBadRequest) },
			check: onlyFailed("400 Bad Request", "no such tool"),
		},
		{
			name: "disconnect_mid_stream",
			fail: func(w http.ResponseWriter, _ *http.Request) {
				sse(w, `{"type":"delta","data":{"text":"partial "}}`)
				conn, _, err := http.NewResponseController(w).Hijack()
				if err == nil {
					conn.Close() // the chunked body ends without its last chunk
				}
			},
			check: func(t *testing.T, turn []agent.Event) {
				if want := []string{"turn_started", "delta", "turn_failed"}; !slices.Equal(types(turn), want) {
					t.Fatalf("events %v, want %v", types(turn), want)
				}
				failedWith(t, turn, "stream broke")
			},
		},
		{
			name: "end_without_done",
			fail: func(w http.ResponseWriter, _ *http.Request) {
				sse(w, `{"type":"delta","data":{"text":"partial "}}`)
			},
			check: func(t *testing.T, turn []agent.Event) {
				failedWith(t, turn, "ended without a message or done event")
			},
		},
		{
			name: "event_over_bound",
			edit: func(c *Config) { c.MaxEventBytes = 1024 },
			fail: func(w http.ResponseWriter, _ *http.Request) {
				sse(w, `{"type":"delta","data":{"text":"`+strings.Repeat("x", 2000)+`"}}`)
			},
			check: onlyFailed("AGENT_MAX_EVENT_BYTES", "1024"),
		},
		{
			name: "ndjson_line_over_bound",
			edit: func(c *Config) { c.MaxEventBytes = 1024 },
			fail: func(w http.ResponseWriter, _ *http.Request) {
				ndjson(w, `{"type":"delta","data":{"text":"`+strings.Repeat("x", 2000)+`"}}`)
			},
			check: onlyFailed("AGENT_MAX_EVENT_BYTES"),
		},
		{
			name: "reply_over_bound",
			edit: func(c *Config) { c.MaxReplyBytes = 4096 },
			fail: func(w http.ResponseWriter, _ *http.Request) {
				ev := `{"type":"delta","data":{"text":"` + strings.Repeat("y", 1000) + `"}}`
				sse(w, ev, ev, ev, ev, ev, `{"type":"done"}`)
			},
			check: func(t *testing.T, turn []agent.Event) {
				failedWith(t, turn, "AGENT_MAX_REPLY_BYTES (4096)")
				if n := len(turn); n > 2+4 {
					t.Fatalf("%d events: more deltas than fit the reply bound", n)
				}
			},
		},
		{
			name: "reserved_type",
			fail: func(w http.ResponseWriter, _ *http.Request) {
				sse(w, `{"type":"turn_completed","data":{}}`, `{"type":"done"}`)
			},
			check: onlyFailed(`"turn_completed" is reserved`),
		},
		{
			name: "invalid_type",
			fail: func(w http.ResponseWriter, _ *http.Request) {
				sse(w, `{"type":"Tool Call","data":{}}`)
			},
			check: onlyFailed(`"Tool Call" is not a valid type`),
		},
		{
			name: "agent_error_event",
			fail: func(w http.ResponseWriter, _ *http.Request) {
				sse(w, `{"type":"delta","data":{"text":"a"}}`, `{"type":"error","data":{"message":"rate limited"}}`)
			},
			check: func(t *testing.T, turn []agent.Event) {
				failedWith(t, turn, "the agent reported an error: rate limited")
			},
		},
		{
			name: "invalid_sse_json",
			fail: func(w http.ResponseWriter, _ *http.Request) {
				sse(w, `{"type":"delta","data":{"text":"a"`)
			},
			check: onlyFailed("not valid JSON"),
		},
		{
			name: "invalid_ndjson",
			fail: func(w http.ResponseWriter, _ *http.Request) {
				ndjson(w, `{"type":"delta","data":{"text":"a"}}`, `not json`)
			},
			check: func(t *testing.T, turn []agent.Event) {
				failedWith(t, turn, "not valid JSON", "not json")
			},
		},
		{
			name: "delta_without_text",
			fail: func(w http.ResponseWriter, _ *http.Request) {
				ndjson(w, `{"type":"delta","data":{"txt":"a"}}`)
			},
			check: onlyFailed(`a delta event needs data {"text": string}`),
		},
		{
			name: "data_not_storable",
			fail: func(w http.ResponseWriter, _ *http.Request) {
				ndjson(w, `{"type":"status","data":{"n":1e9999}}`)
			},
			check: onlyFailed("cannot be stored", "input rule number"),
		},
		{
			name: "wrong_content_type",
			fail: func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "text/html")
				fmt.Fprint(w, "<html>")
			},
			check: onlyFailed(`Content-Type "text/html"`),
		},
		{
			name: "hanging_agent_turn_timeout",
			edit: func(c *Config) { c.TurnTimeout = 300 * time.Millisecond },
			fail: func(w http.ResponseWriter, r *http.Request) {
				sse(w, `{"type":"delta","data":{"text":"thinking"}}`)
				<-r.Context().Done() // hangs until Relay closes the request
			},
			check: func(t *testing.T, turn []agent.Event) {
				failedWith(t, turn, "AGENT_TURN_TIMEOUT (300ms)")
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { runFailure(t, c) })
	}
}

// A 500 (and a stream broken before its first event) before any output is
// retried: the turn completes on a later try, with nothing duplicated.
func TestRetryBeforeFirstEvent(t *testing.T) {
	var tries atomic.Int32
	srv := newAgentServer(t, func(w http.ResponseWriter, r *http.Request, req Request) {
		switch tries.Add(1) {
		case 1:
			http.Error(w, "warming up", http.StatusServiceUnavailable)
		case 2:
			w.Header().Set("Content-Type", "text/event-stream")
			w.(http.Flusher).Flush()
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				conn.Close()
			}
		default:
			okStream(w, r, req)
		}
	})
	st := newStores()
	m := st.manager(t, "n1", newAgent(t, srv.URL, func(c *Config) { c.RetryBudget = hangGuard }))
	post(t, m, "s1", "one")
	evs := lastTurn(st.rec.waitEvents(t, "s1", turnsEnded(1)))
	if want := []string{"turn_started", "delta", "delta", "message", "turn_completed"}; !slices.Equal(types(evs), want) {
		t.Fatalf("events %v, want %v", types(evs), want)
	}
	completedWith(t, evs, "hello world")
	reqs := srv.requests()
	if len(reqs) != 3 || reqs[0].Req.Turn != reqs[2].Req.Turn || reqs[0].Key != reqs[2].Key {
		t.Fatalf("requests %+v: want 3 tries of one turn with one idempotency key", reqs)
	}
}

// A refused connection is retried within the budget, then the turn fails;
// the next turn (the agent reachable again) runs.
func TestConnectRefused(t *testing.T) {
	srv := newAgentServer(t, okStream)
	dead := deadAddr(t)
	var refuse atomic.Bool
	refuse.Store(true)
	var dials atomic.Int32
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if refuse.Load() {
			dials.Add(1)
			addr = dead
		}
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	t.Cleanup(tr.CloseIdleConnections)
	st := newStores()
	m := st.manager(t, "n1", newAgent(t, srv.URL, func(c *Config) {
		c.RetryBudget = 2 * time.Second // tries at about 0, 0.1, 0.3, 0.7 and 1.5 s
		c.Client = &http.Client{Transport: tr}
	}))
	post(t, m, "s1", "one")
	failedWith(t, st.rec.waitEvents(t, "s1", turnsEnded(1)), "gave up after", "connection refused")
	if n := dials.Load(); n < 2 {
		t.Fatalf("%d dials, want the refused connection retried", n)
	}
	refuse.Store(false)
	post(t, m, "s1", "two")
	completedWith(t, st.rec.waitEvents(t, "s1", turnsEnded(2)), "hello world")
}

// Draining the node past its window cancels the running turn: the agent's
// request is closed (the agent server sees the disconnect), and the next
// owner resumes the turn, sending the same turn id with attempt 2 and the
// resume information (partial text, journal cursor); the final message is
// the whole reply.
func TestDrainClosesRequestAndNextOwnerResumes(t *testing.T) {
	forEachStores(t, testDrainClosesRequestAndNextOwnerResumes)
}

func testDrainClosesRequestAndNextOwnerResumes(t *testing.T, st *stores) {
	disconnected := make(chan struct{})
	srv := newAgentServer(t, func(w http.ResponseWriter, r *http.Request, req Request) {
		if req.Resume == nil {
			sse(w, `{"type":"delta","data":{"text":"one "}}`)
			<-r.Context().Done()
			close(disconnected)
			return
		}
		sse(w, `{"type":"delta","data":{"text":"two"}}`, `{"type":"message","data":{"content":"`+req.Resume.Text+`two"}}`)
	})
	a := st.manager(t, "a", newAgent(t, srv.URL, nil))
	acc := post(t, a, "s1", "count")
	st.rec.waitEvents(t, "s1", func(evs []agent.Event) bool { return slices.Contains(types(evs), "delta") })
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the drain window is over at once: the running turn is handed over
	if err := a.Drain(ctx); err != nil {
		t.Fatalf("drain past its window: %v (a hand-over is not a failure)", err)
	}
	if n := a.Stats().HandOvers; n != 1 {
		t.Fatalf("drain past its window handed over %d turns, want 1", n)
	}
	select {
	case <-disconnected:
	case <-time.After(hangGuard):
		t.Fatal("hang guard: the agent never saw its request closed")
	}

	b := st.manager(t, "b", newAgent(t, srv.URL, nil))
	rctx, rcancel := context.WithTimeout(context.Background(), hangGuard)
	defer rcancel()
	if n, err := b.Recover(rctx, 10); err != nil || n != 1 {
		t.Fatalf("recover = %d, %v; want 1", n, err)
	}
	evs := st.rec.waitEvents(t, "s1", turnsEnded(1))
	completedWith(t, evs, "one two")
	if got, want := types(evs), []string{"user_event", "turn_started", "delta", "turn_resumed", "delta", "message", "turn_completed"}; !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	reqs := srv.requests()
	turnID := fmt.Sprintf("%d-%d", acc.Epoch, acc.Seq)
	if len(reqs) != 2 || reqs[1].Req.Turn != turnID || reqs[1].Key != "s1:"+turnID || reqs[1].Req.Attempt != 2 || reqs[1].SigError != nil {
		t.Fatalf("requests %+v; want the resumed run of turn %s as attempt 2", reqs, turnID)
	}
	res := reqs[1].Req.Resume
	if res == nil || res.Text != "one " || res.From != evs[2].Pos().String() || len(res.Events) != 2 {
		t.Fatalf("resume %+v; want text %q from %v with the journal's 2 events", res, "one ", evs[2].Pos())
	}
}

// Cancelling the turn's context (a fence, a stop, a shutdown) closes the
// agent's request; Run returns the context's cause.
func TestCancelClosesRequest(t *testing.T) {
	disconnected := make(chan struct{})
	srv := newAgentServer(t, func(w http.ResponseWriter, r *http.Request, req Request) {
		sse(w, `{"type":"delta","data":{"text":"one "}}`)
		<-r.Context().Done()
		close(disconnected)
	})
	ag := newAgent(t, srv.URL, nil)
	ctx, cancel := context.WithCancelCause(context.Background())
	fenced := fmt.Errorf("fenced by epoch 2")
	done := make(chan error, 1)
	go func() {
		_, err := ag.Run(ctx, agent.Turn{Session: "s1", ID: agent.Position{Epoch: 1, Seq: 1}, Attempt: 1}, func(context.Context, string, any) error {
			cancel(fenced)
			return nil
		})
		done <- err
	}()
	select {
	case <-disconnected:
	case <-time.After(hangGuard):
		t.Fatal("hang guard: the agent never saw its request closed")
	}
	if err := <-done; err != fenced {
		t.Fatalf("Run = %v, want the cancel cause", err)
	}
}

// Verify accepts what Sign produced and refuses a changed body, a wrong
// secret and an old timestamp.
func TestSignVerify(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	body := []byte(`{"session":"s1"}`)
	sig := Sign("k", now.Unix(), body)
	if err := Verify("k", "1700000000", sig, body, now, 0); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"body":   Verify("k", "1700000000", sig, []byte(`{"session":"s2"}`), now, 0),
		"secret": Verify("k2", "1700000000", sig, body, now, 0),
		"old":    Verify("k", "1700000000", sig, body, now.Add(10*time.Minute), 0),
		"ts":     Verify("k", "x", sig, body, now, 0),
	} {
		if err == nil {
			t.Errorf("%s: Verify accepted", name)
		}
	}
	// The documented example (docs/AGENT_PROTOCOL.md) holds.
	if got := Sign("my-agent-secret", 1764590400, []byte(`{"a":1}`)); got != docExampleSig {
		t.Errorf("Sign = %s, want %s", got, docExampleSig)
	}
}

// docExampleSig is the signature docs/AGENT_PROTOCOL.md shows for secret
// my-agent-secret, timestamp 1764590400 and body {"a":1}.
const docExampleSig = "v1=f874c31f595ac18643d39228e9950972ac6a5de83f4f59248f46aa23fdce4287"
