package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// wsClient is a minimal Phoenix V2 client for Go tests: it speaks raw frames
// so tests see exactly what the server sends.
type wsClient struct {
	t    *testing.T
	conn *websocket.Conn
	ref  atomic.Int64
}

// frame is one decoded V2 frame.
type frame struct {
	JoinRef, Ref *string
	Topic, Event string
	Payload      json.RawMessage
}

// sessionEvent is the payload of a session event push.
type sessionEvent struct {
	Session string          `json:"session"`
	Epoch   int64           `json:"epoch"`
	Seq     int64           `json:"seq"`
	Type    string          `json:"type"`
	Data    json.RawMessage `json:"data"`
}

func dialWS(t *testing.T, baseURL, token string) *wsClient {
	t.Helper()
	u := strings.Replace(baseURL, "http://", "ws://", 1) + "/socket/websocket?vsn=2.0.0&token=" + token
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, u, nil)
	if err != nil {
		t.Fatalf("dial %s: %v", u, err)
	}
	t.Cleanup(func() { conn.CloseNow() })
	return &wsClient{t: t, conn: conn}
}

func (c *wsClient) send(joinRef, topic, event string, payload any) string {
	c.t.Helper()
	ref := strconv.FormatInt(c.ref.Add(1), 10)
	if joinRef == "" {
		joinRef = ref
	}
	jr := any(joinRef)
	if topic == "phoenix" {
		jr = nil
	}
	b, _ := json.Marshal([]any{jr, ref, topic, event, payload})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.conn.Write(ctx, websocket.MessageText, b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
	return ref
}

func (c *wsClient) read(ctx context.Context) (frame, error) {
	_, b, err := c.conn.Read(ctx)
	if err != nil {
		return frame{}, err
	}
	var raw [5]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return frame{}, fmt.Errorf("bad frame %s: %w", b, err)
	}
	var f frame
	_ = json.Unmarshal(raw[0], &f.JoinRef)
	_ = json.Unmarshal(raw[1], &f.Ref)
	_ = json.Unmarshal(raw[2], &f.Topic)
	_ = json.Unmarshal(raw[3], &f.Event)
	f.Payload = raw[4]
	return f, nil
}

// until reads frames until one has the given ref, collecting the session
// events seen on the way.
func (c *wsClient) until(ref string) (frame, []sessionEvent) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var evs []sessionEvent
	for {
		f, err := c.read(ctx)
		if err != nil {
			c.t.Fatalf("waiting for ref %s: %v (events so far %+v)", ref, err, evs)
		}
		if f.Ref != nil && *f.Ref == ref && f.Event == "phx_reply" {
			return f, evs
		}
		var ev sessionEvent
		if f.Ref == nil && json.Unmarshal(f.Payload, &ev) == nil && ev.Type != "" {
			evs = append(evs, ev)
		}
	}
}

// join joins topic and returns the reply payload.
func (c *wsClient) join(topic string, payload any) map[string]any {
	c.t.Helper()
	ref := c.send("", topic, "phx_join", payload)
	f, _ := c.until(ref)
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

// barrier sends a heartbeat and returns every session event that arrived
// before its reply. Frames are written in enqueue order, so everything the
// server queued for this socket before the heartbeat is in the result.
func (c *wsClient) barrier() []sessionEvent {
	c.t.Helper()
	ref := c.send("", "phoenix", "heartbeat", map[string]any{})
	_, evs := c.until(ref)
	return evs
}

// eventsUntil reads session events until one of type typ arrives.
func (c *wsClient) eventsUntil(typ string) []sessionEvent {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var evs []sessionEvent
	for {
		f, err := c.read(ctx)
		if err != nil {
			c.t.Fatalf("waiting for %s: %v (events so far %+v)", typ, err, evs)
		}
		var ev sessionEvent
		if f.Ref == nil && json.Unmarshal(f.Payload, &ev) == nil && ev.Type != "" {
			evs = append(evs, ev)
			if ev.Type == typ {
				return evs
			}
		}
	}
}
