package muster

import (
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/relaygw/relay/muster/ring"
)

// discoverMsg builds a discover (or discover-ack) to node to. The view and
// watermark piggyback is withheld (nil) while a prepare round is open and
// when we owe to a snapshot: handing an owed node our view before its data
// lands would let it count us as agreeing too early.
func (c *coordinator) discoverMsg(kind, to string) *wireMsg {
	m := &wireMsg{Kind: kind, Inc: c.s.inc.Load()}
	_, owed := c.owed[to]
	if c.pending == nil && !owed {
		h, wm := c.hash, c.viewSeq
		m.View, m.WM = &h, &wm
	}
	return m
}

func (c *coordinator) sendDiscover(to string) {
	if c.leaving {
		return
	}
	c.s.send(to, c.discoverMsg(kindDiscover, to))
}

func (c *coordinator) sendExpelled(id NodeID) {
	c.s.send(id.Name, &wireMsg{Kind: kindExpelled, Inc: c.s.inc.Load(), Target: id.Inc})
}

// admit checks a peer message's incarnation. It departs an older registered
// incarnation when a newer one shows up (a new incarnation is the old one's
// departure plus a join) and answers a departed incarnation with expelled.
// A non-nil error is a reset.
func (c *coordinator) admit(from string, inc uint64) (bool, error) {
	switch c.s.occ.admit(from, inc) {
	case admitDeparted:
		c.sendExpelled(NodeID{from, inc})
		return false, nil
	case admitStale:
		return false, nil
	}
	if old, ok := c.peers[from]; ok && old < inc {
		if err := c.depart(NodeID{from, old}, "new incarnation"); err != nil {
			return false, err
		}
	}
	return true, nil
}

// onNodeSeen is the nodeup counterpart: a node incarnation we never heard
// before. Offer it discovery.
func (c *coordinator) onNodeSeen(id NodeID) error {
	if id.Name == c.s.self {
		return nil
	}
	if ok, err := c.admit(id.Name, id.Inc); !ok || err != nil {
		return err
	}
	if _, ok := c.peers[id.Name]; !ok {
		c.sendDiscover(id.Name)
	}
	return nil
}

// onInbound handles a peer's Send or Broadcast. A non-nil error is a reset.
func (c *coordinator) onInbound(from string, m *wireMsg) error {
	s := c.s
	if m.Kind == kindExpelled {
		if m.Target == s.inc.Load() && !c.leaving {
			return c.reset("expelled by " + from)
		}
		return nil
	}
	if ok, err := c.admit(from, m.Inc); !ok || err != nil {
		return err
	}
	switch m.Kind {
	case kindDiscover, kindDiscoverOK:
		if c.leaving {
			return nil
		}
		if _, ok := c.peers[from]; !ok {
			c.register(NodeID{from, m.Inc})
		}
		if m.View != nil && m.WM != nil {
			c.noteView(from, m.Inc, *m.View, *m.WM, false)
		}
		if err := c.recomputeMembers(); err != nil {
			return err
		}
		if m.Kind == kindDiscover {
			ack := c.discoverMsg(kindDiscoverOK, from)
			s.tr.Emit("muster_discover_ack_sent", "scope", s.name, "node", s.self, "to", from, "withheld", ack.View == nil)
			s.send(from, ack)
		}
		c.recomputeStatus()
	case kindMarker:
		s.tr.Emit("muster_rebalance_marker", "scope", s.name, "node", s.self, "source", from, "view_hash", *m.View, "seq", m.Seq)
		c.retractMoved(from, m.Move)
		if c.noteView(from, m.Inc, *m.View, m.Seq, false) {
			c.recomputeStatus()
		}
	case kindLeaving:
		if err := c.depart(NodeID{from, m.Inc}, "leaving"); err != nil {
			return err
		}
		s.send(from, &wireMsg{Kind: kindLeaveOK, Inc: s.inc.Load()})
	case kindLeaveOK:
		if c.drain != nil {
			c.drain.acked(from)
		}
	}
	return nil
}

func (c *coordinator) register(id NodeID) {
	s := c.s
	c.peers[id.Name] = id.Inc
	s.met.PeerUp(id.Name)
	s.tr.Emit("muster_peer_registered", "scope", s.name, "node", s.self, "peer", id.Name, "inc", id.Inc)
	s.log.Debug("muster: node up", zap.String("peer", id.Name), zap.Uint64("incarnation", id.Inc))
}

// depart is the departure cleanup, scoped to the departed incarnation: its
// occupancy rows, view entry and owed round go, later writes from it are
// refused, and the view shrinks at once. A non-nil error is a reset (the
// shrink's rebalance could not gather).
func (c *coordinator) depart(id NodeID, reason string) error {
	s := c.s
	if inc, ok := c.peers[id.Name]; ok && inc <= id.Inc {
		delete(c.peers, id.Name)
	}
	if v, ok := c.views[id.Name]; ok && v.Inc <= id.Inc {
		delete(c.views, id.Name)
	}
	delete(c.owed, id.Name)
	// A member's rows are about to go while our view still counts it: stop
	// answering Targets for that view first, or a sender on it would get a
	// confident answer without the departed node's groups until the
	// rebalance below publishes the shrunk view.
	if Status(s.status.Load()) == Ready && slices.ContainsFunc(c.members, func(m NodeID) bool { return m.Name == id.Name && m.Inc <= id.Inc }) {
		c.setStatus(Converging)
	}
	rows := s.occ.departed(id.Name, id.Inc)
	if c.drain != nil {
		c.drain.acked(id.Name)
	}
	if reason != "leaving" && reason != "new incarnation" {
		c.sendExpelled(id)
	}
	s.met.PeerDown(id.Name)
	s.tr.Emit("muster_peer_down", "scope", s.name, "node", s.self, "peer", id.Name, "inc", id.Inc, "reason", reason, "rows", rows)
	s.log.Info("muster: peer down", zap.String("peer", id.Name), zap.Uint64("incarnation", id.Inc), zap.String("reason", reason), zap.Int("rows", rows))
	return c.recomputeMembers()
}

// target is the member list implied by the registered peers.
func (c *coordinator) target() []NodeID {
	t := []NodeID{{c.s.self, c.s.inc.Load()}}
	for n, inc := range c.peers {
		t = append(t, NodeID{n, inc})
	}
	return sortedMembers(t)
}

// recomputeMembers starts the membership change the peers imply: nothing if
// unchanged (cancelling an open round), an immediate rebalance for a pure
// shrink, a prepare round for any growth. A non-nil error is a reset.
func (c *coordinator) recomputeMembers() error {
	t := c.target()
	if slices.Equal(t, c.members) {
		if c.pending != nil {
			c.cancelRound()
		}
		return nil
	}
	if c.pending != nil && slices.Equal(t, c.pending.target) {
		return nil
	}
	grows := false
	for _, m := range t {
		if !slices.Contains(c.members, m) {
			grows = true
			break
		}
	}
	if !grows {
		c.pending = nil
		return c.rebalance(t)
	}
	return c.beginRound(t)
}

// heartbeat re-announces our view to every member we do not owe a snapshot
// (skipped during a prepare round or a drain) and re-offers discovery to
// every live node that is not a member.
func (c *coordinator) heartbeat() {
	s := c.s
	if c.leaving {
		if c.drain != nil {
			for n := range c.drain.unacked {
				s.send(n, &wireMsg{Kind: kindLeaving, Inc: s.inc.Load()})
			}
		}
		return
	}
	if c.pending == nil {
		c.announce(nil)
	}
	cutoff := time.Now().Add(-s.cfg.PeerDownAfter)
	for _, id := range s.live.alive(cutoff) {
		if id.Name == s.self {
			continue
		}
		if _, ok := c.peers[id.Name]; ok {
			continue
		}
		if s.occ.admit(id.Name, id.Inc) == admitDeparted {
			c.sendExpelled(id)
			continue
		}
		c.sendDiscover(id.Name)
		s.tr.Emit("muster_rediscover", "scope", s.name, "node", s.self, "target", id.Name)
	}
}

// announce sends a bare marker with our committed view and watermark to
// every member except self, skip, and every node we owe a snapshot.
func (c *coordinator) announce(skip map[string]bool) {
	s := c.s
	h, wm, mv := c.hash, c.viewSeq, c.move
	for _, m := range c.members {
		if m.Name == s.self || skip[m.Name] {
			continue
		}
		if _, owed := c.owed[m.Name]; owed {
			continue
		}
		s.tr.Emit("muster_marker_sent", "scope", s.name, "node", s.self, "to", m.Name, "view_hash", h, "seq", wm)
		s.send(m.Name, &wireMsg{Kind: kindMarker, Inc: s.inc.Load(), View: &h, Seq: wm, Move: &mv})
	}
}

// retractMoved applies a source's ring transition (mv, nil: nothing) to our
// rows for it: a group that moved onto us in that transition and that the
// source held was sent to us in the round at mv.Seq (a full snapshot or a
// delta), so its rows below mv.Seq for every other group that moved onto us
// are retractions we never received. They are left over from an earlier
// time we routed the group (the vacancy went to the router in between),
// and since we route the group again no sweep would ever judge them.
// Tombstoning in place keeps each row's seq, so the round at mv.Seq and any
// later claim still win. Applied on every round and marker that carries it
// (idempotent), so a late write below mv.Seq is retracted by the next
// heartbeat.
func (c *coordinator) retractMoved(from string, mv *ringMove) {
	s := c.s
	if mv == nil || from == s.self || slices.Equal(mv.Prev, mv.Cur) {
		return
	}
	prev, cur := c.ringOf(mv.Prev), c.ringOf(mv.Cur)
	onto := func(g string) bool { return cur.Find(g) == s.self && prev.Find(g) != s.self }
	for _, g := range s.occ.retract(from, mv.Seq, onto, time.Now()) {
		s.tr.Emit("muster_moved_retracted", "scope", s.name, "node", s.self, "group", g, "source", from, "seq", mv.Seq)
		s.log.Debug("muster: retracted a row of a group moved onto us", zap.String("group", g), zap.String("source", from), zap.Stringer("seq", mv.Seq))
	}
}

// ringOf returns the ring over names, from a small cache: every peer's
// heartbeat marker carries its last ring transition, and rebuilding two
// rings per marker dominated the coordinator's work. Rings are immutable and
// depend only on the names and VirtualNodes. Coordinator goroutine only.
func (c *coordinator) ringOf(names []string) *ring.Ring {
	key := strings.Join(names, "\x00")
	if r, ok := c.rings[key]; ok {
		return r
	}
	if c.rings == nil || len(c.rings) >= ringCacheSize {
		c.rings = make(map[string]*ring.Ring, ringCacheSize)
	}
	r := ring.New(names, c.s.cfg.VirtualNodes)
	c.rings[key] = r
	return r
}

// ringCacheSize bounds ringOf's cache (it is dropped whole when full).
const ringCacheSize = 32
