package muster

import (
	"errors"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/relaygw/relay/muster/ring"
)

// beginRound opens a prepare round toward target (two-phase view adoption on
// growth): status rebalancing with the target's hash published, the ring left
// unchanged (claims keep going to the old routers), and every still-connected
// old member asked to invalidate us. An empty audience commits at once.
// A non-nil error is a reset.
func (c *coordinator) beginRound(target []NodeID) error {
	s := c.s
	seq := s.nextSeq()
	r := &viewRound{target: target, awaiting: map[string]bool{}, seq: seq}
	for _, m := range c.members {
		if m.Name == s.self {
			continue
		}
		if inc, ok := c.peers[m.Name]; ok && inc == m.Inc {
			r.awaiting[m.Name] = true
		}
	}
	c.pending = r
	if len(r.awaiting) == 0 {
		return c.rebalance(target)
	}
	s.viewHash.Store(ViewHash(target))
	c.publishFanout(target)
	c.setStatus(Rebalancing)
	if s.tr.Enabled() { // names allocates
		s.tr.Emit("muster_view_prepare", "scope", s.name, "node", s.self, "to", names(target), "seq", seq, "audience", len(r.awaiting))
	}
	for n := range r.awaiting {
		id := NodeID{n, c.peers[n]}
		s.worker(func() {
			err := s.call(id.Name, &wireMsg{Kind: kindPrepare, Inc: seq.Inc, Seq: seq})
			s.tr.Emit("muster_rpc_result", "scope", s.name, "node", s.self, "fn", "prepare", "router", id.Name, "ok", err == nil, "err", errText(err))
			c.mbox.postAsync(&prepareDone{node: id, seq: seq, err: err})
		})
	}
	return nil
}

// publishFanout publishes the union of the committed and target member names
// as Router's fan-out set while rebalancing.
func (c *coordinator) publishFanout(target []NodeID) {
	v := *c.s.view.Load()
	fan := names(c.members)
	for _, n := range names(target) {
		if !slices.Contains(fan, n) {
			fan = append(fan, n)
		}
	}
	slices.Sort(fan)
	v.fanout = fan
	c.s.view.Store(&v)
}

// onPrepareDone settles one prepare of the open round. A refusal (we are
// departed there) or a failure toward a member of the target resets the
// coordinator; a failure toward a node the target dropped is ignored.
func (c *coordinator) onPrepareDone(d *prepareDone) error {
	s := c.s
	r := c.pending
	if r == nil || r.seq != d.seq || !r.awaiting[d.node.Name] {
		return nil // superseded round: stale ack dropped
	}
	if d.err != nil {
		if errors.Is(d.err, ErrNotPeer) {
			return c.reset("prepare refused by " + d.node.Name)
		}
		if slices.Contains(r.target, d.node) {
			s.log.Warn("muster: prepare failed", zap.String("peer", d.node.Name), zap.Error(d.err))
			return c.reset("prepare to " + d.node.Name + " failed")
		}
	}
	delete(r.awaiting, d.node.Name)
	if len(r.awaiting) == 0 {
		return c.rebalance(r.target)
	}
	return nil
}

// cancelRound returns to the committed view: the acked recipients hold an
// invalidation at the round seq, so the watermark is raised past it and
// re-announced at once.
func (c *coordinator) cancelRound() {
	s := c.s
	r := c.pending
	c.pending = nil
	s.viewHash.Store(c.hash)
	c.viewSeq = s.nextSeq()
	v := *s.view.Load()
	v.fanout = names(c.members)
	s.view.Store(&v)
	s.tr.Emit("muster_view_cancel", "scope", s.name, "node", s.self, "seq", r.seq, "view_hash", c.hash)
	c.setStatus(Converging)
	c.announce(nil)
	c.recomputeStatus()
}

// applyPrepare is the recipient side of a prepare: the mover's view entry
// becomes the in-transition sentinel at the round seq (newest-seq-wins), so
// we stop trusting our table for any view counting the mover. It returns
// the Call's reply error (ErrNotPeer for a departed mover).
func (c *coordinator) applyPrepare(from string, m *wireMsg) error {
	s := c.s
	switch s.occ.admit(from, m.Inc) {
	case admitDeparted:
		return ErrNotPeer
	case admitStale:
		return nil
	}
	if c.noteView(from, m.Inc, 0, m.Seq, true) {
		c.recomputeStatus()
	}
	s.tr.Emit("muster_transition_applied", "scope", s.name, "node", s.self, "source", from, "seq", m.Seq)
	return nil
}

// rebalance adopts target: the numbered steps of the spec's do_rebalance.
// A non-nil error (a shard did not answer the gather) is a reset; nothing
// after the gather runs.
func (c *coordinator) rebalance(target []NodeID) error {
	s := c.s
	start := time.Now()
	old := c.members
	c.pending = nil
	c.promoted = true
	hash := ViewHash(target)
	if s.tr.Enabled() { // names allocates
		s.tr.Emit("muster_rebalance_start", "scope", s.name, "node", s.self, "from", names(old), "to", names(target), "view_hash", hash)
	}
	added, removed := diffMembers(old, target)
	s.log.Debug("muster: rebalance", zap.Int("members", len(target)), zap.Int("was", len(old)),
		zap.Strings("added", added), zap.Strings("removed", removed), viewHashField(hash))

	// Steps 2-3: status rebalancing, new hash, ring swap keeping the previous
	// generation.
	s.viewHash.Store(hash)
	prev := s.view.Load().cur
	cur := ring.New(names(target), s.cfg.VirtualNodes)
	s.view.Store(&routeView{cur: cur, prev: prev, members: target, fanout: unionNames(old, target)})
	c.setStatus(Rebalancing)
	c.members, c.hash = target, hash

	// Step 4: the snapshot seq cut.
	snapSeq := s.nextSeq()
	c.move = ringMove{Seq: snapSeq, Prev: names(old), Cur: names(target)}

	// Step 5: synchronous gather.
	held, err := c.gather(false)
	if err != nil {
		return err
	}

	// Step 6: moved groups and affected routers.
	now := time.Now()
	byRouter := map[string][]string{}
	moved := map[string][]string{}
	nMoved := 0
	for _, g := range held {
		nr := cur.Find(g)
		if nr != prev.Find(g) {
			nMoved++
			if nr != s.self {
				moved[nr] = append(moved[nr], g)
			}
		}
		if nr == s.self {
			s.occ.upsert(g, s.self, snapSeq, false, now)
			continue
		}
		byRouter[nr] = append(byRouter[nr], g)
	}
	affected := map[string]bool{}
	for r := range moved {
		affected[r] = true
	}
	// A member new to our view gets a full snapshot even when we hold
	// nothing it routes: its table may still carry our rows from before it
	// left our view (its tables survive coordinator resets), and only a
	// full snapshot replaces them.
	for _, m := range target {
		if m.Name != s.self && !slices.Contains(old, m) {
			affected[m.Name] = true
		}
	}

	// Step 7: full snapshot or delta to each affected router.
	fulls, deltas := 0, 0
	for _, m := range target {
		if !affected[m.Name] {
			continue
		}
		_, owed := c.owed[m.Name]
		full := owed || !slices.Contains(old, m)
		groups := moved[m.Name]
		if full {
			groups = byRouter[m.Name]
			fulls++
		} else {
			deltas++
		}
		c.owed[m.Name] = snapSeq
		c.dispatchRound(m, groups, snapSeq, full)
	}

	// Step 8: bare markers to every other member not owed.
	c.viewSeq = snapSeq
	c.announce(affected)

	// Step 9: our own stale rows.
	c.dropStale()

	// Step 10: leave rebalancing.
	c.setStatus(Converging)
	c.recomputeStatus()
	took := time.Since(start)
	s.met.Rebalanced(len(held), nMoved, fulls, deltas, took)
	if s.tr.Enabled() { // names allocates
		s.tr.Emit("muster_rebalance_done", "scope", s.name, "node", s.self, "members", names(target), "view_hash", hash,
			"held", len(held), "moved", nMoved, "snapshots", fulls, "deltas", deltas)
	}
	s.log.Debug("muster: rebalance done", zap.Int("held", len(held)), zap.Int("moved", nMoved),
		zap.Int("snapshots", fulls), zap.Int("deltas", deltas), zap.Duration("took", took))
	return nil
}

func (c *coordinator) dispatchRound(to NodeID, groups []string, seq Seq, full bool) {
	s := c.s
	h := c.hash
	mv := c.move
	msg := &wireMsg{Kind: kindRound, Inc: seq.Inc, Groups: groups, Seq: seq, View: &h, Full: full, Move: &mv}
	s.tr.Emit("muster_round_dispatch", "scope", s.name, "node", s.self, "router", to.Name, "full", full, "groups", len(groups), "seq", seq)
	s.worker(func() {
		err := s.call(to.Name, msg)
		s.tr.Emit("muster_rpc_result", "scope", s.name, "node", s.self, "fn", "round", "router", to.Name, "full", full, "ok", err == nil, "err", errText(err))
		c.mbox.postAsync(&roundDone{router: to, seq: seq, err: err})
	})
}

// onRoundDone settles an owed round. A failure toward a router still in the
// view resets the coordinator (it re-announces from a clean slate); a
// failure about a router that already left is ignored. A non-nil error is a
// reset.
func (c *coordinator) onRoundDone(d *roundDone) error {
	s := c.s
	if d.err == nil {
		if c.owed[d.router.Name] == d.seq {
			delete(c.owed, d.router.Name)
			// The bare markers this router missed while owed ride this ack:
			// its data is applied, so announce the current view now rather
			// than at the next heartbeat.
			if c.pending == nil && !c.leaving && slices.Contains(c.members, d.router) {
				h, wm := c.hash, c.viewSeq
				s.tr.Emit("muster_marker_sent", "scope", s.name, "node", s.self, "to", d.router.Name, "view_hash", h, "seq", wm)
				mv := c.move
				s.send(d.router.Name, &wireMsg{Kind: kindMarker, Inc: s.inc.Load(), View: &h, Seq: wm, Move: &mv})
			}
		}
		return nil
	}
	s.log.Warn("muster: rebalance round failed", zap.String("router", d.router.Name), zap.Error(d.err))
	s.tr.Emit("muster_round_failed", "scope", s.name, "node", s.self, "router", d.router.Name, "member", slices.Contains(c.members, d.router))
	if errors.Is(d.err, ErrNotPeer) && d.seq.Inc == s.inc.Load() {
		return c.reset("round refused by " + d.router.Name)
	}
	if slices.Contains(c.members, d.router) && c.owed[d.router.Name] == d.seq {
		return c.reset("round to " + d.router.Name + " failed")
	}
	return nil
}

// applyRound is the receiver side of a snapshot or delta, serialized here:
// a round not newer than the last applied from its source is dropped whole;
// otherwise the rows and the sender's view are committed together. reply is
// the Call's answer (ErrNotPeer for a departed source); a non-nil err is a
// reset of ours (departing the source's older incarnation could not
// rebalance), decided after the rows were applied, so reply stays nil.
func (c *coordinator) applyRound(from string, m *wireMsg) (reply, err error) {
	s := c.s
	s.tr.Emit("muster_round_apply", "span", "start", "scope", s.name, "node", s.self, "source", from, "full", m.Full, "seq", m.Seq)
	if last, ok := s.applied[from]; ok && m.Seq.LessEq(last) {
		s.tr.Emit("muster_round_apply", "span", "dropped", "scope", s.name, "node", s.self, "source", from, "seq", m.Seq)
		return nil, nil
	}
	s.crashPoint("coordinator.round.apply")
	switch s.occ.applyRound(from, m.Groups, m.Seq, m.Full, time.Now()) {
	case admitDeparted:
		c.sendExpelled(NodeID{from, m.Inc})
		return ErrNotPeer, nil
	case admitStale:
		return nil, nil
	}
	s.applied[from] = m.Seq
	if old, ok := c.peers[from]; ok && old < m.Inc {
		if err := c.depart(NodeID{from, old}, "new incarnation"); err != nil {
			return nil, err
		}
	}
	c.retractMoved(from, m.Move)
	if m.View != nil {
		c.noteView(from, m.Inc, *m.View, m.Seq, false)
	}
	c.recomputeStatus()
	s.tr.Emit("muster_node_state_received", "scope", s.name, "node", s.self, "source", from, "view_hash", m.View, "groups", len(m.Groups), "full", m.Full, "seq", m.Seq)
	return nil, nil
}

// gather asks every shard for its held groups, bounded by GatherTimeout; a
// shard that does not answer resets the coordinator (a *resetError wrapping
// errGatherTimeout).
func (c *coordinator) gather(side bool) ([]string, error) {
	s := c.s
	timeout := time.NewTimer(s.cfg.GatherTimeout)
	defer timeout.Stop()
	var held []string
	for _, sh := range s.shards {
		req := &gatherReq{held: make(chan []string, 1), side: side}
		select {
		case sh.mbox.ch <- req:
		case <-timeout.C:
			return nil, &resetError{reason: "gather", err: errGatherTimeout}
		case <-s.closing:
			return held, nil
		}
		select {
		case h := <-req.held:
			held = append(held, h...)
		case <-timeout.C:
			return nil, &resetError{reason: "gather", err: errGatherTimeout}
		case <-s.closing:
			return held, nil
		}
	}
	return held, nil
}

func diffMembers(old, cur []NodeID) (added, removed []string) {
	for _, m := range cur {
		if !slices.Contains(old, m) {
			added = append(added, m.String())
		}
	}
	for _, m := range old {
		if !slices.Contains(cur, m) {
			removed = append(removed, m.String())
		}
	}
	return
}

func unionNames(a, b []NodeID) []string {
	out := names(a)
	for _, n := range names(b) {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}
