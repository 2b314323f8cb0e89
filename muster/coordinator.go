package muster

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/relaygw/relay/muster/ring"
)

// coordinator is the scope's cluster brain: the sole writer of the ring, the
// committed view, status and view hash. It runs one goroutine. A handler that
// decides the coordinator must start over returns a *resetError up to the
// loop, which restarts it under a new incarnation; a panic (a crash) is
// recovered and restarts it the same way. The restart rebuilds the shards
// too (one reset story).
type coordinator struct {
	s    *Scope
	mbox mailbox[coordMsg] // durable: survives restarts

	// Volatile: reset on every (re)start.
	members  []NodeID // committed view, sorted, includes self
	hash     uint64   // ViewHash(members)
	peers    map[string]uint64
	views    map[string]viewEntry // member_views: newest-seq-wins
	owed     map[string]Seq       // owed_snapshots: router → round seq
	viewSeq  Seq                  // our announce watermark
	move     ringMove             // our last ring transition (rides rounds and markers)
	pending  *viewRound           // open prepare round (two-phase adoption)
	promoted bool                 // left the initial singleton state
	leaving  bool
	drain    *drainState
	drainMu  sync.Mutex            // guards drain pointer for Drain's timeout path
	started  bool                  // first init done
	rings    map[string]*ring.Ring // ringOf's cache; survives restarts (rings are pure)
}

// viewEntry is a peer's latest announcement.
type viewEntry struct {
	Inc        uint64 `json:"inc"`
	Hash       uint64 `json:"hash"`
	Seq        Seq    `json:"seq"`
	Transition bool   `json:"in_transition"`
}

// viewRound is an open prepare round toward target.
type viewRound struct {
	target   []NodeID
	awaiting map[string]bool
	seq      Seq
}

// Coordinator-only mailbox messages.
type (
	roundDone struct {
		router NodeID
		seq    Seq
		err    error
	}
	prepareDone struct {
		node NodeID
		seq  Seq
		err  error
	}
	drainReq struct{ reply chan error }
	dumpReq  struct{ reply chan coordDump }
	promote  struct{ inc uint64 }
	settled  struct{}
	resetReq struct{ reason string }
	tickReq  struct{ which coordTimer }
	// suspectReq runs the failure detector with node judged silent whatever
	// was heard from it since (a forced false suspicion, for tests).
	suspectReq struct{ node string }
	coordFunc  struct{ f func(*coordinator) error } // runs f on the coordinator goroutine
)

// coordTimer names one of the coordinator's periodic jobs (tickReq).
type coordTimer uint8

const (
	timerHeartbeat coordTimer = iota + 1 // heartbeat
	timerGC                              // gcTick
	timerFD                              // failureDetector
	timerAE                              // antiEntropy
)

// resetError is returned up the coordinator's call chain by a handler that
// decided the coordinator must restart under a new incarnation (expelled,
// a prepare or round refused or failed toward a member, a shard that did not
// answer a gather). The loop restarts on it; nothing after the decision runs.
type resetError struct {
	reason string
	err    error // cause, if any
}

func (e *resetError) Error() string {
	if e.err != nil {
		return "muster: coordinator reset: " + e.reason + ": " + e.err.Error()
	}
	return "muster: coordinator reset: " + e.reason
}

func (e *resetError) Unwrap() error { return e.err }

var errGatherTimeout = errors.New("muster: shard gather timed out")

func newCoordinator(s *Scope) *coordinator {
	return &coordinator{s: s, mbox: newMailbox[coordMsg](4096, s.closing)}
}

func (c *coordinator) run() {
	defer c.s.wg.Done()
	for c.loop() {
	}
	if c.drain != nil {
		c.drain.finish(ErrClosed)
	}
}

// loop runs the coordinator until the scope closes (false) or it must
// restart (true): a handler returned a *resetError, or it panicked.
func (c *coordinator) loop() (restart bool) {
	s := c.s
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("muster: coordinator crashed; restarting", zap.Any("panic", r))
			s.tr.Emit("muster_coordinator_crash", "scope", s.name, "node", s.self, "reason", fmt.Sprint(r))
			restart = true
		}
	}()
	if err := c.init(); err != nil {
		return c.restart(err)
	}
	ping := time.NewTicker(s.cfg.PingInterval)
	defer ping.Stop()
	hb := time.NewTicker(s.cfg.ViewHeartbeat)
	defer hb.Stop()
	gc := time.NewTicker(s.cfg.TombstoneWindow)
	defer gc.Stop()
	var ae <-chan time.Time
	if s.cfg.AntiEntropy > 0 {
		t := time.NewTicker(s.cfg.AntiEntropy)
		defer t.Stop()
		ae = t.C
	}
	inc := s.inc.Load()
	promo := time.AfterFunc(s.cfg.SingletonPromotion, func() { c.mbox.postAsync(&promote{inc}) })
	defer promo.Stop()
	for {
		var err error
		select {
		case <-s.closing:
			return false
		case <-ping.C:
			err = c.failureDetector()
		case <-hb.C:
			c.heartbeat()
		case <-gc.C:
			c.gcTick()
		case <-ae:
			err = c.antiEntropy()
		case msg := <-c.mbox.ch:
			err = c.handle(msg)
		}
		if err != nil {
			return c.restart(err)
		}
	}
}

// restart logs and traces a reset decided by a handler (err is a
// *resetError, or any error from init).
func (c *coordinator) restart(err error) bool {
	s := c.s
	reason := err.Error()
	var re *resetError
	if errors.As(err, &re) {
		reason = re.reason
	}
	s.log.Info("muster: coordinator reset", zap.String("reason", reason), zap.Error(err))
	s.tr.Emit("muster_coordinator_crash", "scope", s.name, "node", s.self, "reason", reason)
	return true
}

// handle runs one mailbox message. A non-nil error restarts the
// coordinator.
func (c *coordinator) handle(msg coordMsg) error {
	s := c.s
	switch m := msg.(type) {
	case *nodeSeen:
		return c.onNodeSeen(m.id)
	case *inbound:
		return c.onInbound(m.from, m.m)
	case *inboundCall:
		var reply, err error
		switch m.m.Kind {
		case kindRound:
			reply, err = c.applyRound(m.from, m.m)
		case kindPrepare:
			reply = c.applyPrepare(m.from, m.m)
		}
		m.reply <- reply
		return err
	case *roundDone:
		return c.onRoundDone(m)
	case *prepareDone:
		return c.onPrepareDone(m)
	case *promote:
		if m.inc == s.inc.Load() && !c.promoted {
			c.promoted = true
			s.tr.Emit("muster_singleton_promoted", "scope", s.name, "node", s.self)
			c.recomputeStatus()
		}
	case *drainReq:
		c.startDrain(m.reply)
	case *settled:
		if c.drain != nil {
			c.drain.finish(nil)
		}
	case *dumpReq:
		m.reply <- c.dump()
	case *resetReq:
		return c.reset(m.reason)
	case *coordFunc:
		return m.f(c)
	case *tickReq:
		switch m.which {
		case timerHeartbeat:
			c.heartbeat()
		case timerGC:
			c.gcTick()
		case timerFD:
			return c.failureDetector()
		case timerAE:
			return c.antiEntropy()
		}
	case *suspectReq:
		c.s.live.silence(m.node)
		return c.failureDetector(m.node)
	}
	return nil
}

// init is the coordinator's (re)start: a fresh incarnation (a restart never
// reuses the old identity), the ring reset to [self], status converging
// until discovery converges or singleton promotion fires, shards rebuilt,
// discovery broadcast. It fails only when a shard does not answer the
// rebuild within GatherTimeout (the loop then restarts again).
func (c *coordinator) init() error {
	s := c.s
	inc := s.cfg.Incarnation
	if c.started {
		inc = max(s.inc.Load()+1, uint64(time.Now().UnixNano()))
	}
	s.inc.Store(inc)
	if c.drain != nil {
		c.drain.finish(ErrRestarted)
		c.drainMu.Lock()
		c.drain = nil
		c.drainMu.Unlock()
	}
	s.draining.Store(false)
	c.leaving = false
	c.peers = make(map[string]uint64)
	c.views = make(map[string]viewEntry)
	c.owed = make(map[string]Seq)
	c.pending = nil
	c.promoted = false
	self := []NodeID{{s.self, inc}}
	c.members = self
	c.hash = ViewHash(self)
	r := ring.New([]string{s.self}, s.cfg.VirtualNodes)
	s.view.Store(&routeView{cur: r, prev: r, members: self, fanout: []string{s.self}})
	s.viewHash.Store(c.hash)
	c.setStatus(Converging)
	c.viewSeq = s.nextSeq()
	c.move = ringMove{Seq: c.viewSeq, Prev: []string{s.self}, Cur: []string{s.self}}
	if c.started {
		if err := c.rebuildShards(); err != nil {
			return err
		}
	}
	c.started = true
	s.tr.Emit("muster_coordinator_init", "scope", s.name, "node", s.self, "inc", inc)
	s.log.Debug("muster: coordinator started", zap.Uint64("incarnation", inc))
	s.broadcast(&wireMsg{Kind: kindPing, Inc: inc})
	s.broadcast(c.discoverMsg(kindDiscover, ""))
	return nil
}

// rebuildShards has every shard reconcile from its durable tables (failing
// the joins parked on it with ErrRestarted), bounded by GatherTimeout.
func (c *coordinator) rebuildShards() error {
	s := c.s
	timeout := time.NewTimer(s.cfg.GatherTimeout)
	defer timeout.Stop()
	for _, sh := range s.shards {
		req := &rebuildReq{done: make(chan struct{})}
		select {
		case sh.mbox.ch <- req:
		case <-timeout.C:
			return &resetError{reason: "shard rebuild", err: errGatherTimeout}
		case <-s.closing:
			return nil
		}
		select {
		case <-req.done:
		case <-timeout.C:
			return &resetError{reason: "shard rebuild", err: errGatherTimeout}
		case <-s.closing:
			return nil
		}
	}
	return nil
}

// reset returns the *resetError that makes the loop restart the coordinator
// under a new incarnation. Callers return it at once.
func (c *coordinator) reset(reason string) error { return &resetError{reason: reason} }

func (c *coordinator) setStatus(st Status) {
	s := c.s
	old := Status(s.status.Swap(int32(st)))
	if old == st {
		return
	}
	s.met.StatusChanged(old, st)
	if s.tr.Enabled() { // names allocates
		s.tr.Emit("muster_status_change", "scope", s.name, "node", s.self, "from", old.String(), "to", st.String(),
			"members", names(c.members), "view_hash", s.viewHash.Load())
	}
	s.log.Debug("muster: status "+old.String()+" → "+st.String(), zap.Strings("members", names(c.members)), viewHashField(s.viewHash.Load()))
	if old == Converging && st == Ready {
		c.dropStale()
	}
}

// failureDetector departs every incarnation silent for PeerDownAfter, and the
// peers named in forced whatever was heard from them.
func (c *coordinator) failureDetector(forced ...string) error {
	s := c.s
	// Every incarnation heard from, registered or not, is judged: an
	// unregistered one may still have written rows (a claim or round that
	// outran its discovery), and its departure is what removes them.
	cutoff := time.Now().Add(-s.cfg.PeerDownAfter)
	for _, id := range s.live.silent(cutoff) {
		if id.Name != s.self && s.occ.admit(id.Name, id.Inc) != admitDeparted {
			if err := c.depart(id, "silent"); err != nil {
				return err
			}
		}
	}
	for name, inc := range c.peers {
		if slices.Contains(forced, name) || s.live.last(name, inc).Before(cutoff) {
			if err := c.depart(NodeID{name, inc}, "silent"); err != nil {
				return err
			}
		}
	}
	s.broadcast(&wireMsg{Kind: kindPing, Inc: s.inc.Load()})
	return nil
}

func (c *coordinator) gcTick() {
	s := c.s
	if n := s.occ.reap(time.Now().Add(-s.cfg.TombstoneWindow)); n > 0 {
		s.log.Debug("muster: reaped tombstones", zap.Int("rows", n))
	}
	c.dropStale()
}
