package pubsub_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/pubsub"
)

// TestMessageRoundTrip: every field survives the wire, and the layout's
// first bytes are the version and the kind.
func TestMessageRoundTrip(t *testing.T) {
	for _, m := range []pubsub.Message{
		{Kind: pubsub.KindRoute, Topic: "session:s1", Event: "delta", Origin: "node-a", ViewHash: 0xdeadbeefcafef00d,
			Pos: agent.Position{Epoch: 3, Seq: 1 << 40}, Payload: []byte(`{"session":"s1","seq":1099511627776}`)},
		{Kind: pubsub.KindDeliver, Topic: "session:é", Origin: "b"},
	} {
		b, err := m.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if b[0] != pubsub.WireVersion || pubsub.Kind(b[1]) != m.Kind {
			t.Fatalf("header % x, want version %d kind %d", b[:2], pubsub.WireVersion, m.Kind)
		}
		var got pubsub.Message
		if err := got.UnmarshalBinary(b); err != nil {
			t.Fatal(err)
		}
		if !sameMessage(got, m) {
			t.Fatalf("round trip %+v, want %+v", got, m)
		}
	}
}

// TestMessageDecodeErrors: a foreign version is ErrVersion; short input,
// an unknown kind and a string length past the end are ErrMalformed.
func TestMessageDecodeErrors(t *testing.T) {
	good, _ := (&pubsub.Message{Kind: pubsub.KindDeliver, Topic: "session:x", Event: "delta", Origin: "a"}).MarshalBinary()
	badKind := bytes.Clone(good)
	badKind[1] = 9
	for _, c := range []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, pubsub.ErrMalformed},
		{"short", good[:5], pubsub.ErrMalformed},
		{"version 2", append([]byte{2}, good[1:]...), pubsub.ErrVersion},
		{"short version 0", []byte{0, 1}, pubsub.ErrVersion},
		{"json", []byte(`{"k":"deliver","t":"session:x","e":"delta"}`), pubsub.ErrVersion},
		{"kind 9", badKind, pubsub.ErrMalformed},
		{"truncated topic", good[:13], pubsub.ErrMalformed},
	} {
		var m pubsub.Message
		if err := m.UnmarshalBinary(c.b); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

// FuzzMessage: decoding never panics, and whatever decodes re-encodes to a
// message that decodes to the same fields.
func FuzzMessage(f *testing.F) {
	seed, _ := (&pubsub.Message{Kind: pubsub.KindRoute, Topic: "session:s", Event: "delta", Origin: "a", ViewHash: 7,
		Pos: agent.Position{Epoch: 1, Seq: 2}, Payload: []byte(`{}`)}).MarshalBinary()
	f.Add(seed)
	f.Add([]byte{1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		var m pubsub.Message
		if err := m.UnmarshalBinary(b); err != nil {
			return
		}
		again, _ := m.MarshalBinary()
		var m2 pubsub.Message
		if err := m2.UnmarshalBinary(again); err != nil {
			t.Fatalf("re-encoded message does not decode: %v", err)
		}
		if !sameMessage(m2, m) {
			t.Fatalf("round trip %+v, want %+v", m2, m)
		}
	})
}

func sameMessage(a, b pubsub.Message) bool {
	return a.Kind == b.Kind && a.Topic == b.Topic && a.Event == b.Event && a.Origin == b.Origin &&
		a.ViewHash == b.ViewHash && a.Pos == b.Pos && bytes.Equal(a.Payload, b.Payload)
}
