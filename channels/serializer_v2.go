package channels

import (
	"encoding/json"
	"fmt"
)

// v2Serializer is Phoenix's V2 JSON serializer: text frames are JSON arrays
// [join_ref, ref, topic, event, payload]; binary frames follow binary.go.
// Source: v2_json_serializer.ex, serializer.js (docs/PHOENIX.md §2).
type v2Serializer struct{}

func (v2Serializer) Version() string { return "2.0.0" }
func (v2Serializer) index() int      { return 1 }

func (v2Serializer) Decode(f Frame) (Message, error) {
	if f.Binary {
		return decodeBinary(f.Data)
	}
	return decodeV2Text(f.Data)
}

// decodeV2Text decodes [join_ref, ref, topic, event, payload, ...]. Extra
// trailing elements are ignored as Phoenix does; the payload may be any JSON
// value. The frame must be valid UTF-8 (see checkText).
func decodeV2Text(b []byte) (Message, error) {
	var m Message
	if err := checkText(b); err != nil {
		return m, err
	}
	s := scanner{b: b}
	if err := s.expect('['); err != nil {
		return m, err
	}
	var err error
	if m.JoinRef, err = s.ref("join_ref"); err != nil {
		return m, err
	}
	if err = s.expect(','); err != nil {
		return m, err
	}
	if m.Ref, err = s.ref("ref"); err != nil {
		return m, err
	}
	if err = s.expect(','); err != nil {
		return m, err
	}
	if m.Topic, err = s.stringValue("topic"); err != nil {
		return m, err
	}
	if err = s.expect(','); err != nil {
		return m, err
	}
	if m.Event, err = s.stringValue("event"); err != nil {
		return m, err
	}
	if err = s.expect(','); err != nil {
		return m, err
	}
	if m.Payload, err = s.value(1); err != nil {
		return m, err
	}
	for {
		switch s.peek() {
		case ']':
			s.i++
			return m, s.end()
		case ',':
			s.i++
			if err := s.skip(1); err != nil {
				return m, err
			}
		default:
			return m, s.errf("expected ',' or ']'")
		}
	}
}

func (v2Serializer) EncodePush(joinRef, ref Ref, topic, event string, p Payload) (Frame, error) {
	if p.IsBinary {
		if joinRef.IsNull() && ref.IsNull() {
			return encodeBinaryBroadcast(topic, event, p.Bytes)
		}
		return encodeBinaryPush(joinRef, topic, event, p.Bytes)
	}
	return Frame{Data: appendV2(nil, joinRef, ref, topic, event, false, "", p.json())}, nil
}

func (v2Serializer) EncodeReply(joinRef, ref Ref, topic, status string, p Payload) (Frame, error) {
	if p.IsBinary {
		return encodeBinaryReply(joinRef, ref, topic, status, p.Bytes)
	}
	return Frame{Data: appendV2(nil, joinRef, ref, topic, eventReply, true, status, p.json())}, nil
}

func (v2Serializer) EncodeBroadcast(topic, event string, payload json.RawMessage) (Frame, error) {
	if len(payload) == 0 {
		payload = emptyObject
	}
	return Frame{Data: appendV2(nil, Ref{}, Ref{}, topic, event, false, "", payload)}, nil
}

// appendV2 appends a V2 text frame. For a reply, payload is wrapped as
// {"status":status,"response":payload}.
func appendV2(dst []byte, joinRef, ref Ref, topic, event string, reply bool, status string, payload json.RawMessage) []byte {
	if dst == nil {
		n := len(topic) + len(event) + len(payload) + len(joinRef.raw) + len(ref.raw) + 24
		if reply {
			n += len(status) + 27
		}
		dst = make([]byte, 0, n)
	}
	dst = append(dst, '[')
	dst = joinRef.appendJSON(dst)
	dst = append(dst, ',')
	dst = ref.appendJSON(dst)
	dst = append(dst, ',')
	dst = appendJSONString(dst, topic)
	dst = append(dst, ',')
	dst = appendJSONString(dst, event)
	dst = append(dst, ',')
	if reply {
		dst = append(dst, `{"status":`...)
		dst = appendJSONString(dst, status)
		dst = append(dst, `,"response":`...)
		dst = append(dst, payload...)
		dst = append(dst, '}')
	} else {
		dst = append(dst, payload...)
	}
	return append(dst, ']')
}

// Reserved event names (docs/PHOENIX.md §3).
const (
	eventJoin      = "phx_join"
	eventLeave     = "phx_leave"
	eventReply     = "phx_reply"
	eventClose     = "phx_close"
	eventError     = "phx_error"
	eventHeartbeat = "heartbeat"
	topicPhoenix   = "phoenix"
	statusOK       = "ok"
	statusError    = "error"
)

func errMalformed(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, a...))
}
