package natstransport_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relaygw/relay/internal/testkit/testenv"
	"github.com/relaygw/relay/muster/natstransport"
)

type counter struct {
	n    atomic.Int64
	want atomic.Int64
	done chan struct{}
}

func (c *counter) HandleMessage(string, []byte) {
	if c.n.Add(1) == c.want.Load() {
		close(c.done)
	}
}

func (c *counter) HandleCall(_ context.Context, _ string, req []byte) ([]byte, error) {
	return req, nil
}

func benchPair(b *testing.B) (*natstransport.Transport, *counter) {
	prefix := testenv.NATSPrefix(b)
	ctx := context.Background()
	c := &counter{done: make(chan struct{})}
	c.want.Store(-1)
	a := natstransport.New(testenv.NATSConn(b), natstransport.Config{Prefix: prefix, Scope: "s", Node: "a", QueueLen: 1 << 16})
	a.Register(&counter{})
	r := natstransport.New(testenv.NATSConn(b), natstransport.Config{Prefix: prefix, Scope: "s", Node: "b", QueueLen: 1 << 16})
	r.Register(c)
	for _, tr := range []*natstransport.Transport{a, r} {
		if err := tr.Start(ctx); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = tr.Close() })
	}
	return a, c
}

// BenchmarkSend measures one-way throughput a → b through the real server,
// until b's handler has seen every message. Messages b drops as a slow
// consumer would stall it; the queue is large enough for the runs we make.
func BenchmarkSend(b *testing.B) {
	a, c := benchPair(b)
	ctx := context.Background()
	msg := make([]byte, 128)
	b.ReportAllocs()
	c.want.Store(int64(b.N))
	for range b.N {
		_ = a.Send(ctx, "b", msg)
	}
	select {
	case <-c.done:
	case <-time.After(time.Minute):
		b.Fatalf("b saw %d of %d messages (slow consumer drops?)", c.n.Load(), b.N)
	}
}

// BenchmarkCall measures a Call round trip a → b → a through the real
// server.
func BenchmarkCall(b *testing.B) {
	a, _ := benchPair(b)
	ctx := context.Background()
	req := make([]byte, 128)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.Call(ctx, "b", req); err != nil {
			b.Fatal(err)
		}
	}
}
