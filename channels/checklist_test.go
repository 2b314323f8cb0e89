package channels

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/coder/websocket"
	"github.com/relaygw/relay/internal/testkit/phxtest"
	"github.com/relaygw/relay/internal/trace"
)

// Each TestChecklist* test follows the checklist item of docs/PHOENIX.md
// whose number its name starts with (TestChecklist01UpgradeWithAllowedOrNoOrigin
// is item 1).

func roomServer(t *testing.T, h *funcHandler, cfg EndpointConfig) *testServer {
	return newTestServer(t, cfg, map[string]Handler{"room:*": h})
}

func joinLobby(c *phxtest.T, joinRef string) {
	c.TB().Helper()
	c.SendText(`["` + joinRef + `","` + joinRef + `","room:lobby","phx_join",{}]`)
	c.Expect(`["` + joinRef + `","` + joinRef + `","room:lobby","phx_reply",{"status":"ok","response":{}}]`)
}

func TestChecklist01UpgradeWithAllowedOrNoOrigin(t *testing.T) {
	ts := roomServer(t, newFuncHandler(), EndpointConfig{AllowedOrigins: []string{"*.example.com"}})
	for _, origin := range []string{"", "https://app.example.com", "https://example.com", "http://" + strings.TrimPrefix(ts.srv.URL, "http://")} {
		opts := &websocket.DialOptions{HTTPHeader: http.Header{}}
		if origin != "" {
			opts.HTTPHeader.Set("Origin", origin)
		}
		c, err := ts.tryDial(t, "?vsn=2.0.0", opts)
		if err != nil {
			t.Fatalf("origin %q: %v", origin, err)
		}
		if c.Resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("origin %q: status %d", origin, c.Resp.StatusCode)
		}
		c.Heartbeat("1")
	}
}

func TestChecklist02NonGetIs400(t *testing.T) {
	ts := roomServer(t, newFuncHandler(), EndpointConfig{})
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
		req, _ := http.NewRequest(m, ts.srv.URL+"/socket/websocket?vsn=2.0.0", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("%s: status %d, want 400", m, resp.StatusCode)
		}
	}
}

func TestChecklist03OriginNotAllowedIs403(t *testing.T) {
	ts := roomServer(t, newFuncHandler(), EndpointConfig{AllowedOrigins: []string{"*.example.com", "https://app.test"}})
	for _, origin := range []string{"https://evil.com", "https://example.com.evil.com", "http://app.test", "null"} {
		opts := &websocket.DialOptions{HTTPHeader: http.Header{"Origin": {origin}}}
		c, err := ts.tryDial(t, "?vsn=2.0.0", opts)
		if err == nil {
			t.Fatalf("origin %q: upgraded", origin)
		}
		if c.Resp == nil || c.Resp.StatusCode != http.StatusForbidden {
			t.Fatalf("origin %q: want 403, got %v", origin, c.Resp)
		}
		expectRefusalBody(t, c.Resp, "Origin")
	}
}

func TestChecklist04VersionNegotiation(t *testing.T) {
	ts := roomServer(t, newFuncHandler(), EndpointConfig{})
	for _, q := range []string{"?vsn=3.0.0", "?vsn=garbage", "?vsn=2.x", "?vsn=0.9.0"} {
		c, err := ts.tryDial(t, q, nil)
		if err == nil || c.Resp == nil || c.Resp.StatusCode != http.StatusForbidden {
			t.Fatalf("%s: want 403, got err=%v resp=%v", q, err, c.Resp)
		}
		expectRefusalBody(t, c.Resp, "vsn")
	}
	for _, q := range []string{"", "?vsn=1.0.0"} {
		c := ts.dial(t, q)
		c.SendText(`{"topic":"phoenix","event":"heartbeat","payload":{},"ref":"1"}`)
		c.Expect(`{"topic":"phoenix","event":"phx_reply","payload":{"status":"ok","response":{}},"ref":"1"}`)
		c.SendText(`{"topic":"room:lobby","event":"phx_join","payload":{},"ref":"2","join_ref":"2"}`)
		c.Expect(`{"topic":"room:lobby","event":"phx_reply","payload":{"status":"ok","response":{}},"ref":"2"}`)
		ts.ep.Hub().Broadcast("room:lobby", "new_msg", json.RawMessage(`{"body":"hi"}`), nil)
		c.Expect(`{"topic":"room:lobby","event":"new_msg","payload":{"body":"hi"},"ref":null}`)
	}
}

func TestChecklist05ConnectRefusedIs403(t *testing.T) {
	ts := roomServer(t, newFuncHandler(), EndpointConfig{
		Connect: func(r *http.Request, params url.Values, token string) (any, error) {
			if token != "good" {
				return nil, errTest
			}
			return "user-1", nil
		},
	})
	c, err := ts.tryDial(t, "?vsn=2.0.0&token=bad", nil)
	if err == nil || c.Resp == nil || c.Resp.StatusCode != http.StatusForbidden {
		t.Fatalf("want 403, got err=%v resp=%v", err, c.Resp)
	}
	expectRefusalBody(t, c.Resp, errTest.Error())
	ts.dial(t, "?vsn=2.0.0&token=good").Heartbeat("1")
}

// expectRefusalBody checks that a refused upgrade's body is the documented
// JSON {"error":"forbidden","message":…} and that the message mentions what.
func expectRefusalBody(t *testing.T, resp *http.Response, what string) {
	t.Helper()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("refusal Content-Type %q, want application/json", ct)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var body struct{ Error, Message string }
	if err := json.Unmarshal(b, &body); err != nil || body.Error != "forbidden" || !strings.Contains(body.Message, what) {
		t.Fatalf("refusal body %q (%v), want {\"error\":\"forbidden\",\"message\":…%s…}", b, err, what)
	}
}

func TestChecklist06AuthTokenSubprotocol(t *testing.T) {
	tokens := make(chan string, 4)
	ts := roomServer(t, newFuncHandler(), EndpointConfig{
		Connect: func(r *http.Request, params url.Values, token string) (any, error) {
			tokens <- token
			return nil, nil
		},
	})
	c, err := ts.tryDial(t, "?vsn=2.0.0", &websocket.DialOptions{
		Subprotocols: []string{"phoenix", "base64url.bearer.phx.bXktc2VjcmV0"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Resp.Header.Get("Sec-WebSocket-Protocol"); got != "phoenix" {
		t.Fatalf("Sec-WebSocket-Protocol = %q, want phoenix", got)
	}
	if tok := <-tokens; tok != "my-secret" {
		t.Fatalf("connect saw token %q, want my-secret", tok)
	}
	c.Heartbeat("1")

	c2 := ts.dial(t, "?vsn=2.0.0&token=from-query")
	if got := c2.Resp.Header.Values("Sec-WebSocket-Protocol"); len(got) != 0 {
		t.Fatalf("no offer, but Sec-WebSocket-Protocol = %q", got)
	}
	if tok := <-tokens; tok != "from-query" {
		t.Fatalf("connect saw token %q, want from-query", tok)
	}
	// URL-safe alphabet is accepted too: "??>" encodes to "Pz8-" (std "Pz8+").
	if tok, ok := authFromProtocols(http.Header{"Sec-Websocket-Protocol": {"phoenix, base64url.bearer.phx.Pz8-"}}); tok != "??>" || !ok {
		t.Fatalf("url-safe token = %q, %v", tok, ok)
	}
	if tok, _ := authFromProtocols(http.Header{"Sec-Websocket-Protocol": {"base64url.bearer.phx.Pz8+"}}); tok != "??>" {
		t.Fatalf("std token = %q", tok)
	}
}

func TestChecklist07HeartbeatJoinedOrNot(t *testing.T) {
	ts := roomServer(t, newFuncHandler(), EndpointConfig{})
	c := ts.dial(t, "?vsn=2.0.0")
	c.Heartbeat("5")
	joinLobby(c, "3")
	c.Heartbeat("6")
}

func TestChecklist08JoinAccepted(t *testing.T) {
	h := newFuncHandler()
	h.join = func(ctx context.Context, ch *Channel, p json.RawMessage) (JoinResult, error) {
		var params struct{ Nick string }
		if err := json.Unmarshal(p, &params); err != nil {
			return JoinResult{}, err
		}
		return JoinResult{Response: map[string]any{"id": 1, "nick": params.Nick}}, nil
	}
	ts := roomServer(t, h, EndpointConfig{})
	c := ts.dial(t, "?vsn=2.0.0")
	c.SendText(`["3","3","room:lobby","phx_join",{"nick":"bob"}]`)
	c.Expect(`["3","3","room:lobby","phx_reply",{"status":"ok","response":{"id":1,"nick":"bob"}}]`)
	if st := ts.ep.Stats(); st.Joins != 1 || st.ChannelsOpen != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestChecklist09JoinRefused(t *testing.T) {
	h := newFuncHandler()
	h.join = func(ctx context.Context, ch *Channel, p json.RawMessage) (JoinResult, error) {
		return JoinResult{}, &ReplyError{Reason: "unauthorized", Fields: map[string]any{"message": "no"}}
	}
	ts := roomServer(t, h, EndpointConfig{})
	c := ts.dial(t, "?vsn=2.0.0")
	c.SendText(`["3","3","room:lobby","phx_join",{}]`)
	c.Expect(`["3","3","room:lobby","phx_reply",{"status":"error","response":{"message":"no","reason":"unauthorized"}}]`)
	c.SendText(`["3","4","room:lobby","new_msg",{}]`)
	c.Expect(`[null,"4","room:lobby","phx_reply",{"status":"error","response":{"reason":"unmatched topic"}}]`)
	// A plain error is not leaked: it becomes "internal".
	h.join = func(ctx context.Context, ch *Channel, p json.RawMessage) (JoinResult, error) {
		return JoinResult{}, errTest
	}
	c.SendText(`["5","5","room:lobby","phx_join",{}]`)
	c.Expect(`["5","5","room:lobby","phx_reply",{"status":"error","response":{"reason":"internal"}}]`)
	if len(h.terminations()) != 0 {
		t.Fatalf("refused joins were terminated: %v", h.terminations())
	}
}

func TestChecklist10JoinUnroutedTopic(t *testing.T) {
	ts := roomServer(t, newFuncHandler(), EndpointConfig{})
	c := ts.dial(t, "?vsn=2.0.0")
	c.SendText(`["3","3","nope:1","phx_join",{}]`)
	c.Expect(`[null,"3","nope:1","phx_reply",{"status":"error","response":{"reason":"unmatched topic"}}]`)
}

func TestChecklist11TooManyChannels(t *testing.T) {
	ts := roomServer(t, newFuncHandler(), EndpointConfig{})
	c := ts.dial(t, "?vsn=2.0.0")
	for i := 0; i < 100; i++ {
		r := fmt.Sprint(i + 1)
		c.SendText(`["` + r + `","` + r + `","room:` + r + `","phx_join",{}]`)
		c.Expect(`["` + r + `","` + r + `","room:` + r + `","phx_reply",{"status":"ok","response":{}}]`)
	}
	c.SendText(`["101","101","room:101","phx_join",{}]`)
	c.Expect(`["101","101","room:101","phx_reply",{"status":"error","response":{"reason":"too many channels joined"}}]`)
	// Rejoining an already joined topic is a duplicate join, not a 101st.
	c.SendText(`["102","102","room:1","phx_join",{}]`)
	c.Expect(`["102","102","room:1","phx_reply",{"status":"ok","response":{}}]`)
	c.Expect(`["1","1","room:1","phx_close",{}]`)
}

func TestChecklist12JoinCrashed(t *testing.T) {
	h := newFuncHandler()
	h.join = func(ctx context.Context, ch *Channel, p json.RawMessage) (JoinResult, error) {
		ch.Subscribe()
		panic("boom")
	}
	ts := roomServer(t, h, EndpointConfig{})
	c := ts.dial(t, "?vsn=2.0.0")
	c.SendText(`["3","3","room:lobby","phx_join",{}]`)
	c.Expect(`["3","3","room:lobby","phx_reply",{"status":"error","response":{"reason":"join crashed"}}]`)
	if n := ts.ep.Hub().Subscribers("room:lobby"); n != 0 {
		t.Fatalf("crashed join left %d subscribers", n)
	}
	c.Heartbeat("4")
}

func TestChecklist13DuplicateJoin(t *testing.T) {
	h := newFuncHandler()
	ts := roomServer(t, h, EndpointConfig{})
	c := ts.dial(t, "?vsn=2.0.0")
	joinLobby(c, "3")
	c.SendText(`["7","7","room:lobby","phx_join",{}]`)
	c.Expect(`["7","7","room:lobby","phx_reply",{"status":"ok","response":{}}]`)
	c.Expect(`["3","3","room:lobby","phx_close",{}]`)
	if got := h.waitTerminated(t); got != "room:lobby/3/duplicate_join" {
		t.Fatalf("terminated %q", got)
	}
	if n := ts.ep.Hub().Subscribers("room:lobby"); n != 1 {
		t.Fatalf("subscribers = %d, want 1", n)
	}
	ts.ep.Hub().Broadcast("room:lobby", "ev", json.RawMessage(`{}`), nil)
	c.Expect(`[null,null,"room:lobby","ev",{}]`)
}

func echoHandler() *funcHandler {
	h := newFuncHandler()
	h.handleIn = func(ctx context.Context, ch *Channel, event string, p json.RawMessage) (any, error) {
		switch event {
		case "echo":
			return p, nil
		case "silent":
			return nil, nil
		case "refuse":
			return nil, &ReplyError{Reason: "nope"}
		case "fail":
			return nil, errTest
		case "crash":
			panic("handler crash")
		case "close":
			ch.Close()
			return nil, nil
		}
		return nil, nil
	}
	return h
}

func TestChecklist14PushWithMatchingJoinRef(t *testing.T) {
	ts := roomServer(t, echoHandler(), EndpointConfig{})
	c := ts.dial(t, "?vsn=2.0.0")
	joinLobby(c, "3")
	c.SendText(`["3","4","room:lobby","echo",{"body":"hi"}]`)
	c.Expect(`["3","4","room:lobby","phx_reply",{"status":"ok","response":{"body":"hi"}}]`)
	c.SendText(`["3","5","room:lobby","silent",{}]`)
	c.Heartbeat("6") // no reply for "5" came before the heartbeat reply
	c.SendText(`["3","7","room:lobby","refuse",{}]`)
	c.Expect(`["3","7","room:lobby","phx_reply",{"status":"error","response":{"reason":"nope"}}]`)
	c.SendText(`["3","8","room:lobby","fail",{}]`)
	c.Expect(`["3","8","room:lobby","phx_reply",{"status":"error","response":{"reason":"internal"}}]`)
}

func TestChecklist15PushWithNullJoinRef(t *testing.T) {
	ts := roomServer(t, echoHandler(), EndpointConfig{})
	c := ts.dial(t, "?vsn=2.0.0")
	joinLobby(c, "3")
	c.SendText(`[null,"4","room:lobby","echo",{"n":1}]`)
	c.Expect(`["3","4","room:lobby","phx_reply",{"status":"ok","response":{"n":1}}]`)
}

func TestChecklist16PushWithStaleJoinRef(t *testing.T) {
	ts := roomServer(t, echoHandler(), EndpointConfig{})
	c := ts.dial(t, "?vsn=2.0.0")
	joinLobby(c, "3")
	c.SendText(`["7","7","room:lobby","phx_join",{}]`)
	c.Expect(`["7","7","room:lobby","phx_reply",{"status":"ok","response":{}}]`)
	c.Expect(`["3","3","room:lobby","phx_close",{}]`)
	c.SendText(`["3","8","room:lobby","echo",{}]`)
	c.Heartbeat("9")
	waitTrace(t, ts.tr, trace.Kind("push.stale", "join_ref", "3"))
}

func TestChecklist17PushToUnjoinedTopic(t *testing.T) {
	ts := roomServer(t, echoHandler(), EndpointConfig{})
	c := ts.dial(t, "?vsn=2.0.0")
	c.SendText(`["3","4","room:other","echo",{}]`)
	c.Expect(`[null,"4","room:other","phx_reply",{"status":"error","response":{"reason":"unmatched topic"}}]`)
}

func TestChecklist18LeaveJoinedTopic(t *testing.T) {
	h := echoHandler()
	ts := roomServer(t, h, EndpointConfig{})
	c := ts.dial(t, "?vsn=2.0.0")
	joinLobby(c, "3")
	c.SendText(`["3","9","room:lobby","phx_leave",{}]`)
	c.Expect(`["3","9","room:lobby","phx_reply",{"status":"ok","response":{}}]`)
	c.Expect(`["3","3","room:lobby","phx_close",{}]`)
	if got := h.waitTerminated(t); got != "room:lobby/3/leave" {
		t.Fatalf("terminated %q", got)
	}
	c.SendText(`["3","10","room:lobby","echo",{}]`)
	c.Expect(`[null,"10","room:lobby","phx_reply",{"status":"error","response":{"reason":"unmatched topic"}}]`)
	if n := ts.ep.Hub().Subscribers("room:lobby"); n != 0 {
		t.Fatalf("subscribers = %d after leave", n)
	}
}

func TestChecklist19LeaveUnjoinedTopic(t *testing.T) {
	ts := roomServer(t, echoHandler(), EndpointConfig{})
	c := ts.dial(t, "?vsn=2.0.0")
	c.SendText(`["12","13","room:lobby","phx_leave",{}]`)
	c.Expect(`["12","13","room:lobby","phx_reply",{"status":"ok","response":{}}]`)
	c.Heartbeat("14") // and no phx_close
}

func TestChecklist20LeaveWithStaleJoinRef(t *testing.T) {
	ts := roomServer(t, echoHandler(), EndpointConfig{})
	c := ts.dial(t, "?vsn=2.0.0")
	joinLobby(c, "3")
	c.SendText(`["7","7","room:lobby","phx_join",{}]`)
	c.Expect(`["7","7","room:lobby","phx_reply",{"status":"ok","response":{}}]`)
	c.Expect(`["3","3","room:lobby","phx_close",{}]`)
	c.SendText(`["3","8","room:lobby","phx_leave",{}]`)
	c.Heartbeat("9")
	c.SendText(`["7","10","room:lobby","echo",{"still":"joined"}]`)
	c.Expect(`["7","10","room:lobby","phx_reply",{"status":"ok","response":{"still":"joined"}}]`)
}

func TestChecklist21ChannelCrashThenRejoin(t *testing.T) {
	h := echoHandler()
	ts := roomServer(t, h, EndpointConfig{})
	c := ts.dial(t, "?vsn=2.0.0")
	joinLobby(c, "3")
	c.SendText(`["3","4","room:lobby","crash",{}]`)
	c.Expect(`["3","3","room:lobby","phx_error",{"reason":"channel_crash"}]`)
	if got := h.waitTerminated(t); got != "room:lobby/3/crash" {
		t.Fatalf("terminated %q", got)
	}
	c.Heartbeat("5") // the socket survives
	c.SendText(`["6","6","room:lobby","phx_join",{}]`)
	c.Expect(`["6","6","room:lobby","phx_reply",{"status":"ok","response":{}}]`)
	c.SendText(`["6","7","room:lobby","echo",{"ok":true}]`)
	c.Expect(`["6","7","room:lobby","phx_reply",{"status":"ok","response":{"ok":true}}]`)
}

func TestChecklist22ServerCloseSendsPhxClose(t *testing.T) {
	h := echoHandler()
	ts := roomServer(t, h, EndpointConfig{})
	c := ts.dial(t, "?vsn=2.0.0")
	joinLobby(c, "3")
	c.SendText(`["3","4","room:lobby","close",{}]`)
	c.Expect(`["3","3","room:lobby","phx_close",{}]`)
	if got := h.waitTerminated(t); got != "room:lobby/3/closed" {
		t.Fatalf("terminated %q", got)
	}
	c.SendText(`["3","5","room:lobby","echo",{}]`)
	c.Expect(`[null,"5","room:lobby","phx_reply",{"status":"error","response":{"reason":"unmatched topic"}}]`)
}

func TestChecklist23ServerPushAndBroadcast(t *testing.T) {
	chans := make(chan *Channel, 1)
	h := newFuncHandler()
	h.join = func(ctx context.Context, ch *Channel, p json.RawMessage) (JoinResult, error) {
		ch.Subscribe()
		chans <- ch
		return JoinResult{}, nil
	}
	ts := roomServer(t, h, EndpointConfig{})
	c := ts.dial(t, "?vsn=2.0.0")
	joinLobby(c, "3")
	ch := <-chans
	if err := ch.Push("new_msg", map[string]string{"body": "hi"}); err != nil {
		t.Fatal(err)
	}
	c.Expect(`["3",null,"room:lobby","new_msg",{"body":"hi"}]`)
	if n := ts.ep.Hub().Broadcast("room:lobby", "new_msg", json.RawMessage(`{"body":"all"}`), nil); n != 1 {
		t.Fatalf("broadcast delivered to %d", n)
	}
	c.Expect(`[null,null,"room:lobby","new_msg",{"body":"all"}]`)
	// presence_state is a push with the join_ref; presence_diff a broadcast.
	if err := ch.Push("presence_state", json.RawMessage(`{"u1":{"metas":[{"phx_ref":"a"}]}}`)); err != nil {
		t.Fatal(err)
	}
	c.Expect(`["3",null,"room:lobby","presence_state",{"u1":{"metas":[{"phx_ref":"a"}]}}]`)
	ch.Broadcast("presence_diff", []byte(`{"joins":{},"leaves":{}}`), nil)
	c.Expect(`[null,null,"room:lobby","presence_diff",{"joins":{},"leaves":{}}]`)
}

func TestChecklist24ForceDisconnect(t *testing.T) {
	ids := make(chan string, 1)
	h := newFuncHandler()
	h.join = func(ctx context.Context, ch *Channel, p json.RawMessage) (JoinResult, error) {
		ids <- ch.Socket().ID()
		return JoinResult{}, nil
	}
	ts := roomServer(t, h, EndpointConfig{})
	c := ts.dial(t, "?vsn=2.0.0")
	joinLobby(c, "3")
	if !ts.ep.Disconnect(<-ids) {
		t.Fatal("socket not found")
	}
	if code := c.ExpectClose(); code != websocket.StatusGoingAway {
		t.Fatalf("close code %d, want 1001", code)
	}
	if got := h.waitTerminated(t); got != "room:lobby/3/socket_closed" {
		t.Fatalf("terminated %q", got)
	}
	if ts.ep.Disconnect("no-such-socket") {
		t.Fatal("disconnected an unknown socket")
	}
}

func TestChecklist25IdleSocketClosed(t *testing.T) {
	ts := roomServer(t, newFuncHandler(), EndpointConfig{HeartbeatTimeout: 50e6})
	c := ts.dial(t, "?vsn=2.0.0")
	joinLobby(c, "3")
	if code := c.ExpectClose(); code != websocket.StatusGoingAway {
		t.Fatalf("close code %d, want 1001", code)
	}
	waitTrace(t, ts.tr, trace.Kind("socket.idle"))
}

func TestChecklist26ClientCloseCleansUp(t *testing.T) {
	h := newFuncHandler()
	ts := roomServer(t, h, EndpointConfig{})
	c := ts.dial(t, "?vsn=2.0.0")
	joinLobby(c, "3")
	c.SendText(`["4","4","room:other","phx_join",{}]`)
	c.Expect(`["4","4","room:other","phx_reply",{"status":"ok","response":{}}]`)
	// phoenix.js closes with 1000 "heartbeat timeout" when a heartbeat goes
	// unanswered.
	if err := c.Conn().Close(websocket.StatusNormalClosure, "heartbeat timeout"); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{h.waitTerminated(t): true, h.waitTerminated(t): true}
	if !got["room:lobby/3/socket_closed"] || !got["room:other/4/socket_closed"] {
		t.Fatalf("terminations %v", got)
	}
	waitTrace(t, ts.tr, trace.Kind("socket.end"))
	if st := ts.ep.Stats(); st.SocketsOpen != 0 || st.ChannelsOpen != 0 {
		t.Fatalf("stats after close: %+v", st)
	}
	if n := len(ts.ep.Hub().Topics()); n != 0 {
		t.Fatalf("hub still has %d topics", n)
	}
}

type binaryHandler struct {
	*funcHandler
	got chan string
}

func (h binaryHandler) HandleBinary(ctx context.Context, ch *Channel, event string, p []byte) (any, error) {
	h.got <- fmt.Sprintf("%s %x", event, p)
	if err := ch.Push("bin_push", Binary{1, 1}); err != nil {
		return nil, err
	}
	return Binary{7, 8}, nil
}

func TestChecklist27BinaryFrames(t *testing.T) {
	h := binaryHandler{funcHandler: newFuncHandler(), got: make(chan string, 1)}
	ts := newTestServer(t, EndpointConfig{}, map[string]Handler{"top": h})
	c := ts.dial(t, "?vsn=2.0.0")
	c.SendText(`["10","10","top","phx_join",{}]`)
	c.Expect(`["10","10","top","phx_reply",{"status":"ok","response":{}}]`)
	// The frame from docs/PHOENIX.md §2.2: join_ref "10", ref "1".
	c.SendBinary([]byte("\x00\x02\x01\x03\x0210" + "1" + "top" + "ev" + "\x01"))
	if got := <-h.got; got != "ev 01" {
		t.Fatalf("handler got %q", got)
	}
	got, bin := c.ReadText()
	if want := "\x00\x02\x03\x0810topbin_push\x01\x01"; !bin || got != want {
		t.Fatalf("push frame %q (binary %v), want %q", got, bin, want)
	}
	got, bin = c.ReadText()
	if want := "\x01\x02\x01\x03\x0210" + "1" + "top" + "ok" + "\x07\x08"; !bin || got != want {
		t.Fatalf("reply frame %q (binary %v), want %q", got, bin, want)
	}
	// A handler without HandleBinary refuses binary pushes.
	ts2 := roomServer(t, newFuncHandler(), EndpointConfig{})
	c2 := ts2.dial(t, "?vsn=2.0.0")
	joinLobby(c2, "3")
	c2.SendBinary([]byte("\x00\x01\x01\x0a\x023" + "4" + "room:lobby" + "ev" + "x"))
	c2.Expect(`["3","4","room:lobby","phx_reply",{"status":"error","response":{"reason":"binary payload not supported"}}]`)
}

func TestRefusedWhileDraining(t *testing.T) {
	ts := roomServer(t, newFuncHandler(), EndpointConfig{})
	c := ts.dial(t, "?vsn=2.0.0")
	joinLobby(c, "3")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- ts.ep.Shutdown(ctx) }()
	if code := c.ExpectClose(); code != websocket.StatusServiceRestart {
		t.Fatalf("close code %d, want 1012", code)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	c2, err := ts.tryDial(t, "?vsn=2.0.0", nil)
	if err == nil || c2.Resp == nil || c2.Resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("want 503 while draining, got err=%v resp=%v", err, c2.Resp)
	}
	if _, err := ts.ep.Attach(ctx, nil, V2, nil); !errors.Is(err, ErrShutdown) {
		t.Fatalf("attach while draining: %v", err)
	}
}
