package phxtest

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// DefaultTimeout bounds each step of a T unless the test sets T.Timeout.
const DefaultTimeout = 15 * time.Second

// T is a Socket bound to a test: every step fails the test on an error and
// waits at most Timeout. The socket is closed when the test ends. Use it
// from the test's goroutine only (it calls t.Fatal).
type T struct {
	S       *Socket
	Resp    *http.Response // the upgrade's HTTP response
	Timeout time.Duration
	t       testing.TB
}

// DialT opens url (ws://…, see URL) for test t and fails the test when the
// upgrade fails.
func DialT(t testing.TB, url string) *T {
	t.Helper()
	c, err := TryDialT(t, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TryDialT opens url with opts (nil for none) for test t. When the upgrade
// fails it returns the error and a T holding only Resp (the refusal's HTTP
// response, if one came).
func TryDialT(t testing.TB, url string, opts *websocket.DialOptions) (*T, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
	defer cancel()
	s, resp, err := Dial(ctx, url, opts)
	c := &T{S: s, Resp: resp, Timeout: DefaultTimeout, t: t}
	if err != nil {
		return c, err
	}
	t.Cleanup(s.Close)
	return c, nil
}

func (c *T) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), c.Timeout)
}

// Conn returns the underlying connection.
func (c *T) Conn() *websocket.Conn { return c.S.Conn() }

// Send writes one V2 frame and returns its ref (see Socket.Send).
func (c *T) Send(joinRef, topic, event string, payload any) string {
	c.t.Helper()
	ctx, cancel := c.ctx()
	defer cancel()
	ref, err := c.S.Send(ctx, joinRef, topic, event, payload)
	if err != nil {
		c.t.Fatal(err)
	}
	return ref
}

// Read reads one V2 frame; the error is returned, not fatal (a test may
// expect the socket to close).
func (c *T) Read(ctx context.Context) (Frame, error) { return c.S.Read(ctx) }

// Until reads frames until the reply to ref, and returns it with the
// session events read on the way.
func (c *T) Until(ref string) (Frame, []SessionEvent) {
	c.t.Helper()
	return c.readUntil("ref "+ref, func(f Frame, _ *SessionEvent) bool { return f.IsReply(ref) })
}

// Join joins topic with payload and returns the ok reply's response; any
// other reply fails the test.
func (c *T) Join(topic string, payload any) map[string]any {
	c.t.Helper()
	ref := c.Send("", topic, "phx_join", payload)
	f, _ := c.Until(ref)
	var r struct {
		Status   string         `json:"status"`
		Response map[string]any `json:"response"`
	}
	_ = json.Unmarshal(f.Payload, &r)
	if r.Status != "ok" {
		c.t.Fatalf("join %s: %s", topic, f.Payload)
	}
	return r.Response
}

// Barrier sends a barrier (see Socket.Barrier) and returns every session
// event that arrived before its reply: everything the server queued for
// this socket before it.
func (c *T) Barrier() []SessionEvent {
	c.t.Helper()
	ref := c.Send("", BarrierTopic, "phx_leave", map[string]any{})
	_, evs := c.Until(ref)
	return evs
}

// EventsUntil reads session events until one of type typ arrives, and
// returns them all, that one last.
func (c *T) EventsUntil(typ string) []SessionEvent {
	c.t.Helper()
	_, evs := c.readUntil(typ, func(_ Frame, ev *SessionEvent) bool { return ev != nil && ev.Type == typ })
	return evs
}

// readUntil reads frames until stop says so, collecting the session events
// read on the way (the stopping frame's too, when it is one). It fails the
// test, naming what, when the read fails first.
func (c *T) readUntil(what string, stop func(f Frame, ev *SessionEvent) bool) (Frame, []SessionEvent) {
	c.t.Helper()
	ctx, cancel := c.ctx()
	defer cancel()
	var evs []SessionEvent
	for {
		f, err := c.S.Read(ctx)
		if err != nil {
			c.t.Fatalf("waiting for %s: %v (events so far %+v)", what, err, evs)
		}
		var evp *SessionEvent
		if ev, ok := f.SessionEvent(); ok {
			evs = append(evs, ev)
			evp = &evs[len(evs)-1]
		}
		if stop(f, evp) {
			return f, evs
		}
	}
}

// SendText writes frame as one text message, as is.
func (c *T) SendText(frame string) {
	c.t.Helper()
	ctx, cancel := c.ctx()
	defer cancel()
	if err := c.S.WriteText(ctx, frame); err != nil {
		c.t.Fatalf("send %s: %v", frame, err)
	}
}

// SendBinary writes b as one binary message.
func (c *T) SendBinary(b []byte) {
	c.t.Helper()
	ctx, cancel := c.ctx()
	defer cancel()
	if err := c.S.WriteBinary(ctx, b); err != nil {
		c.t.Fatalf("send binary: %v", err)
	}
}

// ReadText reads the next message as is; binary reports a binary message.
func (c *T) ReadText() (frame string, binary bool) {
	c.t.Helper()
	ctx, cancel := c.ctx()
	defer cancel()
	typ, b, err := c.S.ReadMessage(ctx)
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	return string(b), typ == websocket.MessageBinary
}

// Expect reads the next message and compares it with want byte for byte.
func (c *T) Expect(want string) {
	c.t.Helper()
	got, _ := c.ReadText()
	if got != want {
		c.t.Fatalf("frame mismatch\n got: %s\nwant: %s", got, want)
	}
}

// ExpectClose reads until the server closes the connection and returns the
// close status; frames read before it are logged. A connection that ends
// without a close frame fails the test.
func (c *T) ExpectClose() websocket.StatusCode {
	c.t.Helper()
	ctx, cancel := c.ctx()
	defer cancel()
	for {
		_, b, err := c.S.ReadMessage(ctx)
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

// Heartbeat sends a heartbeat with ref, then a barrier (Socket.Barrier)
// with ref "b"+ref, and expects the heartbeat's ok reply as the very next
// frame and the barrier's right after it: proof that the server handled
// every earlier frame and wrote everything they produced before the
// heartbeat. (The heartbeat reply alone proves less: it passes frames
// queued before it, but never the barrier reply queued after it.)
func (c *T) Heartbeat(ref string) {
	c.t.Helper()
	c.SendText(`[null,"` + ref + `","phoenix","heartbeat",{}]`)
	c.SendText(`[null,"b` + ref + `","` + BarrierTopic + `","phx_leave",{}]`)
	c.Expect(`[null,"` + ref + `","phoenix","phx_reply",{"status":"ok","response":{}}]`)
	c.Expect(`[null,"b` + ref + `","` + BarrierTopic + `","phx_reply",{"status":"ok","response":{}}]`)
}

// TB returns the test the socket is bound to.
func (c *T) TB() testing.TB { return c.t }

// NextEvent reads frames until one with the given event name arrives and
// returns it.
func (c *T) NextEvent(event string) Frame {
	c.t.Helper()
	ctx, cancel := c.ctx()
	defer cancel()
	for {
		f, err := c.S.Read(ctx)
		if err != nil {
			c.t.Fatalf("waiting for %s: %v", event, err)
		}
		if f.Event == event {
			return f
		}
	}
}
