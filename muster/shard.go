package muster

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
)

// claimState is a group's claim state on its owning shard (the "have I told
// the router?" state machine of the spec's Key invariants).
type claimState uint8

const (
	stateNil             claimState = iota // forgotten: not held, router told nothing
	stateOccupiedPending                   // claim dispatched to the router, waiters parked
	stateOccupied                          // held with ≥1 local member (router told)
	stateCooldown                          // no members; router still believes we hold it
	stateVacantQueued                      // waiting for the next vacant flush
	stateVacantFlushing                    // vacant batch in flight
)

func (c claimState) String() string {
	return [...]string{"nil", "occupied_pending", "occupied", "cooldown", "vacant_queued", "vacant_flushing"}[c]
}

// groupState is a durable claim-state row. seq is the pending claim's seq
// (occupied_pending) or the in-flight batch's seq (vacant_flushing).
type groupState struct {
	st  claimState
	seq Seq
}

// entry is one registered local member.
type entry struct {
	m    Member
	stop chan struct{} // closed when the member is removed (ends its monitor)
}

// shardTables are a shard's membership and claim-state tables. They are owned
// by the Scope, so a shard restart rebuilds from them; only the shard's own
// goroutine writes them (under mu, so Dump and LocalMembers can read).
type shardTables struct {
	mu      sync.RWMutex
	entries map[string]map[string]*entry
	states  map[string]groupState
}

// shard owns the groups hashing to it: their local membership and claim
// state machine. It runs one goroutine; a panic restarts it, and the restart
// reconciles from the durable tables.
type shard struct {
	s    *Scope
	idx  int
	tab  *shardTables
	mbox mailbox[shardMsg] // durable: survives restarts

	// Volatile, rebuilt on restart.
	waiters  map[string][]*joinReq
	cooldown map[string]*time.Timer
	cdToken  map[string]uint64
	token    uint64   // never reset, so a stale timer's token never matches
	inflight *joinReq // the join being handled (answered if the shard panics)
}

// respond answers the joiner once; later answers are dropped. Only the
// owning shard's goroutine calls it.
func (r *joinReq) respond(err error) {
	if r.answered {
		return
	}
	r.answered = true
	r.reply <- err
}

// Shard mailbox messages.
type (
	joinReq struct {
		group string
		m     Member
		reply chan error
		// Shard goroutine only.
		answered bool
		added    *entry // the entry this join registered, until answered
	}
	leaveReq struct {
		group, id string
		reply     chan error // nil for a compensating leave
	}
	memberDown struct {
		group, id string
		e         *entry
	}
	occupiedDone struct {
		group string
		seq   Seq
		err   error
	}
	cooldownExpired struct {
		group string
		token uint64
	}
	flushReq   struct{}
	vacantDone struct {
		router string
		groups []string
		seq    Seq
		err    error
	}
	gatherReq struct {
		held chan []string
		side bool // side-effect free (anti-entropy)
	}
	rebuildReq struct{ done chan struct{} }
	crashReq   struct{}
	inspectReq struct{ f func() } // runs f on the shard goroutine
)

func newShard(s *Scope, idx int) *shard {
	return &shard{
		s:   s,
		idx: idx,
		tab: &shardTables{
			entries: make(map[string]map[string]*entry),
			states:  make(map[string]groupState),
		},
		mbox: newMailbox[shardMsg](1024, s.closing),
	}
}

func (sh *shard) run() {
	defer sh.s.wg.Done()
	for sh.loop() {
	}
}

// loop runs the shard until the scope closes (false) or it panics (true).
func (sh *shard) loop() (restart bool) {
	defer func() {
		if r := recover(); r != nil {
			sh.s.log.Error("muster: shard crashed; restarting", zap.Int("shard", sh.idx), zap.Any("panic", r))
			sh.failWaiters(ErrRestarted)
			sh.abortInflight()
			sh.s.tr.Emit("muster_shard_crash", "scope", sh.s.name, "node", sh.s.self, "shard", sh.idx, "reason", fmt.Sprint(r))
			restart = true
		}
	}()
	sh.rebuild()
	t := time.NewTicker(sh.s.cfg.VacantFlush)
	defer t.Stop()
	for {
		select {
		case <-sh.s.closing:
			sh.stopTimers()
			return false
		case <-t.C:
			sh.flush()
		case msg := <-sh.mbox.ch:
			sh.handle(msg)
		}
	}
}

func (sh *shard) handle(msg shardMsg) {
	switch m := msg.(type) {
	case *joinReq:
		sh.inflight = m
		sh.join(m)
		sh.inflight = nil
	case *leaveReq:
		sh.leave(m)
	case *memberDown:
		sh.memberDown(m)
	case *occupiedDone:
		sh.occupiedDone(m)
	case *cooldownExpired:
		sh.cooldownExpired(m)
	case *flushReq:
		sh.flush()
	case *vacantDone:
		sh.vacantDone(m)
	case *gatherReq:
		m.held <- sh.gather(m.side)
	case *rebuildReq:
		sh.failWaiters(ErrRestarted)
		sh.rebuild()
		close(m.done)
	case *crashReq:
		panic("muster: injected shard crash")
	case *inspectReq:
		m.f()
	}
}

// state returns a group's claim state.
func (sh *shard) state(g string) groupState {
	sh.tab.mu.RLock()
	defer sh.tab.mu.RUnlock()
	return sh.tab.states[g]
}

// setState writes a group's durable claim state (stateNil forgets it).
func (sh *shard) setState(g string, st claimState, seq Seq) {
	sh.tab.mu.Lock()
	if st == stateNil {
		delete(sh.tab.states, g)
	} else {
		sh.tab.states[g] = groupState{st, seq}
	}
	sh.tab.mu.Unlock()
	sh.s.tr.Emit("muster_group_state", "scope", sh.s.name, "node", sh.s.self, "group", g, "state", st.String())
}

func (sh *shard) memberCount(g string) int {
	sh.tab.mu.RLock()
	defer sh.tab.mu.RUnlock()
	return len(sh.tab.entries[g])
}

func (sh *shard) localMembers(g string) []string {
	sh.tab.mu.RLock()
	defer sh.tab.mu.RUnlock()
	out := make([]string, 0, len(sh.tab.entries[g]))
	for id := range sh.tab.entries[g] {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// abortInflight answers the join the shard was handling when it crashed
// with ErrRestarted, and rolls back the member that join registered, so
// ErrRestarted always means nothing was registered. A join already answered
// keeps its member. The rebuild that follows drives any assertion the
// rolled-back join made (a self row) to retraction.
func (sh *shard) abortInflight() {
	r := sh.inflight
	sh.inflight = nil
	if r == nil || r.answered {
		return
	}
	if r.added != nil && sh.remove(r.group, r.m.ID(), r.added) {
		sh.s.tr.Emit("muster_join_rolled_back", "scope", sh.s.name, "node", sh.s.self, "group", r.group, "member", r.m.ID())
	}
	r.respond(ErrRestarted)
}

// registerJoin registers r's member for r's group, remembering the entry if
// this join added it (see abortInflight).
func (sh *shard) registerJoin(r *joinReq) {
	if e := sh.register(r.group, r.m); e != nil {
		r.added = e
	}
}

// register adds m to g (idempotent by ID) and starts its monitor. It returns
// the new entry, or nil if m was already registered.
func (sh *shard) register(g string, m Member) *entry {
	id := m.ID()
	sh.tab.mu.Lock()
	es := sh.tab.entries[g]
	if es == nil {
		es = make(map[string]*entry)
		sh.tab.entries[g] = es
	}
	if _, ok := es[id]; ok {
		sh.tab.mu.Unlock()
		return nil
	}
	e := &entry{m: m, stop: make(chan struct{})}
	es[id] = e
	sh.tab.mu.Unlock()
	if done := m.Done(); done != nil {
		sh.s.worker(func() {
			select {
			case <-done:
				sh.mbox.postAsync(&memberDown{group: g, id: id, e: e})
			case <-e.stop:
			case <-sh.s.closing:
			}
		})
	}
	return e
}

// remove drops member id from g; it reports whether it was there. If e is
// non-nil, only that exact entry is removed.
func (sh *shard) remove(g, id string, e *entry) bool {
	sh.tab.mu.Lock()
	defer sh.tab.mu.Unlock()
	es := sh.tab.entries[g]
	cur, ok := es[id]
	if !ok || (e != nil && cur != e) {
		return false
	}
	close(cur.stop)
	delete(es, id)
	if len(es) == 0 {
		delete(sh.tab.entries, g)
	}
	return true
}

func (sh *shard) failWaiters(err error) {
	for g, ws := range sh.waiters {
		for _, w := range ws {
			w.respond(err)
		}
		delete(sh.waiters, g)
	}
}

func (sh *shard) stopTimers() {
	for g, t := range sh.cooldown {
		t.Stop()
		delete(sh.cooldown, g)
	}
}

// rebuild reconciles the volatile state with the durable tables, as the
// spec's shard restart does: a group with live members is re-adopted
// occupied (and its self row re-asserted when we route it); a group with no
// members but an outstanding router assertion is kept and driven to
// retraction (cooldown re-armed; occupied, occupied_pending and
// vacant_flushing queued for the flush).
func (sh *shard) rebuild() {
	sh.stopTimers()
	sh.waiters = make(map[string][]*joinReq)
	sh.cooldown = make(map[string]*time.Timer)
	sh.cdToken = make(map[string]uint64)
	sh.tab.mu.RLock()
	groups := make(map[string]groupState, len(sh.tab.states))
	for g, st := range sh.tab.states {
		groups[g] = st
	}
	for g := range sh.tab.entries {
		if _, ok := groups[g]; !ok {
			groups[g] = groupState{st: stateOccupied}
		}
	}
	sh.tab.mu.RUnlock()
	cur := sh.s.view.Load().cur
	for g, st := range groups {
		if sh.memberCount(g) > 0 {
			sh.setState(g, stateOccupied, Seq{})
			if cur.Find(g) == sh.s.self {
				sh.upsertSelf(g)
			}
			continue
		}
		switch st.st {
		case stateCooldown:
			sh.startCooldown(g)
		case stateOccupied, stateOccupiedPending, stateVacantFlushing:
			sh.setState(g, stateVacantQueued, Seq{})
		}
	}
	sh.s.tr.Emit("muster_shard_rebuilt", "scope", sh.s.name, "node", sh.s.self, "shard", sh.idx, "groups", len(groups))
}

// upsertSelf asserts our own present row for g at a fresh seq.
func (sh *shard) upsertSelf(g string) {
	seq := sh.s.nextSeq()
	sh.s.occ.upsert(g, sh.s.self, seq, false, time.Now())
	sh.s.tr.Emit("muster_occupied", "scope", sh.s.name, "node", sh.s.self, "group", g, "source", sh.s.self, "seq", seq)
}

// tombSelf retracts our own row for g at a fresh seq (a tombstone, never a
// hard delete: a lower-seq rebalance self-upsert must lose to it).
func (sh *shard) tombSelf(g string) {
	sh.s.occ.upsert(g, sh.s.self, sh.s.nextSeq(), true, time.Now())
}
