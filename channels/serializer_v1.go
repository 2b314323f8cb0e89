package channels

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// v1Serializer is Phoenix's V1 JSON serializer, used when vsn is missing or
// 1.x: every frame is a JSON object. Inbound {"topic","event","payload","ref"}
// are required and "join_ref" is optional; outbound objects carry topic,
// event, payload and ref only. No binary frames.
// Source: v1_json_serializer.ex (docs/PHOENIX.md §1.4).
type v1Serializer struct{}

func (v1Serializer) Version() string { return "1.0.0" }
func (v1Serializer) index() int      { return 0 }

func (v1Serializer) Decode(f Frame) (Message, error) {
	if f.Binary {
		return Message{}, ErrBinaryUnsupported
	}
	return decodeV1(f.Data)
}

// decodeV1 decodes one V1 object. Keys match exactly; unknown keys are
// ignored; a repeated key keeps its last value. The frame must be valid
// UTF-8 (see checkText).
func decodeV1(b []byte) (Message, error) {
	var m Message
	if err := checkText(b); err != nil {
		return m, err
	}
	s := scanner{b: b}
	if err := s.expect('{'); err != nil {
		return m, err
	}
	var haveTopic, haveEvent, havePayload, haveRef bool
	if s.peek() == '}' {
		s.i++
	} else {
		for {
			key, err := s.stringValue("key")
			if err != nil {
				return m, err
			}
			if err := s.expect(':'); err != nil {
				return m, err
			}
			switch key {
			case "topic":
				if m.Topic, err = s.stringValue("topic"); err != nil {
					return m, err
				}
				haveTopic = true
			case "event":
				if m.Event, err = s.stringValue("event"); err != nil {
					return m, err
				}
				haveEvent = true
			case "payload":
				if m.Payload, err = s.value(1); err != nil {
					return m, err
				}
				havePayload = true
			case "ref":
				if m.Ref, err = s.ref("ref"); err != nil {
					return m, err
				}
				haveRef = true
			case "join_ref":
				if m.JoinRef, err = s.ref("join_ref"); err != nil {
					return m, err
				}
			default:
				if err := s.skip(1); err != nil {
					return m, err
				}
			}
			c := s.peek()
			if c == ',' {
				s.i++
				continue
			}
			if c == '}' {
				s.i++
				break
			}
			return m, s.errf("expected ',' or '}'")
		}
	}
	if err := s.end(); err != nil {
		return m, err
	}
	if !haveTopic || !haveEvent || !havePayload || !haveRef {
		return m, errMalformed("V1 frame lacks topic, event, payload or ref")
	}
	return m, nil
}

func (v1Serializer) EncodePush(_, ref Ref, topic, event string, p Payload) (Frame, error) {
	if p.IsBinary {
		return Frame{}, fmt.Errorf("encode push %q: %w", event, ErrBinaryUnsupported)
	}
	return Frame{Data: appendV1(nil, ref, topic, event, false, "", p.json())}, nil
}

func (v1Serializer) EncodeReply(_, ref Ref, topic, status string, p Payload) (Frame, error) {
	if p.IsBinary {
		return Frame{}, fmt.Errorf("encode reply: %w", ErrBinaryUnsupported)
	}
	return Frame{Data: appendV1(nil, ref, topic, eventReply, true, status, p.json())}, nil
}

func (v1Serializer) EncodeBroadcast(topic, event string, payload json.RawMessage) (Frame, error) {
	if len(payload) == 0 {
		payload = emptyObject
	}
	return Frame{Data: appendV1(nil, Ref{}, topic, event, false, "", payload)}, nil
}

func appendV1(dst []byte, ref Ref, topic, event string, reply bool, status string, payload json.RawMessage) []byte {
	if dst == nil {
		dst = make([]byte, 0, len(topic)+len(event)+len(payload)+len(ref.raw)+64)
	}
	dst = append(dst, `{"topic":`...)
	dst = appendJSONString(dst, topic)
	dst = append(dst, `,"event":`...)
	dst = appendJSONString(dst, event)
	dst = append(dst, `,"payload":`...)
	if reply {
		dst = append(dst, `{"status":`...)
		dst = appendJSONString(dst, status)
		dst = append(dst, `,"response":`...)
		dst = append(dst, payload...)
		dst = append(dst, '}')
	} else {
		dst = append(dst, payload...)
	}
	dst = append(dst, `,"ref":`...)
	dst = ref.appendJSON(dst)
	return append(dst, '}')
}

// checkText refuses a text frame that is not valid UTF-8. RFC 6455 §8.1
// makes a peer fail the connection on one, and the refs and topic of an
// inbound frame are echoed verbatim in the reply: a ref with invalid UTF-8
// came back inside a text frame the client's WebSocket library rejects.
// The socket closes with 1007 (CloseMalformed).
func checkText(b []byte) error {
	if !utf8.Valid(b) {
		return errMalformed("text frame is not valid UTF-8")
	}
	return nil
}
