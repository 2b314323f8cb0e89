package muster_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/relaygw/relay/muster"
	"github.com/relaygw/relay/muster/ring"
)

// steadyMember never dies on its own (nil Done: no monitor goroutine).
type steadyMember string

func (m steadyMember) ID() string            { return string(m) }
func (m steadyMember) Done() <-chan struct{} { return nil }

func benchCluster(b *testing.B, names ...string) *cluster {
	c := newCluster(b, 1)
	c.tr = nil
	c.mod = func(_ string, cfg *muster.Config) {
		cfg.Tracer = nil
		cfg.Shards = 4
		cfg.Cooldown = muster.NoCooldown
		cfg.RPCTimeout = 30 * time.Second
		cfg.PingInterval = 10 * time.Second
		cfg.PeerDownAfter = time.Minute
		cfg.ViewHeartbeat = time.Second
	}
	for _, n := range names {
		c.add(n)
	}
	c.waitReady(names...)
	return c
}

// BenchmarkJoinLeave measures a first join plus the last leave of a group
// (the claim path) on one node: ops/s = 1e9 / (ns/op).
func BenchmarkJoinLeave(b *testing.B) {
	for _, tc := range []struct {
		name  string
		nodes []string
	}{{"local-router", []string{"a"}}, {"remote-router", []string{"a", "b"}}} {
		b.Run(tc.name, func(b *testing.B) {
			c := benchCluster(b, tc.nodes...)
			s := c.node("a")
			want := "a"
			if len(tc.nodes) > 1 {
				want = "b"
			}
			r := ring.New(tc.nodes, 0)
			groups := make([]string, 0, 4096)
			for i := 0; len(groups) < cap(groups); i++ {
				if g := fmt.Sprintf("g%d", i); r.Find(g) == want {
					groups = append(groups, g)
				}
			}
			ctx := context.Background()
			m := steadyMember("m")
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				g := groups[i%len(groups)]
				if err := s.Join(ctx, g, m); err != nil {
					b.Fatal(err)
				}
				if err := s.Leave(ctx, g, m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkJoinLeaveParallel is the same from many goroutines at once.
func BenchmarkJoinLeaveParallel(b *testing.B) {
	c := benchCluster(b, "a", "b")
	s := c.node("a")
	var n sync.Mutex
	next := 0
	b.RunParallel(func(pb *testing.PB) {
		n.Lock()
		id := next
		next++
		n.Unlock()
		m := steadyMember(fmt.Sprint("m", id))
		ctx := context.Background()
		for i := 0; pb.Next(); i++ {
			g := fmt.Sprintf("p%d:%d", id, i%4096)
			if err := s.Join(ctx, g, m); err != nil {
				b.Fatal(err)
			}
			if err := s.Leave(ctx, g, m); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkRouter measures Router on a ready 4-node view.
func BenchmarkRouter(b *testing.B) {
	c := benchCluster(b, "a", "b", "c", "d")
	s := c.node("a")
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("session:%d", i)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_ = s.Router(keys[i&1023])
	}
}

// BenchmarkRebalance100k: each of three nodes holds the same 100,000 groups;
// "snapshot" adds a 4th node (growth: full snapshots to the new router) and
// "delta" removes one of four (shrink: deltas to surviving routers). It
// reports the time until every node is ready and the messages sent.
// Run with -benchtime=1x.
func BenchmarkRebalance100k(b *testing.B) {
	const groups = 100_000
	for _, path := range []string{"snapshot", "delta"} {
		b.Run(path, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				initial := []string{"a", "b", "c"}
				if path == "delta" {
					initial = append(initial, "d")
				}
				c := benchCluster(b, initial...)
				var wg sync.WaitGroup
				for _, n := range []string{"a", "b", "c"} {
					s := c.node(n)
					for w := 0; w < 8; w++ {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for g := w; g < groups; g += 8 {
								if err := s.Join(context.Background(), fmt.Sprintf("room:%d", g), steadyMember("m")); err != nil {
									b.Error(err)
									return
								}
							}
						}()
					}
				}
				wg.Wait()
				c.waitReady(initial...)
				before := c.net.Total()
				b.StartTimer()
				start := time.Now()
				if path == "snapshot" {
					c.add("d")
					c.waitReady("a", "b", "c", "d")
				} else {
					c.stop("d")
					c.waitReady("a", "b", "c")
				}
				took := time.Since(start)
				b.StopTimer()
				b.ReportMetric(float64(took.Milliseconds()), "ms/rebalance")
				b.ReportMetric(float64(c.net.Total()-before), "msgs/rebalance")
				c.closeAll()
			}
		})
	}
}
