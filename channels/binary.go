package channels

import "unicode/utf8"

// Binary frames (V2 only). Every length is one unsigned byte, so join_ref,
// ref, topic and event/status are at most 255 bytes each. The headers are
// asymmetric (docs/PHOENIX.md §2.2; v2_json_serializer.ex,
// serializer.js binaryEncode/binaryDecode):
//
//	kind 0 push, client → server: 0, jr_len, ref_len, topic_len, event_len, jr, ref, topic, event, payload
//	kind 0 push, server → client: 0, jr_len, topic_len, event_len, jr, topic, event, payload (no ref)
//	kind 1 reply, server → client: 1, jr_len, ref_len, topic_len, status_len, jr, ref, topic, status, payload
//	kind 2 broadcast, server → client: 2, topic_len, event_len, topic, event, payload
//
// Null refs are encoded as empty strings.
const (
	binaryPush      byte = 0
	binaryReply     byte = 1
	binaryBroadcast byte = 2
)

// maxBinaryField is the longest field a one-byte length can describe.
const maxBinaryField = 255

// decodeBinary decodes a client → server binary frame; only kind 0 (push) is
// valid in that direction. Empty refs decode as null, matching what the
// server encodes for null.
func decodeBinary(b []byte) (Message, error) {
	var m Message
	const header = 5
	if len(b) < header {
		return m, errMalformed("binary frame of %d bytes is shorter than its header", len(b))
	}
	if b[0] != binaryPush {
		return m, errMalformed("binary frame kind %d from a client", b[0])
	}
	jl, rl, tl, el := int(b[1]), int(b[2]), int(b[3]), int(b[4])
	if len(b) < header+jl+rl+tl+el {
		return m, errMalformed("binary frame fields overrun the frame")
	}
	// The header fields are strings the server echoes (in text replies too);
	// each must be valid UTF-8 on its own (two invalid halves can form a
	// valid rune across a field boundary).
	for p, n := header, 0; n < 4; n++ {
		l := int(b[1+n])
		if !utf8.Valid(b[p : p+l]) {
			return m, errMalformed("binary frame header field %d is not valid UTF-8", n)
		}
		p += l
	}
	p := header
	m.JoinRef = binaryRef(b[p : p+jl])
	p += jl
	m.Ref = binaryRef(b[p : p+rl])
	p += rl
	m.Topic = string(b[p : p+tl])
	p += tl
	m.Event = string(b[p : p+el])
	p += el
	m.Binary = b[p:len(b):len(b)]
	if m.Binary == nil {
		m.Binary = []byte{}
	}
	return m, nil
}

func binaryRef(b []byte) Ref {
	if len(b) == 0 {
		return Ref{}
	}
	return StringRef(string(b))
}

func checkFields(fields ...string) error {
	for _, f := range fields {
		if len(f) > maxBinaryField {
			return ErrFieldTooLong
		}
	}
	return nil
}

// encodeBinaryPush encodes a server push (kind 0, no ref).
func encodeBinaryPush(joinRef Ref, topic, event string, payload []byte) (Frame, error) {
	jr := joinRef.String()
	if err := checkFields(jr, topic, event); err != nil {
		return Frame{}, err
	}
	b := make([]byte, 0, 4+len(jr)+len(topic)+len(event)+len(payload))
	b = append(b, binaryPush, byte(len(jr)), byte(len(topic)), byte(len(event)))
	b = append(b, jr...)
	b = append(b, topic...)
	b = append(b, event...)
	b = append(b, payload...)
	return Frame{Data: b, Binary: true}, nil
}

// encodeBinaryReply encodes a reply (kind 1).
func encodeBinaryReply(joinRef, ref Ref, topic, status string, payload []byte) (Frame, error) {
	jr, r := joinRef.String(), ref.String()
	if err := checkFields(jr, r, topic, status); err != nil {
		return Frame{}, err
	}
	b := make([]byte, 0, 5+len(jr)+len(r)+len(topic)+len(status)+len(payload))
	b = append(b, binaryReply, byte(len(jr)), byte(len(r)), byte(len(topic)), byte(len(status)))
	b = append(b, jr...)
	b = append(b, r...)
	b = append(b, topic...)
	b = append(b, status...)
	b = append(b, payload...)
	return Frame{Data: b, Binary: true}, nil
}

// encodeBinaryBroadcast encodes a broadcast (kind 2).
func encodeBinaryBroadcast(topic, event string, payload []byte) (Frame, error) {
	if err := checkFields(topic, event); err != nil {
		return Frame{}, err
	}
	b := make([]byte, 0, 3+len(topic)+len(event)+len(payload))
	b = append(b, binaryBroadcast, byte(len(topic)), byte(len(event)))
	b = append(b, topic...)
	b = append(b, event...)
	b = append(b, payload...)
	return Frame{Data: b, Binary: true}, nil
}

// encodeBinaryClientPush encodes a client → server push (kind 0 with a ref);
// used by tests and Go clients.
func encodeBinaryClientPush(joinRef, ref Ref, topic, event string, payload []byte) (Frame, error) {
	jr, r := joinRef.String(), ref.String()
	if err := checkFields(jr, r, topic, event); err != nil {
		return Frame{}, err
	}
	b := make([]byte, 0, 5+len(jr)+len(r)+len(topic)+len(event)+len(payload))
	b = append(b, binaryPush, byte(len(jr)), byte(len(r)), byte(len(topic)), byte(len(event)))
	b = append(b, jr...)
	b = append(b, r...)
	b = append(b, topic...)
	b = append(b, event...)
	b = append(b, payload...)
	return Frame{Data: b, Binary: true}, nil
}
