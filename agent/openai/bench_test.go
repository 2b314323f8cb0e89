package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/session"
)

// benchDeltas is the number of content chunks of a benchmark reply.
const benchDeltas = 100

// instantStream is a chat completions body of n content chunks of one
// word each (vLLM's chunk shape), a finish_reason and [DONE].
func instantStream(n int) []byte {
	var b bytes.Buffer
	chunk := func(delta map[string]any, finish any) {
		c, _ := json.Marshal(map[string]any{"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1764590000,
			"model": "bench", "choices": []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}}})
		b.WriteString("data: ")
		b.Write(c)
		b.WriteString("\n\n")
	}
	chunk(map[string]any{"role": "assistant", "content": ""}, nil)
	for i := range n {
		chunk(map[string]any{"content": fmt.Sprintf(" w%d", i)}, nil)
	}
	chunk(map[string]any{}, "stop")
	b.WriteString("data: [DONE]\n\n")
	return b.Bytes()
}

// instantServer streams body at once to every request (flushed per chunk,
// as a model server does).
func instantServer(b *testing.B, body []byte) *httptest.Server {
	events := bytes.SplitAfter(body, []byte("\n\n"))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = r.Body.Read(make([]byte, 4096))
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		for _, ev := range events {
			_, _ = w.Write(ev)
			fl.Flush()
		}
	}))
	b.Cleanup(srv.Close)
	return srv
}

// directAgent emits the same deltas as instantStream with no HTTP: the
// baseline the backend's overhead is measured against.
type directAgent struct{ n int }

func (d directAgent) Run(ctx context.Context, _ agent.Turn, emit agent.Emit) (agent.Message, error) {
	for i := range d.n {
		if err := emit(ctx, agent.TypeDelta, textData{Text: fmt.Sprintf(" w%d", i)}); err != nil {
			return agent.Message{}, err
		}
	}
	return agent.Message{Role: "assistant", Content: "x"}, nil
}

// endPublisher signals each turn's end.
type endPublisher struct{ done chan struct{} }

func (p endPublisher) Publish(_ context.Context, e agent.Event) error {
	if e.Type == agent.TypeTurnCompleted || e.Type == agent.TypeTurnFailed {
		p.done <- struct{}{}
	}
	return nil
}

// BenchmarkOpenAIStream measures a turn of benchDeltas content chunks from
// a local server that streams instantly, reporting ns/delta:
//
//   - parse: the SSE reader and chunk decoder over the body in memory;
//   - agent: Agent.Run over loopback HTTP (request, stream, parse), emit a
//     no-op;
//   - session/direct and session/openai: whole turns through a
//     session.Manager on memory stores without a replay log (turn_started,
//     every delta published, the turn's end, message, turn_completed; the
//     memory log's append cost grows with REPLAY_MAX_LEN once a session's
//     log is full and would swamp the figure), with an
//     agent that emits the deltas itself and with this backend. Their
//     difference per delta is what the backend adds to a turn.
func BenchmarkOpenAIStream(b *testing.B) {
	body := instantStream(benchDeltas)
	noop := func(context.Context, string, any) error { return nil }
	// perDelta reports wall time and the process's CPU time (user +
	// system, the local server's included) per delta since start/cpu0.
	perDelta := func(b *testing.B, start time.Time, cpu0 time.Duration, turns int) {
		el := time.Since(start)
		b.ReportMetric(float64(el.Nanoseconds())/float64(turns*benchDeltas), "ns/delta")
		b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(turns*benchDeltas), "cpu-ns/delta")
		b.ReportMetric(float64(turns)/el.Seconds(), "turns/s")
	}
	b.Run("parse", func(b *testing.B) {
		start, cpu0, n := time.Now(), cpuTime(), 0
		for b.Loop() {
			st := newStream(1 << 20)
			if err := st.read(context.Background(), bytes.NewReader(body), 1<<20, noop); err != nil {
				b.Fatal(err)
			}
			n++
		}
		perDelta(b, start, cpu0, n)
	})
	b.Run("agent", func(b *testing.B) {
		srv := instantServer(b, body)
		a, err := New(Config{BaseURL: srv.URL + "/v1", Model: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		turn := agent.Turn{Input: textInput("hi")}
		start, cpu0, n := time.Now(), cpuTime(), 0
		for b.Loop() {
			if _, err := a.Run(context.Background(), turn, noop); err != nil {
				b.Fatal(err)
			}
			n++
		}
		perDelta(b, start, cpu0, n)
	})
	runTurns := func(b *testing.B, ag agent.Agent) {
		pub := endPublisher{done: make(chan struct{}, 1)}
		m := session.NewManager(session.Config{Owner: "bench/1", Agent: session.StorableOutput(ag),
			Leases: session.NewMemoryLeaseStore(), Store: session.NewMemorySessionStore(),
			Publisher: pub, HistoryWindow: 4})
		defer m.Close()
		start, cpu0, n := time.Now(), cpuTime(), 0
		for b.Loop() {
			if out := m.Submit(context.Background(), fmt.Sprintf("bench-%d", n%16), textInput("hi")); out.Kind != session.OutcomeAccepted {
				b.Fatal(out.Err)
			}
			<-pub.done
			n++
		}
		perDelta(b, start, cpu0, n)
	}
	b.Run("session/direct", func(b *testing.B) { runTurns(b, directAgent{n: benchDeltas}) })
	b.Run("session/openai", func(b *testing.B) {
		srv := instantServer(b, body)
		a, err := New(Config{BaseURL: srv.URL + "/v1", Model: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		runTurns(b, a)
	})
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
