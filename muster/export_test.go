package muster

import "time"

// Test seams for the external test package (which can import memnet).

// EnableHooks turns on crash injection.
func (s *Scope) EnableHooks() { s.hooks = &testHooks{crashes: map[string]int{}} }

// ArmCrash makes the next n passes through point panic.
func (s *Scope) ArmCrash(point string, n int) {
	s.hooks.mu.Lock()
	s.hooks.crashes[point] += n
	s.hooks.mu.Unlock()
}

// ForceDown makes the failure detector treat node as silent now.
func (s *Scope) ForceDown(node string) {
	s.coord.mbox.postAsync(&suspectReq{node})
}

// SyncCoordinator returns once the coordinator has handled every message
// posted to it before the call (no time bound, unlike Dump).
func (s *Scope) SyncCoordinator() {
	done := make(chan struct{})
	s.coord.mbox.postAsync(&coordFunc{func(*coordinator) error { close(done); return nil }})
	select {
	case <-done:
	case <-s.closing:
	}
}

// FlushAll triggers every shard's vacant flush.
func (s *Scope) FlushAll() {
	for _, sh := range s.shards {
		sh.mbox.postAsync(&flushReq{})
	}
}

// Tick runs a coordinator timer now: "heartbeat", "gc", "fd" or "ae".
func (s *Scope) Tick(which string) {
	t := map[string]coordTimer{"heartbeat": timerHeartbeat, "gc": timerGC, "fd": timerFD, "ae": timerAE}[which]
	if t == 0 {
		panic("muster: unknown timer " + which)
	}
	s.coord.mbox.postAsync(&tickReq{t})
}

// Promote fires the singleton promotion timer now.
func (s *Scope) Promote() { s.coord.mbox.postAsync(&promote{s.inc.Load()}) }

// ResetCoordinator restarts the coordinator as a crash would.
func (s *Scope) ResetCoordinator() { s.coord.mbox.postAsync(&resetReq{"test"}) }

// CrashShard panics the shard owning group.
func (s *Scope) CrashShard(group string) { s.shardFor(group).mbox.postAsync(&crashReq{}) }

// GroupState returns group's claim state name.
func (s *Scope) GroupState(g string) string { return s.shardFor(g).state(g).st.String() }

// ExpireCooldown fires group's cooldown timer now (no-op unless cooling).
func (s *Scope) ExpireCooldown(g string) {
	sh := s.shardFor(g)
	done := make(chan struct{})
	sh.mbox.postAsync(&inspectReq{f: func() {
		if tok, ok := sh.cdToken[g]; ok {
			sh.cooldownExpired(&cooldownExpired{group: g, token: tok})
		}
		close(done)
	}})
	<-done
}

// Row returns the raw occupancy row for {group, source}.
func (s *Scope) Row(g, source string) (seq Seq, tomb bool, ok bool) {
	r, ok := s.occ.row(g, source)
	return r.Seq, r.Tomb, ok
}

// WriteOccupied and WriteVacant call the router-side entry points directly,
// as a remote source's RPC would.
func (s *Scope) WriteOccupied(g, source string, seq Seq) error {
	_, err := s.applyOccupied(source, &wireMsg{Kind: kindOccupied, Inc: seq.Inc, Group: g, Seq: seq})
	return err
}

func (s *Scope) WriteVacant(groups []string, source string, seq Seq) error {
	_, err := s.applyVacant(source, &wireMsg{Kind: kindVacant, Inc: seq.Inc, Groups: groups, Seq: seq})
	return err
}

// Owed lists the routers this node owes a snapshot.
func (s *Scope) Owed() []string { return s.Dump().Owed }

// Reap reaps tombstones older than d.
func (s *Scope) Reap(d time.Duration) int { return s.occ.reap(time.Now().Add(-d)) }

// Depart runs the departure cleanup for (node, inc) as the failure detector
// would.
func (s *Scope) Depart(node string, inc uint64) {
	done := make(chan struct{})
	s.coord.mbox.postAsync(&coordFunc{func(c *coordinator) error { defer close(done); return c.depart(NodeID{node, inc}, "test") }})
	<-done
}

// SendRaw sends an encoded message of kind from s to node, withholding
// nothing (tests use it to replay a handshake).
func (s *Scope) SendDiscover(to string) {
	s.send(to, &wireMsg{Kind: kindDiscover, Inc: s.inc.Load()})
}

// ShardIndex returns the index of the shard owning group.
func (s *Scope) ShardIndex(group string) int { return s.shardFor(group).idx }

// DropRow deletes a present row outright (simulates a lost row).
func (s *Scope) DropRow(g, source string) bool {
	r, ok := s.occ.row(g, source)
	return ok && s.occ.deleteExact(g, source, r.Seq)
}
