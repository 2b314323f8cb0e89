package pubsub_test

import (
	"testing"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/pubsub"
)

// BenchmarkMessage encodes and decodes one routed delta event (a typical
// 160-byte session event JSON), as a send and its receipt do.
func BenchmarkMessage(b *testing.B) {
	payload := []byte(`{"session":"demo-1","epoch":3,"seq":1042,"type":"delta","data":{"text":"hello","index":17},"at":"2026-12-01T11:11:11.123456789Z"}`)
	m := pubsub.Message{Kind: pubsub.KindRoute, Topic: "session:demo-1", Event: agent.TypeDelta, Origin: "node-a",
		ViewHash: 0x9e3779b97f4a7c15, Pos: agent.Position{Epoch: 3, Seq: 1042}, Payload: payload}
	b.ReportAllocs()
	for b.Loop() {
		wire, _ := m.MarshalBinary()
		var got pubsub.Message
		if err := got.UnmarshalBinary(wire); err != nil {
			b.Fatal(err)
		}
	}
}
