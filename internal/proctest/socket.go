package proctest

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/coder/websocket"
)

// Socket is a raw Phoenix V2 JSON client: it shows exactly the frames a
// node sends. Reads are not concurrent: one goroutine reads at a time.
type Socket struct {
	conn *websocket.Conn
	mu   sync.Mutex
	ref  int64

	events []SessionEvent // every session event read so far
}

// Frame is one decoded V2 frame [join_ref, ref, topic, event, payload].
type Frame struct {
	JoinRef, Ref *string
	Topic        string
	Event        string
	Payload      json.RawMessage
}

// SessionEvent is the payload of a session event push:
// {"session","epoch","seq","type","data","at"}.
type SessionEvent struct {
	Session string          `json:"session"`
	Epoch   int64           `json:"epoch"`
	Seq     int64           `json:"seq"`
	Type    string          `json:"type"`
	Data    json.RawMessage `json:"data"`
}

// DialSocket opens /socket/websocket?vsn=2.0.0&token=… on the node at
// baseURL ("http://host:port").
func DialSocket(ctx context.Context, baseURL, token string) (*Socket, error) {
	u := strings.Replace(baseURL, "http://", "ws://", 1) + "/socket/websocket?vsn=2.0.0&token=" + token
	conn, _, err := websocket.Dial(ctx, u, nil)
	if err != nil {
		return nil, fmt.Errorf("proctest: dial %s: %w", u, err)
	}
	conn.SetReadLimit(1 << 20)
	return &Socket{conn: conn}, nil
}

// Close drops the connection.
func (s *Socket) Close() { _ = s.conn.CloseNow() }

// Send writes one frame and returns its ref. joinRef "" uses the ref itself
// (a join); topic "phoenix" sends a null join ref.
func (s *Socket) Send(ctx context.Context, joinRef, topic, event string, payload any) (string, error) {
	s.mu.Lock()
	s.ref++
	ref := strconv.FormatInt(s.ref, 10)
	s.mu.Unlock()
	if joinRef == "" {
		joinRef = ref
	}
	jr := any(joinRef)
	if topic == "phoenix" {
		jr = nil
	}
	b, err := json.Marshal([]any{jr, ref, topic, event, payload})
	if err != nil {
		return "", err
	}
	if err := s.conn.Write(ctx, websocket.MessageText, b); err != nil {
		return "", fmt.Errorf("proctest: socket write: %w", err)
	}
	return ref, nil
}

// Read reads one frame. A session event is also recorded (Events). When the
// node closed the socket the error carries its close status (see
// websocket.CloseStatus).
func (s *Socket) Read(ctx context.Context) (Frame, error) {
	_, b, err := s.conn.Read(ctx)
	if err != nil {
		return Frame{}, err
	}
	var raw [5]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return Frame{}, fmt.Errorf("proctest: bad frame %s: %w", b, err)
	}
	var f Frame
	_ = json.Unmarshal(raw[0], &f.JoinRef)
	_ = json.Unmarshal(raw[1], &f.Ref)
	_ = json.Unmarshal(raw[2], &f.Topic)
	_ = json.Unmarshal(raw[3], &f.Event)
	f.Payload = raw[4]
	if ev, ok := f.SessionEvent(); ok {
		s.mu.Lock()
		s.events = append(s.events, ev)
		s.mu.Unlock()
	}
	return f, nil
}

// SessionEvent decodes f as a session event push.
func (f Frame) SessionEvent() (SessionEvent, bool) {
	var ev SessionEvent
	if f.Ref != nil || f.Event == "phx_reply" || json.Unmarshal(f.Payload, &ev) != nil || ev.Type == "" {
		return SessionEvent{}, false
	}
	return ev, true
}

// Events returns every session event read so far.
func (s *Socket) Events() []SessionEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]SessionEvent(nil), s.events...)
}

// ReadUntil reads frames until match returns true and returns that frame.
func (s *Socket) ReadUntil(ctx context.Context, match func(Frame) bool) (Frame, error) {
	for {
		f, err := s.Read(ctx)
		if err != nil {
			return Frame{}, err
		}
		if match(f) {
			return f, nil
		}
	}
}

// PhxReply is a phx_reply payload.
type PhxReply struct {
	Status   string          `json:"status"`
	Response json.RawMessage `json:"response"`
}

// Call sends a frame and reads until its reply.
func (s *Socket) Call(ctx context.Context, joinRef, topic, event string, payload any) (PhxReply, error) {
	ref, err := s.Send(ctx, joinRef, topic, event, payload)
	if err != nil {
		return PhxReply{}, err
	}
	f, err := s.ReadUntil(ctx, func(f Frame) bool { return f.Ref != nil && *f.Ref == ref && f.Event == "phx_reply" })
	if err != nil {
		return PhxReply{}, fmt.Errorf("proctest: waiting for the reply to %s %s: %w", topic, event, err)
	}
	var r PhxReply
	if err := json.Unmarshal(f.Payload, &r); err != nil {
		return PhxReply{}, fmt.Errorf("proctest: reply %s: %w", f.Payload, err)
	}
	return r, nil
}

// Join joins topic with payload; a reply other than ok is an error.
func (s *Socket) Join(ctx context.Context, topic string, payload any) (json.RawMessage, error) {
	r, err := s.Call(ctx, "", topic, "phx_join", payload)
	if err != nil {
		return nil, err
	}
	if r.Status != "ok" {
		return nil, fmt.Errorf("proctest: join %s: %s %s", topic, r.Status, r.Response)
	}
	return r.Response, nil
}

// Barrier sends a heartbeat and reads until its reply: every frame the node
// queued for this socket before the heartbeat has then been read.
func (s *Socket) Barrier(ctx context.Context) error {
	r, err := s.Call(ctx, "", "phoenix", "heartbeat", map[string]any{})
	if err == nil && r.Status != "ok" {
		err = fmt.Errorf("proctest: heartbeat: %s", r.Status)
	}
	return err
}

// WaitEvent reads until a session event matching match arrives.
func (s *Socket) WaitEvent(ctx context.Context, match func(SessionEvent) bool) (SessionEvent, error) {
	f, err := s.ReadUntil(ctx, func(f Frame) bool {
		ev, ok := f.SessionEvent()
		return ok && match(ev)
	})
	if err != nil {
		return SessionEvent{}, err
	}
	ev, _ := f.SessionEvent()
	return ev, nil
}
