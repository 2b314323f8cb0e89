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
// committed view, status and view hash. It runs one goroutine; a panic (or an
// explicit reset) restarts it under a new incarnation, and the restart
// rebuilds the shards too (one reset story).
type coordinator struct {
	s    *Scope
	mbox chan any // durable

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
	drainMu  sync.Mutex // guards drain pointer for Drain's timeout path
	started  bool       // first init done
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
	tickReq  struct{ which string }
	// suspectReq runs the failure detector with node judged silent whatever
	// was heard from it since (a forced false suspicion, for tests).
	suspectReq struct{ node string }
	coordFunc  struct{ f func(*coordinator) } // runs f on the coordinator goroutine
)

// resetSignal makes the coordinator restart without logging a crash.
type resetSignal struct{ reason string }

var errGatherTimeout = errors.New("muster: shard gather timed out")

func newCoordinator(s *Scope) *coordinator {
	return &coordinator{s: s, mbox: make(chan any, 4096)}
}

func (c *coordinator) run() {
	defer c.s.wg.Done()
	for c.loop() {
	}
	if c.drain != nil {
		c.drain.finish(ErrClosed)
	}
}

func (c *coordinator) loop() (restart bool) {
	s := c.s
	defer func() {
		if r := recover(); r != nil {
			reason := fmt.Sprint(r)
			if rs, ok := r.(resetSignal); ok {
				reason = rs.reason
				s.log.Info("muster: coordinator reset", zap.String("reason", reason))
			} else {
				s.log.Error("muster: coordinator crashed; restarting", zap.Any("panic", r))
			}
			s.tr.Emit("muster_coordinator_crash", "scope", s.name, "node", s.self, "reason", reason)
			restart = true
		}
	}()
	c.init()
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
	promo := time.AfterFunc(s.cfg.SingletonPromotion, func() { s.postAsync(c.mbox, &promote{inc}) })
	defer promo.Stop()
	for {
		select {
		case <-s.closing:
			return false
		case <-ping.C:
			c.failureDetector()
		case <-hb.C:
			c.heartbeat()
		case <-gc.C:
			c.gcTick()
		case <-ae:
			c.antiEntropy()
		case msg := <-c.mbox:
			c.handle(msg)
		}
	}
}

func (c *coordinator) handle(msg any) {
	s := c.s
	switch m := msg.(type) {
	case *nodeSeen:
		c.onNodeSeen(m.id)
	case *inbound:
		c.onInbound(m.from, m.m)
	case *inboundCall:
		var err error
		switch m.m.Kind {
		case kindRound:
			err = c.applyRound(m.from, m.m)
		case kindPrepare:
			err = c.applyPrepare(m.from, m.m)
		}
		m.reply <- err
	case *roundDone:
		c.onRoundDone(m)
	case *prepareDone:
		c.onPrepareDone(m)
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
		panic(resetSignal{m.reason})
	case *coordFunc:
		m.f(c)
	case *tickReq:
		switch m.which {
		case "heartbeat":
			c.heartbeat()
		case "gc":
			c.gcTick()
		case "fd":
			c.failureDetector()
		case "ae":
			c.antiEntropy()
		}
	case *suspectReq:
		c.s.live.silence(m.node)
		c.failureDetector(m.node)
	}
}

// init is the coordinator's (re)start: a fresh incarnation (a restart never
// reuses the old identity), the ring reset to [self], status converging
// until discovery converges or singleton promotion fires, shards rebuilt,
// discovery broadcast.
func (c *coordinator) init() {
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
		c.rebuildShards()
	}
	c.started = true
	s.tr.Emit("muster_coordinator_init", "scope", s.name, "node", s.self, "inc", inc)
	s.log.Info("muster: coordinator started", zap.Uint64("incarnation", inc))
	s.broadcast(&wireMsg{Kind: kindPing, Inc: inc})
	s.broadcast(c.discoverMsg(kindDiscover, ""))
}

func (c *coordinator) rebuildShards() {
	s := c.s
	timeout := time.NewTimer(s.cfg.GatherTimeout)
	defer timeout.Stop()
	for _, sh := range s.shards {
		req := &rebuildReq{done: make(chan struct{})}
		select {
		case sh.mbox <- req:
		case <-timeout.C:
			panic(errGatherTimeout)
		case <-s.closing:
			return
		}
		select {
		case <-req.done:
		case <-timeout.C:
			panic(errGatherTimeout)
		case <-s.closing:
			return
		}
	}
}

// reset restarts the coordinator under a new incarnation.
func (c *coordinator) reset(reason string) { panic(resetSignal{reason}) }

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
	s.log.Info("muster: status "+old.String()+" → "+st.String(), zap.Strings("members", names(c.members)), zap.Uint64("view_hash", s.viewHash.Load()))
	if old == Converging && st == Ready {
		c.dropStale()
	}
}

// failureDetector departs every incarnation silent for PeerDownAfter, and the
// peers named in forced whatever was heard from them.
func (c *coordinator) failureDetector(forced ...string) {
	s := c.s
	// Every incarnation heard from, registered or not, is judged: an
	// unregistered one may still have written rows (a claim or round that
	// outran its discovery), and its departure is what removes them.
	cutoff := time.Now().Add(-s.cfg.PeerDownAfter)
	for _, id := range s.live.silent(cutoff) {
		if id.Name != s.self && s.occ.admit(id.Name, id.Inc) != admitDeparted {
			c.depart(id, "silent")
		}
	}
	for name, inc := range c.peers {
		if slices.Contains(forced, name) || s.live.last(name, inc).Before(cutoff) {
			c.depart(NodeID{name, inc}, "silent")
		}
	}
	s.broadcast(&wireMsg{Kind: kindPing, Inc: s.inc.Load()})
}

func (c *coordinator) gcTick() {
	s := c.s
	if n := s.occ.reap(time.Now().Add(-s.cfg.TombstoneWindow)); n > 0 {
		s.log.Debug("muster: reaped tombstones", zap.Int("rows", n))
	}
	c.dropStale()
}
