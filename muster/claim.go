package muster

import (
	"time"

	"go.uber.org/zap"
)

// join is the claim state machine's entry point (spec: join/3 is a single
// call to the group's shard; the shard decides).
func (sh *shard) join(r *joinReq) {
	s := sh.s
	if s.draining.Load() {
		r.respond(ErrDraining)
		return
	}
	g := r.group
	switch st := sh.state(g); st.st {
	case stateOccupied:
		sh.registerJoin(r)
		r.respond(nil)
	case stateCooldown:
		// Reclaim with no RPC: the router still believes we hold g. When we
		// are our own router, re-assert the self row at a fresh seq (a
		// coordinator restart may have routed g elsewhere meanwhile and
		// tombstoned it).
		sh.stopCooldown(g)
		sh.registerJoin(r)
		sh.setState(g, stateOccupied, Seq{})
		if s.view.Load().cur.Find(g) == s.self {
			sh.upsertSelf(g)
		}
		s.log.Debug("muster: reclaimed from cooldown", zap.String("group", g))
		r.respond(nil)
	case stateOccupiedPending:
		sh.waiters[g] = append(sh.waiters[g], r)
		s.log.Debug("muster: parked behind in-flight claim", zap.String("group", g))
	default: // nil, vacant_queued, vacant_flushing: claim afresh
		sh.claim(r)
	}
}

// claim is the first-member path. Durable state is always committed before
// the externally visible occupancy assertion.
func (sh *shard) claim(r *joinReq) {
	s, g := sh.s, r.group
	router := s.view.Load().cur.Find(g)
	if router == s.self {
		sh.registerJoin(r)
		sh.setState(g, stateOccupied, Seq{})
		s.crashPoint("shard.local.registered")
		sh.upsertSelf(g)
		s.crashPoint("shard.local.row")
		s.log.Debug("muster: occupied locally", zap.String("group", g))
		r.respond(nil)
		return
	}
	seq := s.nextSeq()
	sh.setState(g, stateOccupiedPending, seq)
	sh.waiters[g] = []*joinReq{r}
	s.crashPoint("shard.pending.written")
	s.tr.Emit("muster_occupied_dispatch", "scope", s.name, "node", s.self, "group", g, "router", router, "seq", seq)
	s.log.Debug("muster: claim dispatched", zap.String("group", g), zap.String("router", router), zap.Stringer("seq", seq))
	s.worker(func() {
		err := s.call(router, &wireMsg{Kind: kindOccupied, Inc: seq.Inc, Group: g, Seq: seq})
		s.met.ClaimRPC(err == nil)
		s.tr.Emit("muster_rpc_result", "scope", s.name, "node", s.self, "fn", "occupied", "router", router, "group", g, "ok", err == nil, "err", errText(err))
		sh.mbox.postAsync(&occupiedDone{group: g, seq: seq, err: err})
	})
	s.crashPoint("shard.pending.dispatched")
}

func (sh *shard) occupiedDone(d *occupiedDone) {
	s, g := sh.s, d.group
	st := sh.state(g)
	if st.st != stateOccupiedPending || st.seq != d.seq {
		return // settled by a rebalance or superseded: the late result is dropped
	}
	ws := sh.waiters[g]
	delete(sh.waiters, g)
	if d.err != nil {
		// The router may still apply the claim later: keep a record that
		// retracts it (vacant_queued), never forget the group.
		sh.setState(g, stateVacantQueued, Seq{})
		s.log.Debug("muster: claim failed", zap.String("group", g), zap.Error(d.err))
		for _, w := range ws {
			w.respond(ErrRPCFailed)
		}
		return
	}
	for _, w := range ws {
		sh.register(g, w.m)
	}
	sh.setState(g, stateOccupied, Seq{})
	for _, w := range ws {
		w.respond(nil)
	}
	sh.afterRemove(g) // every waiter may have left meanwhile
}

func (sh *shard) leave(r *leaveReq) {
	g := r.group
	removed := sh.remove(g, r.id, nil)
	if ws := sh.waiters[g]; len(ws) > 0 {
		kept := ws[:0]
		for _, w := range ws {
			if w.m.ID() == r.id {
				w.respond(ErrLeft)
				continue
			}
			kept = append(kept, w)
		}
		sh.waiters[g] = kept
	}
	if removed {
		sh.afterRemove(g)
	}
	if r.reply != nil {
		r.reply <- nil
	}
}

func (sh *shard) memberDown(d *memberDown) {
	if sh.remove(d.group, d.id, d.e) {
		sh.s.log.Debug("muster: member gone", zap.String("group", d.group), zap.String("member", d.id))
		sh.afterRemove(d.group)
	}
}

// afterRemove enters cooldown when a held group has no member left.
func (sh *shard) afterRemove(g string) {
	if sh.memberCount(g) == 0 && sh.state(g).st == stateOccupied {
		sh.startCooldown(g)
	}
}

func (sh *shard) startCooldown(g string) {
	s := sh.s
	if s.cfg.Cooldown == NoCooldown {
		sh.setState(g, stateVacantQueued, Seq{})
		return
	}
	sh.stopCooldown(g)
	sh.token++
	tok := sh.token
	sh.cdToken[g] = tok
	sh.setState(g, stateCooldown, Seq{})
	sh.cooldown[g] = time.AfterFunc(s.cfg.Cooldown, func() {
		sh.mbox.postAsync(&cooldownExpired{group: g, token: tok})
	})
	s.log.Debug("muster: cooldown", zap.String("group", g))
}

func (sh *shard) stopCooldown(g string) {
	if t := sh.cooldown[g]; t != nil {
		t.Stop()
		delete(sh.cooldown, g)
	}
	delete(sh.cdToken, g)
}

func (sh *shard) cooldownExpired(c *cooldownExpired) {
	if sh.cdToken[c.group] != c.token || sh.state(c.group).st != stateCooldown {
		return
	}
	delete(sh.cooldown, c.group)
	delete(sh.cdToken, c.group)
	sh.setState(c.group, stateVacantQueued, Seq{})
	sh.s.log.Debug("muster: cooldown expired; vacancy queued", zap.String("group", c.group))
}

// flush sends this shard's queued vacancies, one batch per router, under the
// ring current at flush time. Self-routed groups are tombstoned locally.
func (sh *shard) flush() {
	s := sh.s
	sh.s.tr.Emit("muster_flush_tick", "scope", s.name, "node", s.self, "shard", sh.idx)
	cur := s.view.Load().cur
	byRouter := map[string][]string{}
	sh.tab.mu.RLock()
	for g, st := range sh.tab.states {
		if st.st == stateVacantQueued {
			r := cur.Find(g)
			byRouter[r] = append(byRouter[r], g)
		}
	}
	sh.tab.mu.RUnlock()
	for router, groups := range byRouter {
		if router == s.self {
			for _, g := range groups {
				sh.tombSelf(g)
				sh.setState(g, stateNil, Seq{})
			}
			continue
		}
		seq := s.nextSeq()
		for _, g := range groups {
			sh.setState(g, stateVacantFlushing, seq)
		}
		s.log.Debug("muster: vacant flush", zap.String("router", router), zap.Int("groups", len(groups)))
		s.worker(func() {
			err := s.call(router, &wireMsg{Kind: kindVacant, Inc: seq.Inc, Groups: groups, Seq: seq})
			s.met.VacantBatch(err == nil, len(groups))
			s.tr.Emit("muster_rpc_result", "scope", s.name, "node", s.self, "fn", "vacant_batch", "router", router, "ok", err == nil, "err", errText(err))
			sh.mbox.postAsync(&vacantDone{router: router, groups: groups, seq: seq, err: err})
		})
	}
}

func (sh *shard) vacantDone(d *vacantDone) {
	for _, g := range d.groups {
		st := sh.state(g)
		if st.st != stateVacantFlushing || st.seq != d.seq {
			continue // re-claimed or normalized by a rebalance
		}
		if d.err != nil {
			sh.setState(g, stateVacantQueued, Seq{})
		} else {
			sh.setState(g, stateNil, Seq{})
		}
	}
	if d.err != nil {
		sh.s.log.Debug("muster: vacant batch failed; will retry", zap.String("router", d.router), zap.Error(d.err))
	}
}

// gather answers the coordinator's rebalance gather (step 5): it normalizes
// in-flight batches to queued, settles waiters of pending claims whose router
// moved, and returns the held groups (occupied, cooldown, occupied_pending).
// With side set (anti-entropy) it only reads.
func (sh *shard) gather(side bool) []string {
	s := sh.s
	s.tr.Emit("muster_shard_gather", "scope", s.name, "node", s.self, "shard", sh.idx)
	v := s.view.Load()
	sh.tab.mu.RLock()
	snap := make(map[string]groupState, len(sh.tab.states))
	for g, st := range sh.tab.states {
		snap[g] = st
	}
	sh.tab.mu.RUnlock()
	held := make([]string, 0, len(snap))
	for g, st := range snap {
		switch st.st {
		case stateOccupied, stateCooldown:
			held = append(held, g)
		case stateOccupiedPending:
			held = append(held, g)
			if !side && v.prev.Find(g) != v.cur.Find(g) {
				ws := sh.waiters[g]
				delete(sh.waiters, g)
				for _, w := range ws {
					sh.register(g, w.m)
				}
				sh.setState(g, stateOccupied, Seq{})
				for _, w := range ws {
					w.respond(nil)
				}
				sh.afterRemove(g)
			}
		case stateVacantFlushing:
			if !side {
				sh.setState(g, stateVacantQueued, Seq{})
			}
		}
	}
	return held
}
