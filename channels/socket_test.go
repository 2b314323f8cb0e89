package channels

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/coder/websocket"
	"github.com/relaygw/relay/internal/testkit/phxtest"
	"github.com/relaygw/relay/internal/trace"
)

// A join that subscribes, then reads a "replay", gets live broadcasts that
// arrived during the join held and filtered by Skip: the client sees the
// reply, the replay, then only the live events after the replay.
func TestJoinSeamHoldsAndSkipsBroadcasts(t *testing.T) {
	hub := NewHub()
	subscribed := make(chan struct{})
	release := make(chan struct{})
	h := newFuncHandler()
	h.join = func(ctx context.Context, ch *Channel, p json.RawMessage) (JoinResult, error) {
		ch.Subscribe()
		close(subscribed)
		<-release // broadcasts 1..3 arrive now
		if err := ch.Push("presence_state", json.RawMessage(`{}`)); err != nil {
			return JoinResult{}, err
		}
		return JoinResult{
			Response: map[string]int{"seq": 2},
			Then:     []Push{{Event: "ev", Payload: json.RawMessage(`{"seq":1}`)}, {Event: "ev", Payload: []byte(`{"seq":2}`)}},
			Skip:     func(b *Broadcast) bool { return b.Meta.(int) <= 2 },
		}, nil
	}
	ts := newTestServer(t, EndpointConfig{Hub: hub}, map[string]Handler{"room:*": h})
	c := ts.dial(t, "?vsn=2.0.0")
	c.SendText(`["3","3","room:lobby","phx_join",{}]`)
	<-subscribed
	for seq := 1; seq <= 3; seq++ {
		if n := hub.Broadcast("room:lobby", "ev", json.RawMessage(`{"seq":`+string(rune('0'+seq))+`}`), seq); n != 1 {
			t.Fatalf("broadcast %d delivered to %d", seq, n)
		}
	}
	if got := ts.tr.Count(trace.Kind("channel.held")); got != 3 {
		t.Fatalf("held %d broadcasts, want 3", got)
	}
	close(release)
	c.Expect(`["3","3","room:lobby","phx_reply",{"status":"ok","response":{"seq":2}}]`)
	c.Expect(`["3",null,"room:lobby","ev",{"seq":1}]`)
	c.Expect(`["3",null,"room:lobby","ev",{"seq":2}]`)
	// Held frames keep their arrival order: broadcast 3 came before the push.
	c.Expect(`[null,null,"room:lobby","ev",{"seq":3}]`)
	c.Expect(`["3",null,"room:lobby","presence_state",{}]`)
	hub.Broadcast("room:lobby", "ev", json.RawMessage(`{"seq":4}`), 4)
	c.Expect(`[null,null,"room:lobby","ev",{"seq":4}]`)
	if got := ts.tr.Count(trace.Kind("channel.skipped")); got != 2 {
		t.Fatalf("skipped %d, want 2", got)
	}
}

// Frames of one socket are handled in order: a push sent while a join is
// still running is handled only after the join's reply is written.
func TestJoinBlocksLaterFrames(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var order []string
	h := newFuncHandler()
	h.join = func(ctx context.Context, ch *Channel, p json.RawMessage) (JoinResult, error) {
		<-release
		mu.Lock()
		order = append(order, "join")
		mu.Unlock()
		return JoinResult{}, nil
	}
	h.handleIn = func(ctx context.Context, ch *Channel, ev string, p json.RawMessage) (any, error) {
		mu.Lock()
		order = append(order, "push")
		mu.Unlock()
		return p, nil
	}
	ts := roomServer(t, h, EndpointConfig{})
	c := ts.dial(t, "?vsn=2.0.0")
	c.SendText(`["3","3","room:lobby","phx_join",{}]`)
	c.SendText(`["3","4","room:lobby","echo",{"n":1}]`)
	waitTrace(t, ts.tr, trace.Kind("join.start"))
	close(release)
	c.Expect(`["3","3","room:lobby","phx_reply",{"status":"ok","response":{}}]`)
	c.Expect(`["3","4","room:lobby","phx_reply",{"status":"ok","response":{"n":1}}]`)
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(order, ",") != "join,push" {
		t.Fatalf("order %v", order)
	}
}

func TestCloseDuringJoinClosesAfterReply(t *testing.T) {
	h := newFuncHandler()
	h.join = func(ctx context.Context, ch *Channel, p json.RawMessage) (JoinResult, error) {
		ch.Close()
		return JoinResult{}, nil
	}
	ts := roomServer(t, h, EndpointConfig{})
	c := ts.dial(t, "?vsn=2.0.0")
	c.SendText(`["3","3","room:lobby","phx_join",{}]`)
	c.Expect(`["3","3","room:lobby","phx_reply",{"status":"ok","response":{}}]`)
	c.Expect(`["3","3","room:lobby","phx_close",{}]`)
	if got := h.waitTerminated(t); got != "room:lobby/3/closed" {
		t.Fatalf("terminated %q", got)
	}
}

func TestBadFramesCloseTheSocket(t *testing.T) {
	ts := roomServer(t, newFuncHandler(), EndpointConfig{MaxFrameBytes: 128})
	cases := []struct {
		query string
		send  func(c *phxtest.T)
		code  websocket.StatusCode
	}{
		{"?vsn=2.0.0", func(c *phxtest.T) { c.SendText(`["1","1","t"`) }, websocket.StatusCode(CloseMalformed)},
		{"?vsn=2.0.0", func(c *phxtest.T) { c.SendText(`["1","1","t","e",{"x":"` + strings.Repeat("a", 200) + `"}]`) }, websocket.StatusMessageTooBig},
		{"?vsn=2.0.0", func(c *phxtest.T) { c.SendBinary([]byte{9, 9}) }, websocket.StatusCode(CloseMalformed)},
		{"", func(c *phxtest.T) { c.SendBinary([]byte{0, 0, 0, 0, 0}) }, websocket.StatusCode(CloseUnsupportedData)},
	}
	for i, tc := range cases {
		c := ts.dial(t, tc.query)
		tc.send(c)
		if code := c.ExpectClose(); code != tc.code {
			t.Fatalf("case %d: close %d, want %d", i, code, tc.code)
		}
	}
	waitTrace(t, ts.tr, func(e trace.Event) bool { return e.Kind == "socket.end" && ts.ep.Stats().SocketsOpen == 0 })
	if st := ts.ep.Stats(); st.BadFrames != uint64(len(cases)) {
		t.Fatalf("bad frames %d, want %d", st.BadFrames, len(cases))
	}
}

// A socket whose writer is stuck overflows its queue and is cut with 1013
// without blocking the broadcaster.
func TestSlowConsumerIsCut(t *testing.T) {
	ep := NewEndpoint(EndpointConfig{QueueSize: 4, Tracer: trace.New()})
	ep.Handle("room:*", newFuncHandler())
	s, mt := memSocket(t, ep, V2)
	mt.gate, mt.waiting = make(chan struct{}), make(chan int, 1)
	recv(t, s, `["3","3","room:lobby","phx_join",{}]`)
	if n := <-mt.waiting; n != 1 { // the writer holds the join reply, stuck
		t.Fatalf("first batch %d frames", n)
	}
	fast, fastT := memSocket(t, ep, V2)
	recv(t, fast, `["3","3","room:lobby","phx_join",{}]`)
	delivered := 0
	fastT.waitFrames(t, 1)
	for i := 0; i < 10; i++ {
		delivered += ep.Hub().Broadcast("room:lobby", "ev", json.RawMessage(`{}`), nil)
		fastT.waitFrames(t, i+2) // keep the fast socket's queue short
	}
	waitTrace(t, ep.cfg.Tracer, trace.Kind("socket.slow", "socket", s.ID()))
	close(mt.gate)
	if code := mt.waitClosed(t); code != CloseSlowConsumer {
		t.Fatalf("close code %d, want 1013", code)
	}
	fastT.waitFrames(t, 11) // join reply + 10 broadcasts
	st := ep.Stats()
	if st.SlowConsumers != 1 || st.QueueDrops == 0 {
		t.Fatalf("stats %+v", st)
	}
	if delivered != 10+4 { // fast took all 10; slow took 4 before overflowing
		t.Fatalf("delivered %d", delivered)
	}
	if err := s.Receive(Frame{Data: []byte(`[null,"9","phoenix","heartbeat",{}]`)}); !errors.Is(err, ErrSocketClosed) {
		t.Fatalf("receive after cut: %v", err)
	}
}

// Sockets of both serializers on one topic: the hub encodes once per
// serializer and every socket gets the very same bytes.
func TestFanoutEncodesOncePerSerializer(t *testing.T) {
	ep := NewEndpoint(EndpointConfig{})
	ep.Handle("room:*", newFuncHandler())
	var ts []*memTransport
	for i := 0; i < 50; i++ {
		ser, join := V2, `["1","1","room:lobby","phx_join",{}]`
		if i%2 == 1 {
			ser, join = V1, `{"topic":"room:lobby","event":"phx_join","payload":{},"ref":"1","join_ref":"1"}`
		}
		s, mt := memSocket(t, ep, ser)
		recv(t, s, join)
		ts = append(ts, mt)
	}
	if n := ep.Hub().Broadcast("room:lobby", "ev", json.RawMessage(`{"a":1}`), nil); n != 50 {
		t.Fatalf("delivered %d", n)
	}
	var first [2]*byte
	for i, mt := range ts {
		f := mt.waitFrames(t, 2)[1]
		want := `[null,null,"room:lobby","ev",{"a":1}]`
		if i%2 == 1 {
			want = `{"topic":"room:lobby","event":"ev","payload":{"a":1},"ref":null}`
		}
		if string(f.Data) != want {
			t.Fatalf("socket %d got %s", i, f.Data)
		}
		if first[i%2] == nil {
			first[i%2] = &f.Data[0]
		} else if first[i%2] != &f.Data[0] {
			t.Fatalf("socket %d got a separately encoded frame", i)
		}
	}
}

// Many real WebSocket clients on one topic all get every broadcast, in order.
func TestFanoutManySockets(t *testing.T) {
	ts := roomServer(t, newFuncHandler(), EndpointConfig{})
	const sockets, msgs = 100, 20
	clients := make([]*phxtest.T, sockets)
	for i := range clients {
		clients[i] = ts.dial(t, "?vsn=2.0.0")
		joinLobby(clients[i], "1")
	}
	for i := 0; i < msgs; i++ {
		if n := ts.ep.Hub().Broadcast("room:lobby", "ev", json.RawMessage(`{"i":`+itoa(i)+`}`), nil); n != sockets {
			t.Fatalf("delivered %d", n)
		}
	}
	for _, c := range clients {
		for i := 0; i < msgs; i++ {
			c.Expect(`[null,null,"room:lobby","ev",{"i":` + itoa(i) + `}]`)
		}
	}
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

func TestShutdownWaitsForSockets(t *testing.T) {
	h := newFuncHandler()
	ts := roomServer(t, h, EndpointConfig{})
	var cs []*phxtest.T
	for i := 0; i < 5; i++ {
		c := ts.dial(t, "?vsn=2.0.0")
		joinLobby(c, "3")
		cs = append(cs, c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- ts.ep.Shutdown(ctx) }()
	for _, c := range cs {
		if code := c.ExpectClose(); code != websocket.StatusServiceRestart {
			t.Fatalf("close %d, want 1012", code)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := len(h.terminations()); n != 5 {
		t.Fatalf("terminated %d channels, want 5", n)
	}
	if st := ts.ep.Stats(); st.SocketsOpen != 0 {
		t.Fatalf("sockets open after shutdown: %d", st.SocketsOpen)
	}
}

func TestShutdownHonoursContext(t *testing.T) {
	ep := NewEndpoint(EndpointConfig{})
	s, mt := memSocket(t, ep, V2)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := ep.Shutdown(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("shutdown with a live socket and a canceled ctx: %v", err)
	}
	if code := mt.waitClosed(t); code != CloseRestart {
		t.Fatalf("close %d", code)
	}
	s.End()
	if err := ep.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestPushAfterCloseFails(t *testing.T) {
	ep := NewEndpoint(EndpointConfig{})
	chans := make(chan *Channel, 1)
	h := newFuncHandler()
	h.join = func(ctx context.Context, ch *Channel, p json.RawMessage) (JoinResult, error) {
		chans <- ch
		return JoinResult{}, nil
	}
	ep.Handle("room:*", h)
	s, mt := memSocket(t, ep, V1)
	recv(t, s, `{"topic":"room:lobby","event":"phx_join","payload":{},"ref":"1","join_ref":"1"}`)
	ch := <-chans
	if err := ch.Push("bin", Binary{1}); !errors.Is(err, ErrBinaryUnsupported) {
		t.Fatalf("binary push on V1: %v", err)
	}
	ch.Close()
	ch.Close()
	if err := ch.Push("ev", nil); !errors.Is(err, ErrChannelClosed) {
		t.Fatalf("push after close: %v", err)
	}
	f := mt.waitFrames(t, 2)
	if want := `{"topic":"room:lobby","event":"phx_close","payload":{},"ref":"1"}`; string(f[1].Data) != want {
		t.Fatalf("got %s", f[1].Data)
	}
	if got := h.terminations(); len(got) != 1 {
		t.Fatalf("terminations %v", got)
	}
}

// A frame whose join_ref, ref, topic or event is not valid UTF-8 closes the
// socket with 1007 before anything is echoed: the refs of a reply are the
// client's bytes, and a text frame carrying invalid UTF-8 is one the
// client's WebSocket library rejects (RFC 6455 §8.1). V1, V2 text and V2
// binary frames alike.
func TestInvalidUTF8InAFieldClosesWith1007(t *testing.T) {
	ts := roomServer(t, newFuncHandler(), EndpointConfig{})
	bad := "a\xffb"
	cases := []struct {
		name  string
		query string
		send  func(c *phxtest.T)
	}{
		{"v2 join_ref", "?vsn=2.0.0", func(c *phxtest.T) { c.SendText(`["` + bad + `","1","room:lobby","phx_join",{}]`) }},
		{"v2 ref", "?vsn=2.0.0", func(c *phxtest.T) { c.SendText(`[null,"` + bad + `","phoenix","heartbeat",{}]`) }},
		{"v2 topic", "?vsn=2.0.0", func(c *phxtest.T) { c.SendText(`["1","1","room:` + bad + `","phx_join",{}]`) }},
		{"v2 event", "?vsn=2.0.0", func(c *phxtest.T) { c.SendText(`["1","1","room:lobby","` + bad + `",{}]`) }},
		{"v2 payload", "?vsn=2.0.0", func(c *phxtest.T) { c.SendText(`["1","1","room:lobby","phx_join",{"k":"` + bad + `"}]`) }},
		{"v1 ref", "", func(c *phxtest.T) {
			c.SendText(`{"topic":"phoenix","event":"heartbeat","payload":{},"ref":"` + bad + `"}`)
		}},
		{"v1 join_ref", "", func(c *phxtest.T) {
			c.SendText(`{"topic":"room:lobby","event":"phx_join","payload":{},"ref":"1","join_ref":"` + bad + `"}`)
		}},
		{"v1 topic", "", func(c *phxtest.T) { c.SendText(`{"topic":"` + bad + `","event":"phx_join","payload":{},"ref":"1"}`) }},
		{"v1 event", "", func(c *phxtest.T) { c.SendText(`{"topic":"phoenix","event":"` + bad + `","payload":{},"ref":"1"}`) }},
		{"binary ref", "?vsn=2.0.0", func(c *phxtest.T) {
			f, err := encodeBinaryClientPush(StringRef("1"), Ref{raw: `"x"`}, "room:lobby", "ev", nil)
			if err != nil {
				t.Fatal(err)
			}
			f.Data[6] = 0xff // the ref's one byte
			c.SendBinary(f.Data)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := ts.dial(t, tc.query)
			tc.send(c)
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			_, b, err := c.Conn().Read(ctx)
			if err == nil {
				t.Fatalf("got a frame %q, want the close", b)
			}
			if code := websocket.CloseStatus(err); code != websocket.StatusCode(CloseMalformed) {
				t.Fatalf("close %d (%v), want 1007", code, err)
			}
		})
	}
	waitTrace(t, ts.tr, func(e trace.Event) bool { return e.Kind == "socket.end" && ts.ep.Stats().SocketsOpen == 0 })
	if st := ts.ep.Stats(); st.BadFrames != uint64(len(cases)) {
		t.Fatalf("bad frames %d, want %d", st.BadFrames, len(cases))
	}
}

// TestIdleSocketLeavesBeforeCloseHandshake: a socket declared dead by the
// heartbeat timeout ends its channels (Terminate: presences leave) at once,
// not when the close handshake with the silent client gives up; here the
// handshake never completes (End has not run).
func TestIdleSocketLeavesBeforeCloseHandshake(t *testing.T) {
	tr := trace.New()
	ep := NewEndpoint(EndpointConfig{HeartbeatTimeout: 10e6, Tracer: tr})
	h := newFuncHandler()
	ep.Handle("room:*", h)
	s, _ := memSocket(t, ep, V2)
	recv(t, s, `["3","3","room:lobby","phx_join",{}]`)
	waitTrace(t, tr, trace.Kind("socket.idle", "socket", s.ID()))
	if got := h.waitTerminated(t); got != "room:lobby/3/socket_closed" {
		t.Fatalf("terminated %q", got)
	}
	waitTrace(t, tr, trace.Kind("socket.dead", "socket", s.ID()))
	for _, ev := range tr.Events() {
		if ev.Kind == "socket.end" {
			t.Fatal("the socket ended before its channels were terminated; the test shows nothing")
		}
	}
	s.End() // the reading side stops: nothing is terminated twice
	if n := len(h.terminations()); n != 1 {
		t.Fatalf("%d terminations, want 1", n)
	}
}
