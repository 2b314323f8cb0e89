package main

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// stats collects delivery latencies from every socket, in shards so that
// thousands of reading goroutines do not queue on one lock.
type stats struct {
	shards   [64]statShard
	next     atomic.Uint32
	received atomic.Int64
	posted   atomic.Int64
	closed   atomic.Int64 // sockets that lost their connection after joining
}

type statShard struct {
	mu      sync.Mutex
	samples []time.Duration
	_       [40]byte // keep shards on separate cache lines
}

func newStats() *stats { return &stats{} }

func (s *stats) observe(d time.Duration) {
	s.received.Add(1)
	sh := &s.shards[s.next.Add(1)%uint32(len(s.shards))]
	sh.mu.Lock()
	sh.samples = append(sh.samples, d)
	sh.mu.Unlock()
}

func (s *stats) reset() {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.samples = sh.samples[:0]
		sh.mu.Unlock()
	}
	s.received.Store(0)
	s.posted.Store(0)
}

func (s *stats) all() []time.Duration {
	var d []time.Duration
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		d = append(d, sh.samples...)
		sh.mu.Unlock()
	}
	return d
}

func (s *stats) report(elapsed time.Duration, postErrs int64) {
	d := s.all()
	slices.Sort(d)
	pct := func(p float64) time.Duration {
		if len(d) == 0 {
			return 0
		}
		return d[min(len(d)-1, int(p*float64(len(d))))]
	}
	n := s.received.Load()
	fmt.Printf("events posted: %d (failed: %d)\n", s.posted.Load(), postErrs)
	fmt.Printf("deliveries: %d in %v: %.0f/s\n", n, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds())
	fmt.Printf("publish→socket latency: p50 %v  p90 %v  p99 %v  max %v\n",
		pct(0.50).Round(10*time.Microsecond), pct(0.90).Round(10*time.Microsecond),
		pct(0.99).Round(10*time.Microsecond), pct(1).Round(10*time.Microsecond))
}

// procSample sums RSS and CPU time over the given processes.
type procSample struct {
	rss int64 // bytes
	cpu time.Duration
}

const clockTicks = 100 // USER_HZ on Linux

func readProcs(pids []int) procSample {
	var s procSample
	for _, pid := range pids {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
					kb, _ := strconv.ParseInt(f[1], 10, 64)
					s.rss += kb * 1024
				}
			}
		}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			// Fields after the command name (which may hold spaces) start after ')'.
			if i := strings.LastIndexByte(string(b), ')'); i > 0 {
				f := strings.Fields(string(b)[i+1:])
				if len(f) > 13 {
					ut, _ := strconv.ParseInt(f[11], 10, 64)
					st, _ := strconv.ParseInt(f[12], 10, 64)
					s.cpu += time.Duration(ut+st) * time.Second / clockTicks
				}
			}
		}
	}
	return s
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
