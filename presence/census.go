package presence

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/relaygw/relay/internal/trace"
	"github.com/relaygw/relay/muster"
)

// Errors returned by presence.
var (
	// ErrBadMessage means a Census message from a peer could not be parsed.
	ErrBadMessage = errors.New("presence: bad census message")
	// ErrNoTransport is returned by Start when CensusConfig.Transport is nil.
	ErrNoTransport = errors.New("presence: census has no transport")
	// ErrStarted is returned by a second Start, or Start after Stop.
	ErrStarted = errors.New("presence: census already started")
	// ErrNoCalls is the reply to a Call made to a Census transport.
	ErrNoCalls = errors.New("presence: census does not answer calls")
)

// CensusConfig configures a Census.
type CensusConfig struct {
	// Transport carries the Census's messages; use one of its own (its own
	// scope), not Muster's. The Census registers itself on it, starts it
	// in Start and closes it in Stop. Required.
	Transport muster.Transport
	// Incarnation identifies this run of the node. A peer that sees a
	// higher incarnation under the same node name drops the old one's
	// counts. Zero means the current Unix time in nanoseconds, which grows
	// across restarts. A Census told that its incarnation was declared dead
	// takes a higher one (Census.Incarnation).
	Incarnation uint64
	// BroadcastInterval is how often local counts are broadcast. Zero
	// means 5 s.
	BroadcastInterval time.Duration
	// DiscoverInterval is how often a hello is broadcast again, so that a
	// peer whose registration was missed is learnt. Zero means 60 s.
	DiscoverInterval time.Duration
	// PeerTimeout is how long a registered peer may stay silent before it
	// is treated as departed and its counts dropped. Zero means three
	// broadcast intervals.
	PeerTimeout time.Duration
	// LocalCounts, when set, reports members of this node that the Census
	// does not track itself: group → count (zero counts are ignored). It is
	// read before every broadcast and by Local, LocalCounts, Count and
	// Counts, never with the Census's lock held, so it may take locks of its
	// own; its counts are added to those of Inc, Dec and Track. The gateway
	// reads its hub's session topics here.
	LocalCounts func() map[string]int
	// OnPeer, when set, is told every registration (up true) and every
	// departure (up false: bye, timeout, or superseded by a restart) of a
	// peer incarnation, in the order the Census decided them, after its
	// lock is released. It runs on the goroutine that received the message
	// (or the timer's) and must not block; the presence Replica drops a
	// departed incarnation's presences here.
	OnPeer func(peer string, inc uint64, up bool)
	// Logger; nil means zap.NewNop().
	Logger *zap.Logger
	// Tracer receives the trace points listed on Census. Nil is free.
	Tracer *trace.Tracer
}

// DefaultCensusConfig returns the defaults (docs/OWNERSHIP.md "Defaults"):
// counts broadcast every 5 s, re-discovery every 60 s (docs/MUSTER.md
// "History", correction 7), a silent peer dropped after 15 s.
func DefaultCensusConfig() CensusConfig {
	return CensusConfig{BroadcastInterval: 5 * time.Second, DiscoverInterval: 60 * time.Second, PeerTimeout: 15 * time.Second}
}

// Census counts group members across the cluster.
//
// Each node counts its own members (Inc, Dec, Track, and
// CensusConfig.LocalCounts) and broadcasts its non-zero counts every
// BroadcastInterval. Count returns the local count
// plus the latest count received from every live, registered peer. A join
// on one node shows on the others after at most one interval once they
// have registered it.
//
// Peers are registered only through the Census's own discovery: a hello
// (broadcast at Start and every DiscoverInterval) or its ack. Counts from a
// node that is not registered, or from another incarnation of it, are
// ignored, so counts that arrive after a peer's departure cannot come back
// as ghosts (docs/MUSTER.md "History", correction 7); the ignoring node
// sends that sender a hello, and the sender's ack registers it if it is
// alive. A peer departs when it says
// bye (Stop), when it stays silent for PeerTimeout, or when a higher
// incarnation of it registers. A departed incarnation is dead for good:
// its hellos, acks and counts, however late they arrive, are ignored and
// never register it again (a topic would count its viewers twice). If it
// is in fact alive (it was only silent), it is answered "expelled" and
// takes a new incarnation, which registers as a restart.
//
// Trace points: census.counts.sent (node, seq); census.peer.registered
// (node, peer, inc); census.peer.departed (node, peer, inc, reason:
// "bye", "timeout", "restarted"); census.counts.accepted (node, from,
// seq); census.counts.ignored (node, from, reason: "unregistered",
// "incarnation", "stale", "dead"); census.hello.ignored (node, from, inc):
// a hello or ack of a dead incarnation; census.expelled (node, inc, new):
// this node took incarnation new after inc was declared dead; census.untracked (node, group), after a
// tracked member's removal.
//
// All methods are safe for concurrent use.
type Census struct {
	cfg  CensusConfig
	tr   muster.Transport
	self string
	log  *zap.Logger
	tc   *trace.Tracer

	mu      sync.Mutex
	inc     uint64 // this node's incarnation
	local   map[string]int
	peers   map[string]*peer
	gone    map[string]uint64 // highest incarnation declared dead (bye, timeout, restarted), per node
	seq     uint64
	started bool
	stopped bool

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// peer is a registered peer and its latest counts.
type peer struct {
	inc    uint64
	seq    uint64
	counts map[string]int
	seen   time.Time
}

// NewCensus returns a Census that is not started.
func NewCensus(cfg CensusConfig) *Census {
	def := DefaultCensusConfig()
	if cfg.BroadcastInterval <= 0 {
		cfg.BroadcastInterval = def.BroadcastInterval
	}
	if cfg.DiscoverInterval <= 0 {
		cfg.DiscoverInterval = def.DiscoverInterval
	}
	if cfg.PeerTimeout <= 0 {
		cfg.PeerTimeout = 3 * cfg.BroadcastInterval
	}
	if cfg.Incarnation == 0 {
		cfg.Incarnation = uint64(time.Now().UnixNano())
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	c := &Census{
		cfg:   cfg,
		inc:   cfg.Incarnation,
		tr:    cfg.Transport,
		log:   cfg.Logger,
		tc:    cfg.Tracer,
		local: make(map[string]int),
		peers: make(map[string]*peer),
		gone:  make(map[string]uint64),
	}
	if c.tr != nil {
		c.self = c.tr.Self()
	}
	return c
}

// Start registers on the transport, starts it, broadcasts a hello and the
// current counts, and starts the broadcast and re-discover timers. ctx
// bounds the start only; Stop ends the Census.
func (c *Census) Start(ctx context.Context) error {
	if c.tr == nil {
		return ErrNoTransport
	}
	c.mu.Lock()
	if c.started || c.stopped {
		c.mu.Unlock()
		return ErrStarted
	}
	c.started = true
	c.mu.Unlock()
	c.tr.Register(handler{c})
	if err := c.tr.Start(ctx); err != nil {
		return fmt.Errorf("presence: start census: %w", err)
	}
	lctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	c.hello(ctx, "")
	c.broadcastCounts(ctx)
	c.wg.Add(1)
	go c.loop(lctx)
	return nil
}

// Stop broadcasts a bye, stops the timers and closes the transport. Peers
// drop this node's counts when they get the bye, or after PeerTimeout.
func (c *Census) Stop() {
	c.mu.Lock()
	if c.stopped || !c.started {
		c.stopped = true
		c.mu.Unlock()
		return
	}
	c.stopped = true
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := c.tr.Broadcast(ctx, encodeCensus(censusMsg{Kind: kindBye, Inc: c.Incarnation()})); err != nil {
		c.log.Debug("census: bye not sent", zap.Error(err))
	}
	_ = c.tr.Close()
}

func (c *Census) loop(ctx context.Context) {
	defer c.wg.Done()
	bt := time.NewTicker(c.cfg.BroadcastInterval)
	defer bt.Stop()
	dt := time.NewTicker(c.cfg.DiscoverInterval)
	defer dt.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-bt.C:
			c.expire(now)
			c.broadcastCounts(ctx)
		case <-dt.C:
			c.hello(ctx, "")
		}
	}
}

// hello broadcasts a hello, or sends it to node to when to is not empty.
func (c *Census) hello(ctx context.Context, to string) {
	msg := encodeCensus(censusMsg{Kind: kindHello, Inc: c.Incarnation()})
	var err error
	if to == "" {
		err = c.tr.Broadcast(ctx, msg)
	} else {
		err = c.tr.Send(ctx, to, msg)
	}
	if err != nil {
		c.log.Debug("census: hello not sent", zap.String("to", to), zap.Error(err))
	}
}

// broadcastCounts sends the local non-zero counts to every peer.
func (c *Census) broadcastCounts(ctx context.Context) {
	ext := c.external()
	c.mu.Lock()
	c.seq++
	m := censusMsg{Kind: kindCounts, Inc: c.inc, Seq: c.seq, Counts: c.localLocked(ext)}
	c.mu.Unlock()
	if err := c.tr.Broadcast(ctx, encodeCensus(m)); err != nil {
		c.log.Debug("census: counts not sent", zap.Error(err))
		return
	}
	c.tc.Emit("census.counts.sent", "node", c.self, "seq", m.Seq)
}

// expire drops peers silent since before now - PeerTimeout.
func (c *Census) expire(now time.Time) {
	c.mu.Lock()
	var gone []string
	var incs []uint64
	for name, p := range c.peers {
		if now.Sub(p.seen) > c.cfg.PeerTimeout {
			delete(c.peers, name)
			c.gone[name] = max(c.gone[name], p.inc)
			gone = append(gone, name)
			incs = append(incs, p.inc)
		}
	}
	c.mu.Unlock()
	for i, name := range gone {
		c.log.Info("census: peer timed out", zap.String("peer", name))
		c.tc.Emit("census.peer.departed", "node", c.self, "peer", name, "inc", incs[i], "reason", "timeout")
		c.notify(peerEvent{name, incs[i], false})
	}
}

// handler adapts Census to muster.Handler without exporting the methods.
type handler struct{ c *Census }

func (h handler) HandleMessage(from string, msg []byte) { h.c.handle(from, msg, time.Now()) }

func (h handler) HandleCall(context.Context, string, []byte) ([]byte, error) {
	return nil, ErrNoCalls
}

// handle applies one message from node from, received at now.
func (c *Census) handle(from string, b []byte, now time.Time) {
	if from == c.self {
		return
	}
	m, err := decodeCensus(b)
	if err != nil {
		c.log.Warn("census: dropping message", zap.String("from", from), zap.Error(err))
		return
	}
	var evs trace.Pending // emitted once c.mu is released
	var pevs []peerEvent  // OnPeer calls, made once c.mu is released
	var reply string      // kind to send back to from, if any
	var replyInc uint64   // the incarnation an expelled reply names
	c.mu.Lock()
	p := c.peers[from]
	switch m.Kind {
	case kindHello, kindAck:
		if m.Inc <= c.gone[from] {
			evs.Add(c.tc, "census.hello.ignored", "node", c.self, "from", from, "inc", m.Inc)
			reply, replyInc = kindExpelled, m.Inc
			break
		}
		switch {
		case p == nil:
			c.peers[from] = &peer{inc: m.Inc, seen: now}
			evs.Add(c.tc, "census.peer.registered", "node", c.self, "peer", from, "inc", m.Inc)
			pevs = append(pevs, peerEvent{from, m.Inc, true})
		case m.Inc > p.inc:
			c.gone[from] = max(c.gone[from], p.inc)
			c.peers[from] = &peer{inc: m.Inc, seen: now}
			evs.Add(c.tc, "census.peer.departed", "node", c.self, "peer", from, "inc", p.inc, "reason", "restarted")
			evs.Add(c.tc, "census.peer.registered", "node", c.self, "peer", from, "inc", m.Inc)
			pevs = append(pevs, peerEvent{from, p.inc, false}, peerEvent{from, m.Inc, true})
		case m.Inc == p.inc:
			p.seen = now
		}
		if m.Kind == kindHello {
			reply = kindAck
		}
	case kindBye:
		c.gone[from] = max(c.gone[from], m.Inc)
		if p != nil && p.inc <= m.Inc {
			delete(c.peers, from)
			evs.Add(c.tc, "census.peer.departed", "node", c.self, "peer", from, "inc", p.inc, "reason", "bye")
			pevs = append(pevs, peerEvent{from, p.inc, false})
		}
	case kindExpelled:
		if m.Inc != c.inc {
			break // about an incarnation this node no longer runs
		}
		old := c.inc
		c.inc = max(c.inc+1, uint64(time.Now().UnixNano()))
		c.seq = 0
		reply = kindHello
		evs.Add(c.tc, "census.expelled", "node", c.self, "inc", old, "new", c.inc)
	case kindCounts:
		switch {
		case p == nil && m.Inc <= c.gone[from]:
			reply, replyInc = kindExpelled, m.Inc
			evs.Add(c.tc, "census.counts.ignored", "node", c.self, "from", from, "reason", "dead")
		case p == nil || m.Inc > p.inc:
			if m.Inc > c.gone[from] {
				reply = kindHello
			}
			evs.Add(c.tc, "census.counts.ignored", "node", c.self, "from", from, "reason", "unregistered")
		case m.Inc < p.inc:
			evs.Add(c.tc, "census.counts.ignored", "node", c.self, "from", from, "reason", "incarnation")
		case m.Seq <= p.seq:
			p.seen = now
			evs.Add(c.tc, "census.counts.ignored", "node", c.self, "from", from, "reason", "stale")
		default:
			p.seq, p.counts, p.seen = m.Seq, m.Counts, now
			evs.Add(c.tc, "census.counts.accepted", "node", c.self, "from", from, "seq", m.Seq)
		}
	}
	c.mu.Unlock()
	evs.Emit(c.tc)
	for _, e := range pevs {
		c.notify(e)
	}
	switch reply {
	case kindAck:
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := c.tr.Send(ctx, from, encodeCensus(censusMsg{Kind: kindAck, Inc: c.Incarnation()})); err != nil {
			c.log.Debug("census: ack not sent", zap.String("to", from), zap.Error(err))
		}
	case kindHello:
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if m.Kind == kindExpelled {
			// A new incarnation: announce it to everyone, with its counts.
			c.hello(ctx, "")
			c.broadcastCounts(ctx)
			break
		}
		c.hello(ctx, from)
	case kindExpelled:
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := c.tr.Send(ctx, from, encodeCensus(censusMsg{Kind: kindExpelled, Inc: replyInc})); err != nil {
			c.log.Debug("census: expelled not sent", zap.String("to", from), zap.Error(err))
		}
	}
}

// peerEvent is one OnPeer call.
type peerEvent struct {
	peer string
	inc  uint64
	up   bool
}

func (c *Census) notify(e peerEvent) {
	if c.cfg.OnPeer != nil {
		c.cfg.OnPeer(e.peer, e.inc, e.up)
	}
}

// Inc adds one member to group on this node.
func (c *Census) Inc(group string) {
	c.mu.Lock()
	c.local[group]++
	c.mu.Unlock()
}

// Dec removes one member from group on this node. It does nothing when the
// local count is already zero.
func (c *Census) Dec(group string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch n := c.local[group]; {
	case n > 1:
		c.local[group] = n - 1
	case n == 1:
		delete(c.local, group)
	}
}

// Track counts one member of group until ctx ends or the returned untrack
// is called, whichever comes first. untrack may be called any number of
// times; the member is removed once.
func (c *Census) Track(ctx context.Context, group string) (untrack func()) {
	c.Inc(group)
	var once sync.Once
	dec := func() {
		once.Do(func() {
			c.Dec(group)
			c.tc.Emit("census.untracked", "node", c.self, "group", group)
		})
	}
	stop := context.AfterFunc(ctx, dec)
	return func() {
		stop()
		dec()
	}
}

// external reads CensusConfig.LocalCounts (nil when unset). Call it without
// c.mu held.
func (c *Census) external() map[string]int {
	if c.cfg.LocalCounts == nil {
		return nil
	}
	return c.cfg.LocalCounts()
}

// localLocked returns a new map of this node's non-zero counts: the tracked
// ones plus ext. c.mu must be held.
func (c *Census) localLocked(ext map[string]int) map[string]int {
	out := make(map[string]int, len(c.local)+len(ext))
	maps.Copy(out, c.local)
	for g, n := range ext {
		if n > 0 {
			out[g] += n
		}
	}
	return out
}

// Local returns the number of members of group on this node.
func (c *Census) Local(group string) int {
	return c.LocalCounts()[group]
}

// LocalCounts returns this node's count of every group with members here.
func (c *Census) LocalCounts() map[string]int {
	ext := c.external()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.localLocked(ext)
}

// Count returns the cluster-wide number of members of group: the local
// count plus the latest count from every registered peer.
func (c *Census) Count(group string) int {
	return c.Counts()[group]
}

// Counts returns the cluster-wide count of every group with members: this
// node's counts, read now, plus the latest counts broadcast by every
// registered peer (at most one BroadcastInterval old).
func (c *Census) Counts() map[string]int {
	ext := c.external()
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.localLocked(ext)
	for _, p := range c.peers {
		for g, n := range p.counts {
			if n > 0 {
				out[g] += n
			}
		}
	}
	return out
}

// CountsByNode returns group's count per node: this node's, read now, and
// every registered peer's latest broadcast (0 when it has none there).
func (c *Census) CountsByNode(group string) map[string]int {
	ext := c.external()
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{c.self: c.localLocked(ext)[group]}
	for name, p := range c.peers {
		out[name] = max(p.counts[group], 0)
	}
	return out
}

// Incarnation returns this node's current incarnation: CensusConfig's, or
// a higher one taken after a peer declared it dead.
func (c *Census) Incarnation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inc
}

// Peers returns the registered peers and their incarnations.
func (c *Census) Peers() map[string]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]uint64, len(c.peers))
	for name, p := range c.peers {
		out[name] = p.inc
	}
	return out
}
