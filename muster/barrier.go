package muster

// noteView records a peer announcement if it is newer than the one we hold
// (member_views is newest-seq-wins and never reset across rebalances; seqs
// compare by incarnation first). It reports whether it changed anything.
func (c *coordinator) noteView(from string, inc uint64, hash uint64, seq Seq, transition bool) bool {
	if cur, ok := c.views[from]; ok && !cur.Seq.Less(seq) {
		return false
	}
	c.views[from] = viewEntry{Inc: inc, Hash: hash, Seq: seq, Transition: transition}
	return true
}

// agreed reports whether every other member's latest announcement is our
// committed view from the member's registered incarnation.
func (c *coordinator) agreed() bool {
	for _, m := range c.members {
		if m.Name == c.s.self {
			continue
		}
		v, ok := c.views[m.Name]
		if !ok || v.Inc != m.Inc || v.Transition || v.Hash != c.hash {
			return false
		}
	}
	return true
}

// recomputeStatus derives converging/ready from member_views. Frozen while a
// prepare round is open; a freshly (re)started coordinator alone in its view
// stays converging until singleton promotion.
func (c *coordinator) recomputeStatus() {
	if c.pending != nil {
		return
	}
	if !c.promoted && len(c.members) == 1 {
		c.setStatus(Converging)
		return
	}
	if c.agreed() {
		c.setStatus(Ready)
	} else {
		c.setStatus(Converging)
	}
}

// dropStale is drop_stale_router_entries: it deletes rows for groups we no
// longer route, but a foreign source's row only when (a) the source's latest
// announcement is the view our ring implements and (b) the row's seq is at
// or below that announcement's watermark. The delete matches the exact seq
// judged, so a concurrent re-claim that raised the row survives.
func (c *coordinator) dropStale() {
	s := c.s
	cur := s.view.Load().cur
	if c.pending != nil {
		return
	}
	// Judge under the table's read lock without copying it: routing is
	// checked per group once, and most rows are for groups we route.
	routed := map[string]bool{}
	stale := s.occ.scan(func(g, source string, r *occRow) bool {
		mine, ok := routed[g]
		if !ok {
			mine = cur.Find(g) == s.self
			routed[g] = mine
		}
		if mine {
			return false
		}
		if source == s.self {
			return true
		}
		v, ok := c.views[source]
		return ok && !v.Transition && v.Hash == c.hash && r.Seq.LessEq(v.Seq)
	})
	for _, e := range stale {
		s.crashPoint("coordinator.sweep.judged")
		s.tr.Emit("muster_drop_stale_judged", "scope", s.name, "node", s.self, "group", e.Group, "source", e.Source, "seq", e.Seq)
		if s.occ.deleteExact(e.Group, e.Source, e.Seq) {
			s.tr.Emit("muster_drop_stale_entry", "scope", s.name, "node", s.self, "group", e.Group, "source", e.Source)
		}
	}
}
