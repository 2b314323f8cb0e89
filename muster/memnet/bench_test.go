package memnet_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/relaygw/relay/muster/memnet"
)

type counter struct{ n atomic.Int64 }

func (c *counter) HandleMessage(string, []byte) { c.n.Add(1) }
func (c *counter) HandleCall(_ context.Context, _ string, req []byte) ([]byte, error) {
	return req, nil
}

func benchNet(b *testing.B) (*memnet.Network, *memnet.Transport, *counter) {
	n := memnet.New(1)
	b.Cleanup(n.Close)
	ctx := context.Background()
	a := n.Transport("a")
	a.Register(&counter{})
	c := &counter{}
	rb := n.Transport("b")
	rb.Register(c)
	for _, tr := range []*memnet.Transport{a, rb} {
		if err := tr.Start(ctx); err != nil {
			b.Fatal(err)
		}
	}
	return n, a, c
}

// BenchmarkSend measures one-way message throughput a → b, including the
// handler call on b.
func BenchmarkSend(b *testing.B) {
	n, a, c := benchNet(b)
	ctx := context.Background()
	msg := make([]byte, 128)
	b.ReportAllocs()
	for b.Loop() {
		_ = a.Send(ctx, "b", msg)
	}
	if err := n.Quiesce(ctx); err != nil {
		b.Fatal(err)
	}
	if c.n.Load() == 0 {
		b.Fatal("nothing delivered")
	}
}

// BenchmarkCall measures a Call round trip a → b → a.
func BenchmarkCall(b *testing.B) {
	_, a, _ := benchNet(b)
	ctx := context.Background()
	req := make([]byte, 128)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.Call(ctx, "b", req); err != nil {
			b.Fatal(err)
		}
	}
}
