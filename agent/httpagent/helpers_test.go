package httpagent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/testkit/testenv"
	"github.com/relaygw/relay/session"
	"github.com/relaygw/relay/session/pgstore"
	"github.com/relaygw/relay/session/redisstore"
)

const testSecret = "test-secret"

// hangGuard bounds every wait of these tests; it is never what a test
// asserts.
const hangGuard = 60 * time.Second

// recorder is the session Publisher of a test: every published event, in
// order.
type recorder struct {
	mu  sync.Mutex
	evs []agent.Event
	ch  chan struct{}
}

func newRecorder() *recorder { return &recorder{ch: make(chan struct{}, 1)} }

func (r *recorder) Publish(_ context.Context, ev agent.Event) error {
	r.mu.Lock()
	r.evs = append(r.evs, ev)
	r.mu.Unlock()
	select {
	case r.ch <- struct{}{}:
	default:
	}
	return nil
}

// waitEvents waits until the events of session id satisfy done and returns
// them.
func (r *recorder) waitEvents(t *testing.T, id string, done func([]agent.Event) bool) []agent.Event {
	t.Helper()
	deadline := time.NewTimer(hangGuard)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		var evs []agent.Event
		for _, ev := range r.evs {
			if ev.Session == id {
				evs = append(evs, ev)
			}
		}
		r.mu.Unlock()
		if done(evs) {
			return evs
		}
		select {
		case <-r.ch:
		case <-deadline.C:
			t.Fatalf("hang guard: events of %s so far: %s", id, summary(evs))
		}
	}
}

// turnsEnded reports whether n turns have ended (turn_completed or
// turn_failed).
func turnsEnded(n int) func([]agent.Event) bool {
	return func(evs []agent.Event) bool {
		c := 0
		for _, ev := range evs {
			if ev.Type == agent.TypeTurnCompleted || ev.Type == agent.TypeTurnFailed {
				c++
			}
		}
		return c >= n
	}
}

func summary(evs []agent.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		fmt.Fprintf(&b, "\n  %v %s %s", ev.Pos(), ev.Type, ev.Data)
	}
	return b.String()
}

// types lists the events' types.
func types(evs []agent.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.Type
	}
	return out
}

// lastTurn returns the events from the last turn_started/turn_resumed on.
func lastTurn(evs []agent.Event) []agent.Event {
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Type == agent.TypeTurnStarted || evs[i].Type == agent.TypeTurnResumed {
			return evs[i:]
		}
	}
	return nil
}

// stores are one set of session stores that several Managers can share.
type stores struct {
	leases session.LeaseStore
	store  session.SessionStore
	log    session.ReplayLog
	rec    *recorder
	// advance makes d pass on the lease store's clock (nil: the stores
	// cannot).
	advance func(d time.Duration)
}

// clusterStores are the stores of cluster mode: Postgres leases and
// session store on a fresh schema, the Redis replay log under a fresh key
// prefix. Lease time passes by moving expires_at into the past.
func clusterStores(t *testing.T) *stores {
	pool := testenv.Postgres(t)
	client, prefix := testenv.Redis(t)
	return &stores{
		leases: pgstore.NewLeaseStore(pool),
		store:  pgstore.NewSessionStore(pool),
		log:    redisstore.NewReplayLog(client, redisstore.ReplayConfig{Prefix: prefix, MaxLen: 1000, TTL: time.Hour}),
		rec:    newRecorder(),
		advance: func(d time.Duration) {
			if _, err := pool.Exec(context.Background(), "UPDATE agent_leases SET expires_at = expires_at - $1::interval", d); err != nil {
				t.Fatalf("advance lease time by %v: %v", d, err)
			}
		},
	}
}

// memoryStoresAt are in-memory stores whose lease store reads clock.
func memoryStoresAt(clock *session.ManualClock) *stores {
	st := newStores()
	st.leases = session.NewMemoryLeaseStore(session.WithMemoryClock(clock.Now))
	st.advance = clock.Advance
	return st
}

// forEachStores runs f on in-memory stores and on the cluster stores
// (real Postgres and Redis).
func forEachStores(t *testing.T, f func(t *testing.T, st *stores)) {
	t.Run("memory", func(t *testing.T) { f(t, memoryStoresAt(session.NewManualClock(time.Unix(1_700_000_000, 0)))) })
	t.Run("cluster", func(t *testing.T) { f(t, clusterStores(t)) })
}

func newStores() *stores {
	return &stores{
		leases: session.NewMemoryLeaseStore(),
		store:  session.NewMemorySessionStore(),
		log:    session.NewMemoryReplayLog(1000, time.Hour),
		rec:    newRecorder(),
	}
}

// manager starts a session Manager named owner running ag on st, the way
// the gateway wires an agent (session.StorableOutput).
func (st *stores) manager(t *testing.T, owner string, ag agent.Agent) *session.Manager {
	t.Helper()
	m := session.NewManager(session.Config{
		Owner: owner, Agent: session.StorableOutput(ag),
		Leases: st.leases, Store: st.store, Log: st.log, Publisher: st.rec,
	})
	t.Cleanup(m.Close)
	return m
}

// post submits a user message with text to session id.
func post(t *testing.T, m *session.Manager, id, text string) session.Accepted {
	t.Helper()
	data, _ := json.Marshal(map[string]string{"text": text})
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	acc, err := m.Accept(ctx, id, agent.Input{Type: "user_message", Data: data})
	if err != nil {
		t.Fatalf("accept %q: %v", text, err)
	}
	return acc
}

// seen is one request an agent server received.
type seen struct {
	Req      Request
	Key      string
	SigError error
}

// agentServer is a real local HTTP agent: it verifies each request's
// signature, records it, and answers with the handler of the test.
type agentServer struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []seen
}

func newAgentServer(t *testing.T, h func(w http.ResponseWriter, r *http.Request, req Request)) *agentServer {
	t.Helper()
	s := &agentServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		var req Request
		if err := json.Unmarshal(body, &req); err != nil {
			http.Error(w, "bad json: "+err.Error(), http.StatusBadRequest)
			return
		}
		sigErr := Verify(testSecret, r.Header.Get(HeaderTimestamp), r.Header.Get(HeaderSignature), body, time.Now(), 0)
		s.mu.Lock()
		s.reqs = append(s.reqs, seen{Req: req, Key: r.Header.Get(HeaderIdempotencyKey), SigError: sigErr})
		s.mu.Unlock()
		if sigErr != nil {
			http.Error(w, sigErr.Error(), http.StatusUnauthorized)
			return
		}
		h(w, r, req)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *agentServer) requests() []seen {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seen(nil), s.reqs...)
}

// newAgent builds an Agent for url with the test secret; edit adjusts the
// config.
func newAgent(t *testing.T, url string, edit func(*Config)) *Agent {
	t.Helper()
	cfg := Config{URL: url, Secret: testSecret, RetryBudget: 2 * time.Second}
	if edit != nil {
		edit(&cfg)
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// sse writes Relay-format events as SSE, flushing after each.
func sse(w http.ResponseWriter, events ...string) {
	w.Header().Set("Content-Type", "text/event-stream")
	for _, e := range events {
		fmt.Fprintf(w, "data: %s\n\n", e)
		w.(http.Flusher).Flush()
	}
}

// ndjson writes lines as NDJSON, flushing after each.
func ndjson(w http.ResponseWriter, lines ...string) {
	w.Header().Set("Content-Type", "application/x-ndjson")
	for _, l := range lines {
		fmt.Fprintf(w, "%s\n", l)
		w.(http.Flusher).Flush()
	}
}

// okStream answers with "hello world" in two deltas and a done event.
func okStream(w http.ResponseWriter, _ *http.Request, _ Request) {
	sse(w, `{"type":"delta","data":{"text":"hello "}}`, `{"type":"delta","data":{"text":"world"}}`, `{"type":"done"}`)
}

// failedWith asserts that the last turn of evs failed with an error
// containing each of parts, and returns the error text.
func failedWith(t *testing.T, evs []agent.Event, parts ...string) string {
	t.Helper()
	last := evs[len(evs)-1]
	if last.Type != agent.TypeTurnFailed {
		t.Fatalf("last event is %s, want turn_failed: %s", last.Type, summary(evs))
	}
	var d struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(last.Data, &d); err != nil {
		t.Fatal(err)
	}
	for _, p := range parts {
		if !strings.Contains(d.Error, p) {
			t.Fatalf("turn_failed error %q lacks %q", d.Error, p)
		}
	}
	return d.Error
}

// completedWith asserts that the last turn of evs completed with the
// final message content.
func completedWith(t *testing.T, evs []agent.Event, content string) {
	t.Helper()
	n := len(evs)
	if n < 2 || evs[n-1].Type != agent.TypeTurnCompleted || evs[n-2].Type != agent.TypeMessage {
		t.Fatalf("the turn did not complete: %s", summary(evs))
	}
	var m agent.Message
	if err := json.Unmarshal(evs[n-2].Data, &m); err != nil {
		t.Fatal(err)
	}
	if m.Content != content {
		t.Fatalf("final message %q, want %q", m.Content, content)
	}
}

// deadAddr returns an address on which nothing listens (a listener opened
// and closed), so a dial there is refused.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
