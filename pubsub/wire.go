package pubsub

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/relaygw/relay/agent"
)

// WireVersion is the envelope version this node writes and the only one it
// reads. A message of another version is counted as a decode error and
// dropped; a change of the layout below takes a new version.
const WireVersion = 1

// Kind is what a routed message asks of the node that receives it.
type Kind uint8

const (
	// KindRoute goes to the topic's router, tagged with the sender's view
	// hash: the router fans it out to the nodes holding the topic.
	KindRoute Kind = 1
	// KindDeliver goes to a node that holds the topic (or every node, by a
	// flood or while the sender rebalances): deliver it to local sockets.
	KindDeliver Kind = 2
)

func (k Kind) String() string {
	switch k {
	case KindRoute:
		return "route"
	case KindDeliver:
		return "deliver"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Message is one routed session event between nodes.
//
// Wire layout (version 1), every integer little-endian or varint:
//
//	[0]      version (1)
//	[1]      kind (1 route, 2 deliver)
//	[2:10]   view hash, uint64 (the sender's, on route; 0 on deliver)
//	varint   epoch, varint seq (the event's agent.Position)
//	uvarint  length, then the topic; the same for the event name and the origin node
//	rest     payload: the event's JSON (agent.Event)
type Message struct {
	Kind     Kind
	Topic    string         // "session:<id>"
	Event    string         // the event type, the broadcast's event name
	Origin   string         // the node that published the event
	ViewHash uint64         // the origin's Muster view hash (KindRoute)
	Pos      agent.Position // the event's position: the replay seam's skip reads it
	Payload  []byte         // the event as JSON
}

// Decode errors; UnmarshalBinary wraps one of them.
var (
	// ErrVersion: the envelope's version is not WireVersion.
	ErrVersion = errors.New("pubsub: unknown wire version")
	// ErrMalformed: the bytes are not a version-1 message (short, bad
	// length or varint, unknown kind).
	ErrMalformed = errors.New("pubsub: malformed message")
)

const headerLen = 10 // version, kind, view hash

// MarshalBinary encodes m in the wire layout. It never fails.
func (m *Message) MarshalBinary() ([]byte, error) {
	b := make([]byte, headerLen, headerLen+3*binary.MaxVarintLen64+len(m.Topic)+len(m.Event)+len(m.Origin)+len(m.Payload)+2*binary.MaxVarintLen64)
	b[0], b[1] = WireVersion, byte(m.Kind)
	binary.LittleEndian.PutUint64(b[2:], m.ViewHash)
	b = binary.AppendVarint(b, m.Pos.Epoch)
	b = binary.AppendVarint(b, m.Pos.Seq)
	for _, s := range []string{m.Topic, m.Event, m.Origin} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return append(b, m.Payload...), nil
}

// UnmarshalBinary decodes b into m. Payload aliases b. Errors wrap
// ErrVersion or ErrMalformed.
func (m *Message) UnmarshalBinary(b []byte) error {
	if len(b) < headerLen {
		if len(b) > 0 && b[0] != WireVersion {
			return fmt.Errorf("%w: %d", ErrVersion, b[0])
		}
		return fmt.Errorf("%w: %d bytes, want at least %d", ErrMalformed, len(b), headerLen)
	}
	if b[0] != WireVersion {
		return fmt.Errorf("%w: %d", ErrVersion, b[0])
	}
	k := Kind(b[1])
	if k != KindRoute && k != KindDeliver {
		return fmt.Errorf("%w: %v", ErrMalformed, k)
	}
	out := Message{Kind: k, ViewHash: binary.LittleEndian.Uint64(b[2:])}
	rest := b[headerLen:]
	for _, p := range []*int64{&out.Pos.Epoch, &out.Pos.Seq} {
		v, n := binary.Varint(rest)
		if n <= 0 {
			return fmt.Errorf("%w: bad position varint", ErrMalformed)
		}
		*p, rest = v, rest[n:]
	}
	for _, s := range []*string{&out.Topic, &out.Event, &out.Origin} {
		l, n := binary.Uvarint(rest)
		if n <= 0 || l > math.MaxInt32 || l > uint64(len(rest)-n) {
			return fmt.Errorf("%w: bad string length", ErrMalformed)
		}
		*s, rest = string(rest[n:n+int(l)]), rest[n+int(l):]
	}
	out.Payload = rest
	*m = out
	return nil
}
