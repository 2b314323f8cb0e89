// Package mustertest holds what tests of Muster and of its users share: the
// test timer preset and a Member that stays until the test kills it.
package mustertest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/relaygw/relay/muster"
)

// FastConfig is the test timer preset: short cooldown and heartbeats, vacant
// flush and tombstone sweep driven by hand (long intervals), failure
// detection generous enough not to fire spuriously under -race. Node,
// Transport and Tracer are left for the caller.
func FastConfig() muster.Config {
	return muster.Config{
		Name:               "test",
		Shards:             2,
		Cooldown:           50 * time.Millisecond,
		VacantFlush:        time.Hour,
		ViewHeartbeat:      100 * time.Millisecond,
		RPCTimeout:         time.Second,
		GatherTimeout:      5 * time.Second,
		PingInterval:       50 * time.Millisecond,
		PeerDownAfter:      3 * time.Second,
		TombstoneWindow:    time.Hour,
		SingletonPromotion: 100 * time.Millisecond,
		AntiEntropy:        -1,
		DrainSettle:        10 * time.Millisecond,
	}
}

// Member is a muster.Member with a process-unique id ("m1", "m2", …) that
// stays joined until Kill.
type Member struct {
	id   string
	done chan struct{}
	once sync.Once
}

var memberSeq atomic.Int64

// NewMember returns a live Member.
func NewMember() *Member {
	return &Member{id: fmt.Sprintf("m%d", memberSeq.Add(1)), done: make(chan struct{})}
}

// ID implements muster.Member.
func (m *Member) ID() string { return m.id }

// Done implements muster.Member: closed by Kill.
func (m *Member) Done() <-chan struct{} { return m.done }

// Kill ends the member (idempotent).
func (m *Member) Kill() { m.once.Do(func() { close(m.done) }) }
