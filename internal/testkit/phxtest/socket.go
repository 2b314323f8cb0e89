// Package phxtest is the Phoenix Channels test client every Go test uses: a
// raw client over github.com/coder/websocket that shows exactly the frames
// a server sends. It speaks V2 JSON frames ([join_ref, ref, topic, event,
// payload], README "WebSocket API") and also sends and reads frames as raw
// text or bytes, for tests of the wire format itself.
//
// Socket returns errors and takes a context on every call, for use from
// any goroutine. T binds a Socket to a test: each step fails the test on an
// error and waits at most T.Timeout.
//
// phxtest imports nothing of the module, so the channels package's own
// tests can use it.
package phxtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/coder/websocket"
	"github.com/relaygw/relay/agent"
)

// Socket is a raw Phoenix client connection. Writes may be concurrent;
// reads are not: one goroutine reads at a time.
type Socket struct {
	conn *websocket.Conn
	mu   sync.Mutex
	ref  int64

	events []SessionEvent // every session event Read so far
}

// Frame is one decoded V2 frame [join_ref, ref, topic, event, payload].
// JoinRef and Ref are nil when the frame carries null.
type Frame struct {
	JoinRef, Ref *string
	Topic        string
	Event        string
	Payload      json.RawMessage
}

// SessionEvent is the payload of a session event push:
// {"session","epoch","seq","type","data"} (README "WebSocket API").
type SessionEvent struct {
	Session string          `json:"session"`
	Epoch   int64           `json:"epoch"`
	Seq     int64           `json:"seq"`
	Type    string          `json:"type"`
	Data    json.RawMessage `json:"data"`
	// Prev is set on the first event of an epoch: where the previous
	// epoch ended.
	Prev *agent.Position `json:"prev,omitempty"`
}

// PhxReply is a phx_reply payload: {"status","response"}.
type PhxReply struct {
	Status   string          `json:"status"`
	Response json.RawMessage `json:"response"`
}

// URL returns the V2 socket URL of the node at baseURL ("http://host:port"):
// ws://host:port/socket/websocket?vsn=2.0.0&token=<token>.
func URL(baseURL, token string) string {
	return strings.Replace(baseURL, "http://", "ws://", 1) + "/socket/websocket?vsn=2.0.0&token=" + token
}

// Dial opens a WebSocket to url (ws://…) with opts (nil for none) and no
// read limit. The HTTP response of the upgrade is returned even when the
// upgrade was refused (then err is set), so a test can check its status.
func Dial(ctx context.Context, url string, opts *websocket.DialOptions) (*Socket, *http.Response, error) {
	conn, resp, err := websocket.Dial(ctx, url, opts)
	if err != nil {
		return nil, resp, fmt.Errorf("phxtest: dial %s: %w", url, err)
	}
	conn.SetReadLimit(-1)
	return &Socket{conn: conn}, resp, nil
}

// DialNode opens a V2 socket on the node at baseURL with token (see URL).
func DialNode(ctx context.Context, baseURL, token string) (*Socket, error) {
	s, _, err := Dial(ctx, URL(baseURL, token), nil)
	return s, err
}

// Conn returns the underlying connection (to close it with a given status,
// say).
func (s *Socket) Conn() *websocket.Conn { return s.conn }

// Close drops the connection without a close handshake.
func (s *Socket) Close() { _ = s.conn.CloseNow() }

// WriteText writes one text message as is.
func (s *Socket) WriteText(ctx context.Context, frame string) error {
	if err := s.conn.Write(ctx, websocket.MessageText, []byte(frame)); err != nil {
		return fmt.Errorf("phxtest: write: %w", err)
	}
	return nil
}

// WriteBinary writes one binary message as is.
func (s *Socket) WriteBinary(ctx context.Context, b []byte) error {
	if err := s.conn.Write(ctx, websocket.MessageBinary, b); err != nil {
		return fmt.Errorf("phxtest: write binary: %w", err)
	}
	return nil
}

// ReadMessage reads one message as is. When the server closed the socket
// the error carries its close status (see websocket.CloseStatus).
func (s *Socket) ReadMessage(ctx context.Context) (websocket.MessageType, []byte, error) {
	return s.conn.Read(ctx)
}

// Send writes one V2 JSON frame and returns its ref (refs count up from 1
// per socket). joinRef "" uses the ref itself (a join); topic "phoenix"
// sends a null join ref.
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
		return "", fmt.Errorf("phxtest: socket write: %w", err)
	}
	return ref, nil
}

// Read reads one V2 JSON frame. A session event is also recorded (Events).
// When the server closed the socket the error carries its close status.
func (s *Socket) Read(ctx context.Context) (Frame, error) {
	_, b, err := s.conn.Read(ctx)
	if err != nil {
		return Frame{}, err
	}
	f, err := DecodeFrame(b)
	if err != nil {
		return Frame{}, err
	}
	if ev, ok := f.SessionEvent(); ok {
		s.mu.Lock()
		s.events = append(s.events, ev)
		s.mu.Unlock()
	}
	return f, nil
}

// DecodeFrame decodes a V2 JSON frame.
func DecodeFrame(b []byte) (Frame, error) {
	var raw [5]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return Frame{}, fmt.Errorf("phxtest: bad frame %s: %w", b, err)
	}
	var f Frame
	_ = json.Unmarshal(raw[0], &f.JoinRef)
	_ = json.Unmarshal(raw[1], &f.Ref)
	_ = json.Unmarshal(raw[2], &f.Topic)
	_ = json.Unmarshal(raw[3], &f.Event)
	f.Payload = raw[4]
	return f, nil
}

// IsReply reports whether f is the phx_reply to the frame with ref.
func (f Frame) IsReply(ref string) bool {
	return f.Ref != nil && *f.Ref == ref && f.Event == "phx_reply"
}

// SessionEvent decodes f as a session event push (a frame without a ref
// whose payload has a "type").
func (f Frame) SessionEvent() (SessionEvent, bool) {
	var ev SessionEvent
	if f.Ref != nil || f.Event == "phx_reply" || json.Unmarshal(f.Payload, &ev) != nil || ev.Type == "" {
		return SessionEvent{}, false
	}
	return ev, true
}

// Reply decodes f's payload as a phx_reply.
func (f Frame) Reply() (PhxReply, error) {
	var r PhxReply
	if err := json.Unmarshal(f.Payload, &r); err != nil {
		return PhxReply{}, fmt.Errorf("phxtest: reply %s: %w", f.Payload, err)
	}
	return r, nil
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

// Call sends a frame and reads until its reply.
func (s *Socket) Call(ctx context.Context, joinRef, topic, event string, payload any) (PhxReply, error) {
	ref, err := s.Send(ctx, joinRef, topic, event, payload)
	if err != nil {
		return PhxReply{}, err
	}
	f, err := s.ReadUntil(ctx, func(f Frame) bool { return f.IsReply(ref) })
	if err != nil {
		return PhxReply{}, fmt.Errorf("phxtest: waiting for the reply to %s %s: %w", topic, event, err)
	}
	return f.Reply()
}

// Join joins topic with payload; a reply other than ok is an error.
func (s *Socket) Join(ctx context.Context, topic string, payload any) (json.RawMessage, error) {
	r, err := s.Call(ctx, "", topic, "phx_join", payload)
	if err != nil {
		return nil, err
	}
	if r.Status != "ok" {
		return nil, fmt.Errorf("phxtest: join %s: %s %s", topic, r.Status, r.Response)
	}
	return r.Response, nil
}

// BarrierTopic is the topic of the barrier round trip: a phx_leave for a
// topic the socket never joins, which the server answers with ok in order
// with everything else it queued for the socket. (A heartbeat is no barrier:
// its reply passes frames queued before it.)
const BarrierTopic = "phxtest:barrier"

// Barrier sends a phx_leave for BarrierTopic and reads until its reply. The
// server handles a socket's frames in order and writes what it queued for
// the socket in order (heartbeat replies aside), so every frame it queued
// before the leave has then been read.
func (s *Socket) Barrier(ctx context.Context) error {
	r, err := s.Call(ctx, "", BarrierTopic, "phx_leave", map[string]any{})
	if err == nil && r.Status != "ok" {
		err = fmt.Errorf("phxtest: barrier: %s", r.Status)
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
