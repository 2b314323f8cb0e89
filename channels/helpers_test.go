package channels

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/relaygw/relay/internal/testkit/phxtest"
	"github.com/relaygw/relay/internal/trace"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testTimeout bounds every wait for an expected frame or trace event. It is
// a hang guard, never a measure of speed: a passing test never waits it out,
// and some steps move megabytes under the race detector on a busy machine.
const testTimeout = 30 * time.Second

// funcHandler is a Handler built from functions; nil functions accept the
// join with {} and reply nothing. Terminations are recorded.
type funcHandler struct {
	join     func(ctx context.Context, ch *Channel, payload json.RawMessage) (JoinResult, error)
	handleIn func(ctx context.Context, ch *Channel, event string, payload json.RawMessage) (any, error)

	mu         sync.Mutex
	terminated []string // "topic/join_ref/reason"
	termCh     chan string
}

func newFuncHandler() *funcHandler { return &funcHandler{termCh: make(chan string, 256)} }

func (h *funcHandler) Join(ctx context.Context, ch *Channel, payload json.RawMessage) (JoinResult, error) {
	if h.join != nil {
		return h.join(ctx, ch, payload)
	}
	ch.Subscribe()
	return JoinResult{}, nil
}

func (h *funcHandler) HandleIn(ctx context.Context, ch *Channel, event string, payload json.RawMessage) (any, error) {
	if h.handleIn != nil {
		return h.handleIn(ctx, ch, event, payload)
	}
	return nil, nil
}

func (h *funcHandler) Terminate(ch *Channel, reason CloseReason) {
	s := ch.Topic() + "/" + ch.JoinRef() + "/" + string(reason)
	h.mu.Lock()
	h.terminated = append(h.terminated, s)
	h.mu.Unlock()
	select {
	case h.termCh <- s:
	default: // tests that churn many channels read terminations()
	}
}

// waitTerminated waits for the next Terminate call and returns its record.
func (h *funcHandler) waitTerminated(t testing.TB) string {
	t.Helper()
	select {
	case s := <-h.termCh:
		return s
	case <-time.After(testTimeout):
		t.Fatal("Terminate was not called")
		return ""
	}
}

func (h *funcHandler) terminations() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.terminated...)
}

type testServer struct {
	ep  *Endpoint
	srv *httptest.Server
	tr  *trace.Tracer
}

// newTestServer starts an Endpoint behind an httptest server. The cleanup
// shuts the endpoint down (waiting for every socket) and closes the server.
func newTestServer(t testing.TB, cfg EndpointConfig, routes map[string]Handler) *testServer {
	t.Helper()
	if cfg.Tracer == nil {
		cfg.Tracer = trace.New()
	}
	ep := NewEndpoint(cfg)
	for p, h := range routes {
		ep.Handle(p, h)
	}
	mux := http.NewServeMux()
	mux.Handle("/socket/websocket", ep)
	srv := httptest.NewServer(mux)
	ts := &testServer{ep: ep, srv: srv, tr: cfg.Tracer}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*testTimeout)
		defer cancel()
		if err := ep.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		srv.Close()
		if f := cfg.Tracer.Failures(); len(f) > 0 {
			t.Errorf("trace park failures: %v", f)
		}
	})
	return ts
}

func (ts *testServer) url(query string) string {
	return "ws" + strings.TrimPrefix(ts.srv.URL, "http") + "/socket/websocket" + query
}

// dial opens a socket on the test server with query ("?vsn=2.0.0…") and
// fails the test when the upgrade fails. Every step of the client waits at
// most testTimeout.
func (ts *testServer) dial(t testing.TB, query string) *phxtest.T {
	t.Helper()
	c, err := ts.tryDial(t, query, nil)
	if err != nil {
		t.Fatalf("dial %s: %v", query, err)
	}
	return c
}

// tryDial is dial returning the error; the client then holds only Resp.
func (ts *testServer) tryDial(t testing.TB, query string, opts *websocket.DialOptions) (*phxtest.T, error) {
	t.Helper()
	c, err := phxtest.TryDialT(t, ts.url(query), opts)
	c.Timeout = testTimeout
	return c, err
}

func waitTrace(t testing.TB, tr *trace.Tracer, m trace.Matcher) trace.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	e, err := tr.WaitFor(ctx, m)
	if err != nil {
		t.Fatalf("%v\ntrace:\n%s", err, tr.Dump())
	}
	return e
}

var errTest = errors.New("test failure")
