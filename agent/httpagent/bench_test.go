package httpagent

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/session"
)

// instantAgent is a local agent that streams n deltas of 8 bytes and a done
// event at once, without reading the signature: the cost measured is
// Relay's side (request, signing, parsing, emitting) plus loopback HTTP.
func instantAgent(b *testing.B, n int, format string) *httptest.Server {
	var body bytes.Buffer
	for range n {
		ev := `{"type":"delta","data":{"text":"token42 "}}`
		if format == "sse" {
			fmt.Fprintf(&body, "data: %s\n\n", ev)
		} else {
			fmt.Fprintf(&body, "%s\n", ev)
		}
	}
	ct := "application/x-ndjson"
	if format == "sse" {
		body.WriteString("data: {\"type\":\"done\"}\n\n")
		ct = "text/event-stream"
	} else {
		body.WriteString("{\"type\":\"done\"}\n")
	}
	payload := body.Bytes()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var sink [4096]byte
		for {
			if _, err := r.Body.Read(sink[:]); err != nil {
				break
			}
		}
		w.Header().Set("Content-Type", ct)
		w.Write(payload)
	}))
	b.Cleanup(srv.Close)
	return srv
}

// BenchmarkHTTPTurn measures whole turns through the HTTP backend against
// an agent that streams instantly: ns/op is one turn (POST, stream of
// `deltas` deltas, end), turns/s its inverse; the emit is a no-op, so the
// session's own cost is not included. With deltas=1 and deltas=100 the
// added latency per delta is (ns/op@100 - ns/op@1) / 99; each run also
// reports it directly as ns/delta = ns/op / deltas.
func BenchmarkHTTPTurn(b *testing.B) {
	for _, format := range []string{"sse", "ndjson"} {
		for _, n := range []int{1, 100} {
			b.Run(fmt.Sprintf("%s/deltas=%d", format, n), func(b *testing.B) {
				srv := instantAgent(b, n, format)
				ag, err := New(Config{URL: srv.URL, Secret: testSecret})
				if err != nil {
					b.Fatal(err)
				}
				turn := agent.Turn{Session: "bench", ID: agent.Position{Epoch: 1, Seq: 1}, Attempt: 1,
					Input: agent.Input{Type: "user_message", Data: []byte(`{"text":"hello"}`)}}
				emits := 0
				emit := func(context.Context, string, any) error { emits++; return nil }
				ctx := context.Background()
				b.ReportAllocs()
				start := time.Now()
				for b.Loop() {
					if _, err := ag.Run(ctx, turn, emit); err != nil {
						b.Fatal(err)
					}
				}
				el := time.Since(start)
				if emits != b.N*n {
					b.Fatalf("%d emits, want %d", emits, b.N*n)
				}
				b.ReportMetric(float64(b.N)/el.Seconds(), "turns/s")
				b.ReportMetric(float64(el.Nanoseconds())/float64(b.N*n), "ns/delta")
			})
		}
	}
}

// BenchmarkHTTPTurnParallel runs turns of 20 deltas from GOMAXPROCS
// goroutines at once (many sessions on one node): turns/s is the node's
// HTTP-backend throughput against an instant agent.
func BenchmarkHTTPTurnParallel(b *testing.B) {
	srv := instantAgent(b, 20, "sse")
	ag, err := New(Config{URL: srv.URL, Secret: testSecret})
	if err != nil {
		b.Fatal(err)
	}
	emit := func(context.Context, string, any) error { return nil }
	b.ReportAllocs()
	b.SetParallelism(8)
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		turn := agent.Turn{Session: "bench", ID: agent.Position{Epoch: 1, Seq: 1}, Attempt: 1,
			Input: agent.Input{Type: "user_message", Data: []byte(`{"text":"hello"}`)}}
		for pb.Next() {
			if _, err := ag.Run(context.Background(), turn, emit); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "turns/s")
}

// turnEnds is a session Publisher that signals each turn's end.
type turnEnds chan struct{}

func (c turnEnds) Publish(_ context.Context, ev agent.Event) error {
	if ev.Type == agent.TypeTurnCompleted || ev.Type == agent.TypeTurnFailed {
		c <- struct{}{}
	}
	return nil
}

// BenchmarkSessionTurn measures whole turns through a session Manager on
// in-memory stores (accept, turn_started, every delta appended to the
// replay log and published, the turn's end written): ns/op is one turn of
// 20 deltas, each in a new session, one after the other. "echo" is the built-in agent
// (no delay) streaming 20 words, "http" the HTTP backend against an agent
// that streams 20 deltas instantly; the difference is what the HTTP
// backend adds to a turn.
func BenchmarkSessionTurn(b *testing.B) {
	srv := instantAgent(b, 20, "sse")
	hag, err := New(Config{URL: srv.URL, Secret: testSecret})
	if err != nil {
		b.Fatal(err)
	}
	words := bytes.Repeat([]byte("token42 "), 20)
	for _, c := range []struct {
		name string
		ag   agent.Agent
	}{{"echo", session.EchoAgent{}}, {"http", hag}} {
		ag := c.ag
		b.Run(c.name, func(b *testing.B) {
			ends := make(turnEnds, 1)
			m := session.NewManager(session.Config{
				Owner: "bench", Agent: session.StorableOutput(ag),
				Leases: session.NewMemoryLeaseStore(), Store: session.NewMemorySessionStore(),
				Log: session.NewMemoryReplayLog(1000, time.Hour), Publisher: ends,
			})
			defer m.Close()
			data := []byte(fmt.Sprintf(`{"text":%q}`, words))
			ctx := context.Background()
			i := 0
			start := time.Now()
			for b.Loop() {
				i++
				if _, err := m.Accept(ctx, fmt.Sprintf("s%d", i), agent.Input{Type: "message", Data: data}); err != nil {
					b.Fatal(err)
				}
				<-ends
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "turns/s")
		})
	}
}
