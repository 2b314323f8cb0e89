package muster

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// drainState tracks one Drain.
type drainState struct {
	mu      sync.Mutex
	unacked map[string]bool
	reply   chan error
	done    bool
	settle  *time.Timer
	s       *Scope
}

func (d *drainState) acked(node string) {
	d.mu.Lock()
	delete(d.unacked, node)
	start := len(d.unacked) == 0 && d.settle == nil && !d.done
	if start {
		d.settle = time.AfterFunc(d.s.cfg.DrainSettle, func() { d.s.coord.mbox.postAsync(&settled{}) })
	}
	d.mu.Unlock()
	if start {
		d.s.tr.Emit("muster_drain_settle", "scope", d.s.name, "node", d.s.self)
	}
}

// handedOff reports whether every peer acknowledged (the settle started).
func (d *drainState) handedOff() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.settle != nil
}

func (d *drainState) pending() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]string, 0, len(d.unacked))
	for n := range d.unacked {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func (d *drainState) finish(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.done {
		return
	}
	d.done = true
	if d.settle != nil {
		d.settle.Stop()
	}
	d.reply <- err
}

// Drain hands this node's router role back before it exits: joins are
// refused (ErrDraining), every outbound self-assertion stops (heartbeats,
// discovery) while inbound RPCs are still served, a leaving message goes to
// every peer, and each peer departs this node (moving its groups to new
// routers) and acknowledges. Once all acknowledged, Drain waits DrainSettle
// so broadcasts already routed here still fan out, then returns nil. If ctx
// ends first it returns a *DrainError (ErrDrainTimeout) naming the peers that
// did not acknowledge. If ctx ends during the settle (every peer already
// acknowledged), the hand-off is complete and Drain returns nil. If the
// coordinator restarts meanwhile it returns an error wrapping ErrRestarted.
// Drain is terminal: a drained scope should be closed.
func (s *Scope) Drain(ctx context.Context) error {
	if err := s.usable(); err != nil {
		return fmt.Errorf("muster: drain: %w", err)
	}
	s.draining.Store(true)
	req := &drainReq{reply: make(chan error, 1)}
	if err := s.coord.mbox.post(ctx, req); err != nil {
		return fmt.Errorf("muster: drain: %w", err)
	}
	select {
	case err := <-req.reply:
		if err != nil {
			return fmt.Errorf("muster: drain: %w", err)
		}
		return nil
	case <-ctx.Done():
		d := s.coord.currentDrain()
		switch {
		case d == nil:
			return fmt.Errorf("muster: drain: %w", ctx.Err())
		case d.handedOff():
			// Every peer acknowledged; ctx ended during the settle, which
			// only lets broadcasts already routed here fan out.
			s.tr.Emit("muster_drain_settle_cut", "scope", s.name, "node", s.self)
			return nil
		}
		return &DrainError{Unacked: d.pending()}
	case <-s.closing:
		return fmt.Errorf("muster: drain: %w", ErrClosed)
	}
}

// Rejoin ends a drain: the coordinator restarts as after a crash (a fresh
// incarnation, discovery broadcast), so peers add this node back and routing
// converges again; joins are accepted once it is ready. It returns at once
// (watch Status), ErrClosed after Close, and is a no-op when not draining.
func (s *Scope) Rejoin() error {
	if !s.draining.Load() {
		return nil
	}
	if err := s.usable(); err != nil {
		return fmt.Errorf("muster: rejoin: %w", err)
	}
	s.coord.mbox.postAsync(&resetReq{"rejoin after drain"})
	return nil
}

// Draining reports whether Drain has started and no Rejoin restart has
// ended it yet.
func (s *Scope) Draining() bool { return s.draining.Load() }

func (c *coordinator) startDrain(reply chan error) {
	s := c.s
	if c.drain != nil {
		reply <- fmt.Errorf("drain already in progress")
		return
	}
	s.draining.Store(true)
	c.leaving = true
	d := &drainState{unacked: map[string]bool{}, reply: reply, s: s}
	for n := range c.peers {
		d.unacked[n] = true
	}
	c.drainMu.Lock()
	c.drain = d
	c.drainMu.Unlock()
	s.tr.Emit("muster_drain_start", "scope", s.name, "node", s.self, "peers", len(d.unacked))
	s.broadcast(&wireMsg{Kind: kindLeaving, Inc: s.inc.Load()})
	d.acked("") // starts the settle timer when there is nobody to wait for
}

// currentDrain returns the running drain (nil if none); safe from any
// goroutine.
func (c *coordinator) currentDrain() *drainState {
	c.drainMu.Lock()
	defer c.drainMu.Unlock()
	return c.drain
}
