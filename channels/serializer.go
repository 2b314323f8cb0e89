package channels

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Serializer encodes and decodes frames of one protocol version. Decode never
// panics and returns errors wrapping ErrMalformed. Implementations are
// stateless and safe for concurrent use.
type Serializer interface {
	// Version returns the serializer's vsn, "1.0.0" or "2.0.0".
	Version() string
	// Decode decodes one inbound frame. The returned Message may alias f.Data.
	Decode(f Frame) (Message, error)
	// EncodePush encodes a push [join_ref, ref, topic, event, payload]. A
	// channel push has a null ref; phx_close and phx_error have ref = join_ref.
	EncodePush(joinRef, ref Ref, topic, event string, p Payload) (Frame, error)
	// EncodeReply encodes a phx_reply with {"status":status,"response":p}.
	EncodeReply(joinRef, ref Ref, topic, status string, p Payload) (Frame, error)
	// EncodeBroadcast encodes a broadcast [null, null, topic, event, payload].
	EncodeBroadcast(topic, event string, payload json.RawMessage) (Frame, error)

	index() int
}

// Serializer versions.
var (
	V1 Serializer = v1Serializer{}
	V2 Serializer = v2Serializer{}
)

// numSerializers is how many serializers exist (frames are encoded once per
// serializer in use).
const numSerializers = 2

// SerializerFor picks the serializer for a vsn query value: missing → V1
// ("1.0.0" is Phoenix's default), 1.x → V1, 2.x → V2, else
// ErrUnsupportedVersion (socket.ex negotiate_serializer; docs/PHOENIX.md
// §1.2 step 5).
func SerializerFor(vsn string) (Serializer, error) {
	if vsn == "" {
		return V1, nil
	}
	major, rest, dotted := strings.Cut(vsn, ".")
	if dotted && !validVersionTail(rest) {
		return nil, fmt.Errorf("vsn %q: %w", vsn, ErrUnsupportedVersion)
	}
	switch major {
	case "1":
		return V1, nil
	case "2":
		return V2, nil
	}
	return nil, fmt.Errorf("vsn %q: %w", vsn, ErrUnsupportedVersion)
}

// validVersionTail accepts "0", "0.0", "10.3" and similar.
func validVersionTail(s string) bool {
	for _, part := range strings.Split(s, ".") {
		if part == "" {
			return false
		}
		for i := 0; i < len(part); i++ {
			if part[i] < '0' || part[i] > '9' {
				return false
			}
		}
	}
	return true
}
