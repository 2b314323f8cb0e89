package channels

import "encoding/json"

// Frame is one WebSocket message: text (JSON) or binary.
type Frame struct {
	Data   []byte
	Binary bool

	// replay marks the queue entry of a join's replay (Data is nil); the
	// writer writes the replay's frames there (see Socket.enqueueReplay).
	replay *replayJob
	// wire, when set, is shared by every copy of a frame fanned out to many
	// sockets (Hub.Broadcast): a WebSocket transport frames Data once there
	// and writes the same bytes to each socket (see wireCache).
	wire *wireCache
}

// Message is a decoded inbound frame. Refs are opaque and kept as sent.
// Text frames carry Payload (any JSON value, as sent); binary frames carry
// Binary and a nil Payload.
type Message struct {
	JoinRef Ref
	Ref     Ref
	Topic   string
	Event   string
	Payload json.RawMessage
	Binary  []byte
}

// IsBinary reports whether m came from a binary frame.
func (m *Message) IsBinary() bool { return m.Payload == nil }

// Payload is an outbound payload: a JSON value, or raw bytes sent in a binary
// frame (V2 only). A nil or empty JSON payload is sent as {}.
type Payload struct {
	JSON     json.RawMessage
	Bytes    []byte
	IsBinary bool
}

// JSONPayload wraps a JSON value.
func JSONPayload(raw json.RawMessage) Payload { return Payload{JSON: raw} }

// BinaryPayload wraps raw bytes for a binary frame.
func BinaryPayload(b []byte) Payload { return Payload{Bytes: b, IsBinary: true} }

// Binary marks a Push or Channel.Push payload as raw bytes to be sent in a
// binary frame (V2 sockets only).
type Binary []byte

// Push is an outbound channel push: Payload is json.RawMessage or []byte
// (raw JSON), Binary (raw bytes), nil ({}), or any value json.Marshal accepts.
type Push struct {
	Event   string
	Payload any
}

var emptyObject = json.RawMessage(`{}`)

// toPayload converts a handler-provided value to a Payload.
func toPayload(v any) (Payload, error) {
	switch p := v.(type) {
	case nil:
		return Payload{JSON: emptyObject}, nil
	case Payload:
		return p, nil
	case json.RawMessage:
		return Payload{JSON: p}, nil
	case []byte:
		return Payload{JSON: p}, nil
	case Binary:
		return Payload{Bytes: p, IsBinary: true}, nil
	default:
		b, err := json.Marshal(p)
		if err != nil {
			return Payload{}, err
		}
		return Payload{JSON: b}, nil
	}
}

func (p Payload) json() json.RawMessage {
	if len(p.JSON) == 0 {
		return emptyObject
	}
	return p.JSON
}
