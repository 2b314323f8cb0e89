package channels

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
)

var benchPayload = json.RawMessage(`{"session":"s-1","epoch":3,"seq":1042,"type":"delta","data":{"text":"hello there"},"at":"2026-01-02T03:04:05Z"}`)

func BenchmarkEncodeV2(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := V2.EncodeBroadcast("session:s-1", "delta", benchPayload); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeV2Reply(b *testing.B) {
	jr, ref := StringRef("3"), StringRef("4")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := V2.EncodeReply(jr, ref, "session:s-1", "ok", JSONPayload(benchPayload)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeV2(b *testing.B) {
	frame := Frame{Data: []byte(`["3","4","session:s-1","message",{"text":"hello there, how are you today?","idempotency_key":"k-123"}]`)}
	b.SetBytes(int64(len(frame.Data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := V2.Decode(frame); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeBinary(b *testing.B) {
	f, _ := encodeBinaryClientPush(StringRef("3"), StringRef("4"), "session:s-1", "upload", make([]byte, 256))
	f.Binary = true
	b.SetBytes(int64(len(f.Data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := V2.Decode(f); err != nil {
			b.Fatal(err)
		}
	}
}

// sinkTransport discards frames, counting them.
type sinkTransport struct{ n *atomic.Int64 }

func (s sinkTransport) Write(_ context.Context, frames []Frame) error {
	s.n.Add(int64(len(frames)))
	return nil
}
func (sinkTransport) Close(CloseCode, string) error { return nil }

// BenchmarkFanout10k broadcasts to one topic with 10,000 subscribed in-memory
// sockets: one encode, 10,000 enqueues and writer hand-offs per op. The
// ns/delivery metric is the op time divided by 10,000.
func BenchmarkFanout10k(b *testing.B) {
	const sockets = 10000
	ep := NewEndpoint(EndpointConfig{})
	ep.Handle("session:*", newFuncHandler())
	var written atomic.Int64
	socks := make([]*Socket, 0, sockets)
	for i := 0; i < sockets; i++ {
		s, err := ep.Attach(context.Background(), sinkTransport{&written}, V2, nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Receive(Frame{Data: []byte(`["1","1","session:s-1","phx_join",{}]`)}); err != nil {
			b.Fatal(err)
		}
		socks = append(socks, s)
	}
	defer func() {
		for _, s := range socks {
			s.End()
		}
	}()
	hub := ep.Hub()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if n := hub.Broadcast("session:s-1", "delta", benchPayload, nil); n != sockets {
			b.Fatalf("delivered %d", n)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*sockets), "ns/delivery")
	if st := ep.Stats(); st.SlowConsumers != 0 {
		b.Fatalf("slow consumers in benchmark: %d", st.SlowConsumers)
	}
}
