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
	"github.com/relaygw/relay/internal/trace"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testTimeout bounds every wait for an expected frame or trace event.
const testTimeout = 5 * time.Second

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

// client is a raw WebSocket client speaking frames as strings.
type client struct {
	t    testing.TB
	conn *websocket.Conn
	resp *http.Response
}

func (ts *testServer) dial(t testing.TB, query string) *client {
	t.Helper()
	c, err := ts.tryDial(t, query, nil)
	if err != nil {
		t.Fatalf("dial %s: %v", query, err)
	}
	return c
}

func (ts *testServer) tryDial(t testing.TB, query string, opts *websocket.DialOptions) (*client, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	conn, resp, err := websocket.Dial(ctx, ts.url(query), opts)
	if err != nil {
		return &client{t: t, resp: resp}, err
	}
	conn.SetReadLimit(-1)
	c := &client{t: t, conn: conn, resp: resp}
	t.Cleanup(func() { _ = conn.CloseNow() })
	return c, nil
}

func (c *client) send(frame string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := c.conn.Write(ctx, websocket.MessageText, []byte(frame)); err != nil {
		c.t.Fatalf("send %s: %v", frame, err)
	}
}

func (c *client) sendBinary(b []byte) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := c.conn.Write(ctx, websocket.MessageBinary, b); err != nil {
		c.t.Fatalf("send binary: %v", err)
	}
}

// read returns the next frame; binary frames are returned raw.
func (c *client) read() (string, bool) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	typ, b, err := c.conn.Read(ctx)
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	return string(b), typ == websocket.MessageBinary
}

// expect reads the next frame and compares it to want byte for byte.
func (c *client) expect(want string) {
	c.t.Helper()
	got, _ := c.read()
	if got != want {
		c.t.Fatalf("frame mismatch\n got: %s\nwant: %s", got, want)
	}
}

// expectClose reads until the connection closes and returns the close code.
func (c *client) expectClose() websocket.StatusCode {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for {
		_, b, err := c.conn.Read(ctx)
		if err != nil {
			code := websocket.CloseStatus(err)
			if code == -1 {
				c.t.Fatalf("connection ended without a close frame: %v", err)
			}
			return code
		}
		c.t.Logf("frame before close: %s", b)
	}
}

// heartbeat sends a heartbeat and waits for its reply: a barrier proving the
// server handled every earlier frame (frames are handled in order) and wrote
// everything those frames produced before it.
func (c *client) heartbeat(ref string) {
	c.t.Helper()
	c.send(`[null,"` + ref + `","phoenix","heartbeat",{}]`)
	c.expect(`[null,"` + ref + `","phoenix","phx_reply",{"status":"ok","response":{}}]`)
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
