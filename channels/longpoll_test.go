package channels

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relaygw/relay/internal/trace"
)

// lpServer is an Endpoint with its LongPoll handler behind an httptest
// server; the cleanup drains the endpoint (every session's socket ends).
type lpServer struct {
	ep  *Endpoint
	lp  *LongPoll
	srv *httptest.Server
	tr  *trace.Tracer
}

func newLPServer(t *testing.T, cfg EndpointConfig, lcfg LongPollConfig, routes map[string]Handler) *lpServer {
	t.Helper()
	if cfg.Tracer == nil {
		cfg.Tracer = trace.New()
	}
	if lcfg.Node == "" {
		lcfg.Node = "n1"
	}
	ep := NewEndpoint(cfg)
	for p, h := range routes {
		ep.Handle(p, h)
	}
	lp := NewLongPoll(ep, lcfg)
	mux := http.NewServeMux()
	mux.Handle("/socket/websocket", ep)
	mux.Handle("/socket/longpoll", lp)
	srv := httptest.NewServer(mux)
	ls := &lpServer{ep: ep, lp: lp, srv: srv, tr: cfg.Tracer}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*testTimeout)
		defer cancel()
		if err := ep.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		srv.CloseClientConnections()
		srv.Close()
		if f := cfg.Tracer.Failures(); len(f) > 0 {
			t.Errorf("trace park failures: %v", f)
		}
	})
	return ls
}

// lpAnswer is a decoded LongPoll answer.
type lpAnswer struct {
	HTTP     int      // the HTTP status
	Status   int      `json:"status"`
	Token    string   `json:"token"`
	Messages []string `json:"messages"`
	Error    string   `json:"error"`
}

// lpClient speaks the LongPoll transport as phoenix.js does.
type lpClient struct {
	t     *testing.T
	base  string // .../socket/longpoll?<params>
	token string // the session token once created
}

func (ls *lpServer) client(t *testing.T, query string) *lpClient {
	return &lpClient{t: t, base: ls.srv.URL + "/socket/longpoll" + query}
}

func (c *lpClient) url() string {
	if c.token == "" {
		return c.base
	}
	sep := "?"
	if strings.Contains(c.base, "?") {
		sep = "&"
	}
	return c.base + sep + "token=" + url.QueryEscape(c.token)
}

func (c *lpClient) do(ctx context.Context, method, u, ctype string, body []byte) lpAnswer {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(ctx, testTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := lpAnswer{HTTP: resp.StatusCode}
	if err := json.Unmarshal(b, &a); err != nil {
		c.t.Fatalf("%s %s: answer %d %q is not JSON: %v", method, u, resp.StatusCode, b, err)
	}
	if resp.Header.Get("Cache-Control") != "no-store" {
		c.t.Fatalf("%s %s: Cache-Control %q", method, u, resp.Header.Get("Cache-Control"))
	}
	return a
}

// open creates the session (the first GET, answered 410 with a token).
func (c *lpClient) open() {
	c.t.Helper()
	a := c.do(context.Background(), http.MethodGet, c.url(), "", nil)
	if a.HTTP != 200 || a.Status != 410 || !strings.HasPrefix(a.Token, lpTokenPrefix) {
		c.t.Fatalf("create: %+v", a)
	}
	c.token = a.Token
}

func (c *lpClient) poll() lpAnswer {
	c.t.Helper()
	return c.do(context.Background(), http.MethodGet, c.url(), "", nil)
}

// post sends frames as one ndjson batch.
func (c *lpClient) post(lines ...string) lpAnswer {
	c.t.Helper()
	return c.do(context.Background(), http.MethodPost, c.url(), "application/x-ndjson", []byte(strings.Join(lines, "\n")))
}

// joinLobby creates the session and joins room:lobby (join ref and ref "3").
func (c *lpClient) joinLobby() {
	c.t.Helper()
	c.open()
	c.post(`["3","3","room:lobby","phx_join",{}]`)
	c.expect(`["3","3","room:lobby","phx_reply",{"status":"ok","response":{}}]`)
}

// heldPoll starts a poll and returns once the server holds it (trace point
// longpoll.held on tr); the poll's answer arrives on the channel.
func (c *lpClient) heldPoll(tr *trace.Tracer) <-chan lpAnswer {
	c.t.Helper()
	held := tr.Count(trace.Kind("longpoll.held"))
	got := make(chan lpAnswer, 1)
	go func() { got <- c.poll() }()
	waitHeld(c.t, tr, held+1)
	return got
}

// expect polls until want has arrived, in order, after what arrived before;
// it fails on a frame that is not the next expected one.
func (c *lpClient) expect(want ...string) {
	c.t.Helper()
	for len(want) > 0 {
		a := c.poll()
		switch a.Status {
		case 204:
			continue
		case 200:
		default:
			c.t.Fatalf("poll: %+v, want %q", a, want)
		}
		if a.Token != c.token {
			c.t.Fatalf("poll answered token %q, want the session's", a.Token)
		}
		for _, m := range a.Messages {
			if len(want) == 0 || m != want[0] {
				c.t.Fatalf("poll got %s, want %q", m, want)
			}
			want = want[1:]
		}
	}
}

func TestLongPollSessionJoinPushBroadcastLeave(t *testing.T) {
	h := newFuncHandler()
	h.handleIn = func(_ context.Context, ch *Channel, event string, payload json.RawMessage) (any, error) {
		return map[string]any{"echo": event}, nil
	}
	ls := newLPServer(t, EndpointConfig{}, LongPollConfig{}, map[string]Handler{"room:*": h})
	c := ls.client(t, "?vsn=2.0.0")
	c.open()
	if a := c.post(`["3","3","room:lobby","phx_join",{}]`); a.Status != 200 {
		t.Fatalf("post: %+v", a)
	}
	c.expect(`["3","3","room:lobby","phx_reply",{"status":"ok","response":{}}]`)
	c.post(`[null,"4","phoenix","heartbeat",{}]`)
	c.expect(`[null,"4","phoenix","phx_reply",{"status":"ok","response":{}}]`)
	c.post(`["3","5","room:lobby","new_msg",{"body":"hi"}]`)
	c.expect(`["3","5","room:lobby","phx_reply",{"status":"ok","response":{"echo":"new_msg"}}]`)
	if n := ls.ep.Hub().Broadcast("room:lobby", "ev", json.RawMessage(`{"n":1}`), nil); n != 1 {
		t.Fatalf("broadcast reached %d subscribers", n)
	}
	c.expect(`[null,null,"room:lobby","ev",{"n":1}]`)
	c.post(`["3","6","room:lobby","phx_leave",{}]`)
	c.expect(`["3","6","room:lobby","phx_reply",{"status":"ok","response":{}}]`, `["3","3","room:lobby","phx_close",{}]`)
	if got := h.waitTerminated(t); got != "room:lobby/3/leave" {
		t.Fatalf("terminated %q", got)
	}
}

// A poll held when a frame is written is answered with it; a poll with
// nothing to take is answered 204 with the token after the window.
func TestLongPollHeldPollWakesAndTimesOut(t *testing.T) {
	tr := trace.New()
	// However late the poll comes, the idle close waits until it was answered.
	tr.Park(trace.Kind("longpoll.idle"), trace.Kind("test.polled"))
	ls := newLPServer(t, EndpointConfig{Tracer: tr}, LongPollConfig{Window: 50 * time.Millisecond}, map[string]Handler{"room:*": newFuncHandler()})
	c := ls.client(t, "?vsn=2.0.0")
	c.open()
	if a := c.poll(); a.Status != 204 || a.Token != c.token || a.Messages != nil {
		t.Fatalf("empty poll: %+v", a)
	}
	waitTrace(t, tr, trace.Kind("longpoll.idle"))
	tr.Emit("test.polled")
	ls2 := newLPServer(t, EndpointConfig{}, LongPollConfig{Window: time.Hour}, map[string]Handler{"room:*": newFuncHandler()})
	c2 := ls2.client(t, "?vsn=2.0.0")
	c2.joinLobby()
	got := c2.heldPoll(ls2.tr)
	ls2.ep.Hub().Broadcast("room:lobby", "ev", json.RawMessage(`{}`), nil)
	if a := <-got; a.Status != 200 || len(a.Messages) != 1 || a.Messages[0] != `[null,null,"room:lobby","ev",{}]` {
		t.Fatalf("held poll: %+v", a)
	}
}

// A second poll of a session answers the held one 204 at once and takes its
// place: frames go to the newest poll.
func TestLongPollNewerPollSupersedesHeld(t *testing.T) {
	ls := newLPServer(t, EndpointConfig{}, LongPollConfig{Window: time.Hour}, map[string]Handler{"room:*": newFuncHandler()})
	c := ls.client(t, "?vsn=2.0.0")
	c.joinLobby()
	held := ls.tr.Count(trace.Kind("longpoll.held"))
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	first := make(chan lpAnswer, 1)
	go func() { first <- c.poll() }()
	if _, err := ls.tr.WaitForN(ctx, trace.Kind("longpoll.held"), held+1); err != nil {
		t.Fatal(err)
	}
	second := make(chan lpAnswer, 1)
	go func() { second <- c.poll() }()
	if a := <-first; a.Status != 204 {
		t.Fatalf("superseded poll: %+v", a)
	}
	if _, err := ls.tr.WaitForN(ctx, trace.Kind("longpoll.held"), held+2); err != nil {
		t.Fatal(err)
	}
	ls.ep.Hub().Broadcast("room:lobby", "ev", json.RawMessage(`{}`), nil)
	if a := <-second; a.Status != 200 || len(a.Messages) != 1 {
		t.Fatalf("newest poll: %+v", a)
	}
}

// A session whose client stops polling is closed after the window: its
// socket ends, its channels terminate and later polls get 410.
func TestLongPollIdleSessionCloses(t *testing.T) {
	h := newFuncHandler()
	tr := trace.New()
	// The idle close waits until the join is posted, however soon it fires.
	tr.Park(trace.Kind("longpoll.idle"), trace.Kind("test.joined"))
	ls := newLPServer(t, EndpointConfig{Tracer: tr}, LongPollConfig{Window: 20 * time.Millisecond}, map[string]Handler{"room:*": h})
	c := ls.client(t, "?vsn=2.0.0")
	c.open()
	if a := c.post(`["3","3","room:lobby","phx_join",{}]`); a.Status != 200 {
		t.Fatalf("post: %+v", a)
	}
	// The idle close may have fired before the join (it is parked then) or
	// not yet: either way it goes on once the join is in.
	waitTrace(t, tr, trace.Kind("longpoll.idle"))
	tr.Emit("test.joined")
	if got := h.waitTerminated(t); got != "room:lobby/3/"+string(ReasonSocketClosed) {
		t.Fatalf("terminated %q", got)
	}
	waitTrace(t, ls.tr, trace.Kind("socket.end"))
	if a := c.post(`[null,"9","phoenix","heartbeat",{}]`); a.Status != 410 {
		t.Fatalf("post after close: %+v", a)
	}
	// The join reply may still be buffered (for one more window): a poll
	// gets it, then 410.
	for replies := 0; ; {
		a := c.poll()
		if a.Status == 410 {
			break
		}
		if a.Status != 200 || replies > 0 || len(a.Messages) != 1 {
			t.Fatalf("poll after close: %+v", a)
		}
		replies++
	}
	if st := ls.lp.Stats(); st.Open != 0 || st.Gone["ended"] != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// Frames written while nobody polls wait in the session's buffer, then in
// the socket's bounded queue; past QueueSize the socket is cut as a slow
// consumer like a WebSocket, and the client gets what was buffered, then 410.
func TestLongPollSlowConsumerCut(t *testing.T) {
	ls := newLPServer(t, EndpointConfig{QueueSize: 8}, LongPollConfig{Window: time.Hour}, map[string]Handler{"room:*": newFuncHandler()})
	c := ls.client(t, "?vsn=2.0.0")
	c.joinLobby()
	pad := strings.Repeat("x", 64<<10)
	sent := 0
	for ls.ep.Stats().SlowConsumers == 0 && sent < 1000 {
		ls.ep.Hub().Broadcast("room:lobby", "ev", json.RawMessage(fmt.Sprintf(`{"n":%d,"p":%q}`, sent, pad)), nil)
		sent++
	}
	if ls.ep.Stats().SlowConsumers != 1 {
		t.Fatalf("no slow consumer cut after %d broadcasts", sent)
	}
	waitTrace(t, ls.tr, trace.Kind("longpoll.close", "code", int(CloseSlowConsumer)))
	got := 0
	for {
		a := c.poll()
		if a.Status == 410 {
			break
		}
		if a.Status != 200 {
			t.Fatalf("poll: %+v", a)
		}
		for _, m := range a.Messages {
			if !strings.HasPrefix(m, fmt.Sprintf(`[null,null,"room:lobby","ev",{"n":%d,`, got)) {
				t.Fatalf("frame %d out of order: %.60s", got, m)
			}
			got++
		}
	}
	if got == 0 || got >= sent {
		t.Fatalf("got %d of %d frames before 410", got, sent)
	}
}

func TestLongPollBadTokens(t *testing.T) {
	now := atomic.Int64{}
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Unix())
	h := newFuncHandler()
	lcfg := LongPollConfig{Window: time.Hour, SessionMaxAge: time.Hour, Now: func() time.Time { return time.Unix(now.Load(), 0) }}
	ls := newLPServer(t, EndpointConfig{}, lcfg, map[string]Handler{"room:*": h})
	c := ls.client(t, "?vsn=2.0.0")
	c.joinLobby()

	body, sig, _ := strings.Cut(strings.TrimPrefix(c.token, lpTokenPrefix), ".")
	raw, _ := base64.RawURLEncoding.DecodeString(body)
	forged := strings.Replace(string(raw), `"t":`, `"t":1`, 1)
	other := strings.Replace(string(raw), `"n":"n1"`, `"n":"n2"`, 1)
	cases := map[string]struct{ tok, why string }{
		"tampered claims": {lpTokenPrefix + base64.RawURLEncoding.EncodeToString([]byte(forged)) + "." + sig, "bad_token"},
		"bad signature":   {lpTokenPrefix + body + "." + base64.RawURLEncoding.EncodeToString([]byte("nope")), "bad_token"},
		"no signature":    {lpTokenPrefix + body, "bad_token"},
		"garbage":         {lpTokenPrefix + "!!!.???", "bad_token"},
		"other node":      {lpTokenPrefix + base64.RawURLEncoding.EncodeToString([]byte(other)) + "." + sig, "other_node"},
	}
	for name, tc := range cases {
		bad := &lpClient{t: t, base: c.base, token: tc.tok}
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			var a lpAnswer
			if method == http.MethodGet {
				a = bad.poll()
			} else {
				a = bad.post(`[null,"9","phoenix","heartbeat",{}]`)
			}
			if a.HTTP != 200 || a.Status != 410 || a.Token != "" {
				t.Fatalf("%s %s: %+v", name, method, a)
			}
			if ls.tr.Count(trace.Kind("longpoll.gone", "why", tc.why)) == 0 {
				t.Fatalf("%s: no gone trace with why %s", name, tc.why)
			}
		}
	}
	// A POST without a session token starts nothing.
	if a := (&lpClient{t: t, base: c.base}).post(`[null,"9","phoenix","heartbeat",{}]`); a.Status != 410 {
		t.Fatalf("post without token: %+v", a)
	}
	// None of that touched the session.
	if len(h.terminations()) != 0 || ls.lp.Stats().Open != 1 {
		t.Fatalf("bad tokens changed the session: %v, %+v", h.terminations(), ls.lp.Stats())
	}
	c.post(`[null,"10","phoenix","heartbeat",{}]`)
	c.expect(`[null,"10","phoenix","phx_reply",{"status":"ok","response":{}}]`)

	// Past SessionMaxAge the token is refused and its session closed.
	now.Add(int64(time.Hour/time.Second) + 1)
	if a := c.poll(); a.Status != 410 {
		t.Fatalf("expired token: %+v", a)
	}
	if got := h.waitTerminated(t); got != "room:lobby/3/"+string(ReasonSocketClosed) {
		t.Fatalf("terminated %q", got)
	}
	if ls.tr.Count(trace.Kind("longpoll.gone", "why", "expired")) != 1 {
		t.Fatal("no expired trace")
	}
}

// A session token is valid only on the node (and process) that issued it.
func TestLongPollTokenOfAnotherNodeIsGone(t *testing.T) {
	route := map[string]Handler{"room:*": newFuncHandler()}
	a := newLPServer(t, EndpointConfig{}, LongPollConfig{Node: "a", Window: time.Hour}, route)
	b := newLPServer(t, EndpointConfig{}, LongPollConfig{Node: "b", Window: time.Hour}, route)
	restarted := newLPServer(t, EndpointConfig{}, LongPollConfig{Node: "a", Window: time.Hour}, route)
	c := a.client(t, "?vsn=2.0.0")
	c.open()
	for name, srv := range map[string]*lpServer{"other node": b, "restarted node": restarted} {
		moved := &lpClient{t: t, base: srv.srv.URL + "/socket/longpoll?vsn=2.0.0", token: c.token}
		if ans := moved.poll(); ans.Status != 410 {
			t.Fatalf("%s poll: %+v", name, ans)
		}
		if ans := moved.post(`[null,"1","phoenix","heartbeat",{}]`); ans.Status != 410 {
			t.Fatalf("%s post: %+v", name, ans)
		}
	}
	if b.lp.Stats().Gone["other_node"] != 2 || restarted.lp.Stats().Gone["bad_token"] != 2 {
		t.Fatalf("gone counts: b %+v, restarted %+v", b.lp.Stats(), restarted.lp.Stats())
	}
	if st := a.lp.Stats(); st.Open != 1 {
		t.Fatalf("the issuing node's session: %+v", st)
	}
}

// Bad batches are refused whole: nothing of them is dispatched.
func TestLongPollBadBatches(t *testing.T) {
	h := newFuncHandler()
	ls := newLPServer(t, EndpointConfig{MaxFrameBytes: 1024}, LongPollConfig{Window: time.Hour, MaxBodyBytes: 4096}, map[string]Handler{"room:*": h})
	c := ls.client(t, "?vsn=2.0.0")
	c.open()
	join := `["3","3","room:lobby","phx_join",{}]`
	many := make([]string, LongPollMaxBatch+1)
	for i := range many {
		many[i] = fmt.Sprintf(`[null,"%d","phoenix","heartbeat",{}]`, i)
	}
	cases := []struct {
		name   string
		ctype  string
		body   string
		status int
		code   string
	}{
		{"body over MaxBodyBytes", "application/x-ndjson", join + "\n" + strings.Repeat("A", 5000), 413, "body_too_large"},
		{"frame over MaxFrameBytes", "application/x-ndjson", join + "\n" + `["3","4","room:lobby","ev",{"p":"` + strings.Repeat("x", 1100) + `"}]`, 413, "frame_too_large"},
		{"binary frame over MaxFrameBytes", "application/x-ndjson", join + "\n" + base64.StdEncoding.EncodeToString(make([]byte, 1500)), 413, "frame_too_large"},
		{"single frame over MaxFrameBytes", "application/json", `["3","4","room:lobby","ev",{"p":"` + strings.Repeat("x", 1100) + `"}]`, 413, "frame_too_large"},
		{"bad base64", "application/x-ndjson", join + "\nnot base64!", 400, "invalid_batch"},
		{"frame not JSON", "application/x-ndjson", join + "\n" + `["3","4","room:lobby"`, 400, "invalid_batch"},
		{"frame not V2", "application/x-ndjson", join + "\n" + `{"topic":"room:lobby"}`, 400, "invalid_batch"},
		{"too many frames", "application/x-ndjson", strings.Join(many, "\n"), 400, "invalid_batch"},
		{"empty batch", "application/x-ndjson", "\n\r\n", 400, "invalid_batch"},
		{"empty body", "application/json", "", 400, "invalid_batch"},
	}
	for _, tc := range cases {
		a := c.do(context.Background(), http.MethodPost, c.url(), tc.ctype, []byte(tc.body))
		if a.HTTP != tc.status || a.Status != tc.status || a.Error != tc.code {
			t.Fatalf("%s: %+v, want %d %s", tc.name, a, tc.status, tc.code)
		}
	}
	// Nothing was dispatched: no join happened, the socket read no frame.
	if st := ls.ep.Stats(); st.Joins != 0 || st.FramesIn != 0 {
		t.Fatalf("a refused batch was dispatched: %+v", st)
	}
	// The session is intact: a good batch goes through, and its reply is the
	// first frame polled.
	c.post(join)
	c.expect(`["3","3","room:lobby","phx_reply",{"status":"ok","response":{}}]`)
}

// The checks before a session starts are the WebSocket endpoint's.
func TestLongPollCreateRefusals(t *testing.T) {
	var tokens sync.Map
	cfg := EndpointConfig{AllowedOrigins: []string{"app.example.com"}, Connect: func(r *http.Request, params url.Values, authToken string) (any, error) {
		tokens.Store(authToken, true)
		if authToken != "good" {
			return nil, errTest
		}
		return nil, nil
	}}
	ls := newLPServer(t, cfg, LongPollConfig{}, map[string]Handler{"room:*": newFuncHandler()})
	get := func(query string, hdr http.Header) lpAnswer {
		req, _ := http.NewRequest(http.MethodGet, ls.srv.URL+"/socket/longpoll"+query, nil)
		for k, v := range hdr {
			req.Header[k] = v
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		a := lpAnswer{HTTP: resp.StatusCode}
		_ = json.NewDecoder(resp.Body).Decode(&a)
		return a
	}
	if a := get("?vsn=2.0.0&token=good", nil); a.Status != 410 || a.Token == "" {
		t.Fatalf("token param: %+v", a)
	}
	if a := get("?vsn=2.0.0", http.Header{"X-Phoenix-Authtoken": {"good"}}); a.Status != 410 || a.Token == "" {
		t.Fatalf("auth header: %+v", a)
	}
	for name, a := range map[string]lpAnswer{
		"bad token":   get("?vsn=2.0.0&token=bad", nil),
		"no token":    get("?vsn=2.0.0", nil),
		"bad vsn":     get("?vsn=3.0.0&token=good", nil),
		"origin":      get("?vsn=2.0.0&token=good", http.Header{"Origin": {"https://evil.com"}}),
		"good origin": get("?vsn=2.0.0&token=bad", http.Header{"Origin": {"https://app.example.com"}}),
	} {
		if a.HTTP != 200 || a.Status != 403 || a.Token != "" {
			t.Fatalf("%s: %+v", name, a)
		}
	}
	req, _ := http.NewRequest(http.MethodPut, ls.srv.URL+"/socket/longpoll?vsn=2.0.0", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("PUT: %d", resp.StatusCode)
	}
	if st := ls.lp.Stats(); st.Created != 2 {
		t.Fatalf("sessions created: %+v", st)
	}
}

// vsn=1.0.0 selects V1 object frames, as on the WebSocket; a binary push is
// posted as a base64 line and reaches the channel as a binary push.
func TestLongPollV1AndBinary(t *testing.T) {
	ls := newLPServer(t, EndpointConfig{}, LongPollConfig{Window: time.Hour}, map[string]Handler{"room:*": newFuncHandler()})
	c1 := ls.client(t, "?vsn=1.0.0")
	c1.open()
	c1.do(context.Background(), http.MethodPost, c1.url(), "application/json", []byte(`{"topic":"phoenix","event":"heartbeat","payload":{},"ref":"1"}`))
	c1.expect(`{"topic":"phoenix","event":"phx_reply","payload":{"status":"ok","response":{}},"ref":"1"}`)

	c2 := ls.client(t, "?vsn=2.0.0")
	c2.open()
	bin := []byte{0, 1, 1, 10, 2, '3', '4', 'r', 'o', 'o', 'm', ':', 'l', 'o', 'b', 'b', 'y', 'e', 'v', 0xff}
	c2.post(`["3","3","room:lobby","phx_join",{}]`, base64.StdEncoding.EncodeToString(bin))
	c2.expect(`["3","3","room:lobby","phx_reply",{"status":"ok","response":{}}]`,
		`["3","4","room:lobby","phx_reply",{"status":"error","response":{"reason":"binary payload not supported"}}]`)
}

// A drain answers the held poll 410 and ends every session's socket.
func TestLongPollDrainEndsSessions(t *testing.T) {
	h := newFuncHandler()
	ls := newLPServer(t, EndpointConfig{}, LongPollConfig{Window: time.Hour}, map[string]Handler{"room:*": h})
	c := ls.client(t, "?vsn=2.0.0")
	c.joinLobby()
	got := c.heldPoll(ls.tr)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := ls.ep.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if a := <-got; a.Status != 410 {
		t.Fatalf("held poll during drain: %+v", a)
	}
	if got := h.waitTerminated(t); got != "room:lobby/3/"+string(ReasonSocketClosed) {
		t.Fatalf("terminated %q", got)
	}
	fresh := ls.client(t, "?vsn=2.0.0")
	if a := fresh.do(context.Background(), http.MethodGet, fresh.url(), "", nil); a.HTTP != 503 || a.Status != 500 || a.Error != "draining" {
		t.Fatalf("create while draining: %+v", a)
	}
}

// A binary frame cannot reach a LongPoll client: its write closes the
// session (the client reconnects) instead of being dropped silently.
func TestLongPollBinaryOutboundEndsSession(t *testing.T) {
	h := newFuncHandler()
	h.handleIn = func(_ context.Context, ch *Channel, _ string, _ json.RawMessage) (any, error) {
		return nil, ch.Push("bin", BinaryPayload([]byte{1, 2}))
	}
	ls := newLPServer(t, EndpointConfig{}, LongPollConfig{Window: time.Hour}, map[string]Handler{"room:*": h})
	c := ls.client(t, "?vsn=2.0.0")
	c.open()
	c.post(`["3","3","room:lobby","phx_join",{}]`, `["3","4","room:lobby","ev",{}]`)
	waitTrace(t, ls.tr, trace.Kind("socket.write_error"))
	if got := h.waitTerminated(t); got != "room:lobby/3/"+string(ReasonSocketClosed) {
		t.Fatalf("terminated %q", got)
	}
	for {
		a := c.poll()
		if a.Status == 410 {
			break
		}
		if a.Status != 200 {
			t.Fatalf("poll: %+v", a)
		}
	}
}

// waitHeld waits until n polls were held in all.
func waitHeld(t *testing.T, tr *trace.Tracer, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if _, err := tr.WaitForN(ctx, trace.Kind("longpoll.held"), n); err != nil {
		t.Fatalf("%v\ntrace:\n%s", err, tr.Dump())
	}
}

func TestLongPollBatchRoundTrip(t *testing.T) {
	frames := []Frame{{Data: []byte(`["3","3","room:lobby","phx_join",{}]`)}, {Data: []byte{0, 1, 2}, Binary: true}, {Data: []byte(`{"topic":"t"}`)}}
	got, err := decodeLongPollBatch(encodeLongPollBatch(frames), true, 1<<10)
	if err != nil || len(got) != len(frames) {
		t.Fatalf("decode: %v %v", got, err)
	}
	for i := range frames {
		if !bytes.Equal(got[i].Data, frames[i].Data) || got[i].Binary != frames[i].Binary {
			t.Fatalf("frame %d: %+v, want %+v", i, got[i], frames[i])
		}
	}
	if _, err := decodeLongPollBatch([]byte("AAA"), true, 1<<10); !errors.Is(err, ErrBatchMalformed) {
		t.Fatalf("unpadded base64: %v", err)
	}
}

// FuzzLongPollBatch: the batch decoder never panics; every frame it accepts
// is non-empty, within the frame limit, and the batch re-encodes (as
// phoenix.js would post it) to a body that decodes to the same frames; text
// frames it accepts are what the V2 or V1 decoder then sees, unchanged.
func FuzzLongPollBatch(f *testing.F) {
	f.Add([]byte(`["3","3","room:lobby","phx_join",{}]`+"\n"+`[null,"4","phoenix","heartbeat",{}]`), true)
	f.Add([]byte("AAECAw==\r\n"+`{"topic":"t","event":"e","payload":{},"ref":"1"}`), true)
	f.Add([]byte(`["1","1","t","e",{"a":1}]`), false)
	f.Add([]byte("\n\n[\nx\n"), true)
	f.Fuzz(func(t *testing.T, body []byte, ndjson bool) {
		const limit = 256
		frames, err := decodeLongPollBatch(body, ndjson, limit)
		if err != nil {
			if !errors.Is(err, ErrBatchMalformed) && !errors.Is(err, ErrFrameTooBig) {
				t.Fatalf("error %v is neither malformed nor too big", err)
			}
			return
		}
		if len(frames) == 0 || len(frames) > LongPollMaxBatch {
			t.Fatalf("%d frames accepted", len(frames))
		}
		for _, fr := range frames {
			if len(fr.Data) == 0 || len(fr.Data) > limit {
				t.Fatalf("frame of %d bytes accepted", len(fr.Data))
			}
			if !fr.Binary && !bytes.Contains(body, fr.Data) {
				t.Fatalf("text frame %q is not a part of the body", fr.Data)
			}
		}
		if !ndjson {
			return // one frame: the body itself
		}
		again, err := decodeLongPollBatch(encodeLongPollBatch(frames), true, limit)
		if err != nil || len(again) != len(frames) {
			t.Fatalf("re-encoded batch: %d frames, %v (was %d)", len(again), err, len(frames))
		}
		for i := range frames {
			if again[i].Binary != frames[i].Binary || !bytes.Equal(again[i].Data, frames[i].Data) {
				t.Fatalf("frame %d changed: %q → %q", i, frames[i].Data, again[i].Data)
			}
		}
	})
}

// phoenix.js sends no heartbeats over LongPoll: its polls count as input for
// HeartbeatTimeout. 3 polls held 600 ms each outlast a 1 s heartbeat
// timeout; the session must still be open after them.
func TestLongPollPollsKeepSocketAlive(t *testing.T) {
	ls := newLPServer(t, EndpointConfig{HeartbeatTimeout: time.Second}, LongPollConfig{Window: 600 * time.Millisecond}, map[string]Handler{"room:*": newFuncHandler()})
	c := ls.client(t, "?vsn=2.0.0")
	c.open()
	for i := range 3 {
		if a := c.poll(); a.Status != 204 {
			t.Fatalf("poll %d: %+v\ntrace:\n%s", i, a, ls.tr.Dump())
		}
	}
	if n := ls.tr.Count(trace.Kind("socket.idle")); n != 0 {
		t.Fatalf("%d idle closes of a polling session", n)
	}
	c.post(`[null,"1","phoenix","heartbeat",{}]`)
	c.expect(`[null,"1","phoenix","phx_reply",{"status":"ok","response":{}}]`)
}

// BenchmarkLongPollDelivery: one op is a burst of 100 session deltas
// broadcast to one LongPoll session and polled until all arrived (loopback
// HTTP, the client in the same process). Reports polls per burst.
func BenchmarkLongPollDelivery(b *testing.B) {
	ep := NewEndpoint(EndpointConfig{})
	ep.Handle("room:*", newFuncHandler())
	lp := NewLongPoll(ep, LongPollConfig{Node: "n1", Window: time.Hour})
	mux := http.NewServeMux()
	mux.Handle("/socket/longpoll", lp)
	srv := httptest.NewServer(mux)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		_ = ep.Shutdown(ctx)
		srv.CloseClientConnections()
		srv.Close()
	}()
	get := func(u string) lpAnswer {
		resp, err := http.Get(u)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		var a lpAnswer
		if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
			b.Fatal(err)
		}
		return a
	}
	base := srv.URL + "/socket/longpoll?vsn=2.0.0"
	tok := get(base).Token
	u := base + "&token=" + url.QueryEscape(tok)
	resp, err := http.Post(u, "application/x-ndjson", strings.NewReader(`["3","3","room:lobby","phx_join",{}]`))
	if err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
	if a := get(u); len(a.Messages) != 1 {
		b.Fatalf("join: %+v", a)
	}
	const burst = 100
	polls := 0
	b.ReportAllocs()
	for b.Loop() {
		for range burst {
			ep.Hub().Broadcast("room:lobby", "delta", benchPayload, nil)
		}
		for got := 0; got < burst; {
			a := get(u)
			polls++
			got += len(a.Messages)
		}
	}
	b.ReportMetric(float64(polls)/float64(b.N), "polls/op")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*burst), "ns/frame")
}

// Posts from several goroutines, broadcasts and a poller at once: every
// reply and every broadcast arrives exactly once, broadcasts in order.
func TestLongPollConcurrentPostsPollsAndBroadcasts(t *testing.T) {
	ls := newLPServer(t, EndpointConfig{}, LongPollConfig{Window: time.Hour}, map[string]Handler{"room:*": newFuncHandler()})
	c := ls.client(t, "?vsn=2.0.0")
	c.joinLobby()
	const posters, perPoster, broadcasts = 4, 25, 200
	var wg sync.WaitGroup
	for p := range posters {
		wg.Go(func() {
			for i := range perPoster {
				if a := c.post(fmt.Sprintf(`[null,"p%d-%d","phoenix","heartbeat",{}]`, p, i)); a.Status != 200 {
					t.Errorf("post: %+v", a)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for i := range broadcasts {
			ls.ep.Hub().Broadcast("room:lobby", "ev", json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), nil)
		}
	})
	replies := map[string]int{}
	next := 0
	for len(replies) < posters*perPoster || next < broadcasts {
		a := c.poll()
		if a.Status != 200 && a.Status != 204 {
			t.Fatalf("poll: %+v", a)
		}
		for _, m := range a.Messages {
			var f []json.RawMessage
			if err := json.Unmarshal([]byte(m), &f); err != nil || len(f) != 5 {
				t.Fatalf("frame %q", m)
			}
			if string(f[3]) == `"phx_reply"` {
				var ref string
				_ = json.Unmarshal(f[1], &ref)
				if replies[ref]++; replies[ref] > 1 {
					t.Fatalf("reply %s twice", ref)
				}
				continue
			}
			if want := fmt.Sprintf(`{"n":%d}`, next); string(f[4]) != want {
				t.Fatalf("broadcast %s, want %s", f[4], want)
			}
			next++
		}
	}
	wg.Wait()
}
