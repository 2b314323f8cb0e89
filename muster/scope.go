package muster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"go.uber.org/zap"

	"github.com/relaygw/relay/internal/trace"
	"github.com/relaygw/relay/muster/ring"
)

// Member is a local subscriber of a group: the Go counterpart of a monitored
// pid. ID identifies it within a group (joining the same ID twice registers
// it once). Done is closed when the member is gone; the member is then
// removed as if it left. Done may return nil for a member that only ever
// leaves explicitly.
type Member interface {
	ID() string
	Done() <-chan struct{}
}

// Scope is one Muster scope on one node: a coordinator and its claim shards
// over a shared occupancy table. Create it with New, then Start it.
// All methods are safe for concurrent use.
type Scope struct {
	cfg  Config
	name string
	self string
	log  *zap.Logger
	tr   *trace.Tracer
	met  Metrics
	tp   Transport

	// Published by the coordinator, read lock-free.
	inc      atomic.Uint64 // current incarnation
	seqN     atomic.Uint64 // seq counter (never reset)
	status   atomic.Int32
	viewHash atomic.Uint64
	view     atomic.Pointer[routeView]
	draining atomic.Bool

	// Durable state: survives coordinator and shard restarts.
	occ     *occTable
	live    *liveness
	shards  []*shard
	coord   *coordinator
	applied map[string]Seq // per-source newest applied round; coordinator goroutine only

	hooks *testHooks // nil outside tests

	started   atomic.Bool
	closing   chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
}

// routeView is the ring generation pair and committed members the
// coordinator publishes.
type routeView struct {
	cur, prev *ring.Ring
	members   []NodeID
	fanout    []string // Router's member list while rebalancing
}

// New validates cfg and returns a Scope that is not yet started.
func New(cfg Config) (*Scope, error) {
	cfg.fill()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Scope{
		cfg:     cfg,
		name:    cfg.Name,
		self:    cfg.Node,
		log:     cfg.Logger.With(zap.String("scope", cfg.Name), zap.String("node", cfg.Node)),
		tr:      cfg.Tracer,
		met:     cfg.Metrics,
		tp:      cfg.Transport,
		occ:     newOccTable(),
		live:    newLiveness(),
		applied: make(map[string]Seq),
		closing: make(chan struct{}),
	}
	if s.met == nil {
		s.met = nopMetrics{}
	}
	s.inc.Store(cfg.Incarnation)
	self := []NodeID{{cfg.Node, cfg.Incarnation}}
	r := ring.New([]string{cfg.Node}, cfg.VirtualNodes)
	s.view.Store(&routeView{cur: r, prev: r, members: self, fanout: []string{cfg.Node}})
	s.viewHash.Store(ViewHash(self))
	for i := 0; i < cfg.Shards; i++ {
		s.shards = append(s.shards, newShard(s, i))
	}
	s.coord = newCoordinator(s)
	return s, nil
}

// Start registers the scope with its transport, starts the transport, the
// shards and the coordinator. The Scope owns the transport from here on:
// Close closes it.
func (s *Scope) Start(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return fmt.Errorf("muster: start scope %q: already started", s.name)
	}
	s.tp.Register(s)
	if err := s.tp.Start(ctx); err != nil {
		return fmt.Errorf("muster: start scope %q: %w", s.name, err)
	}
	s.status.Store(int32(Converging))
	for _, sh := range s.shards {
		s.wg.Add(1)
		go sh.run()
	}
	s.wg.Add(1)
	go s.coord.run()
	return nil
}

// Close stops the scope and its transport and waits for its goroutines.
// It does not tell peers; use Drain first for a graceful exit.
func (s *Scope) Close() error {
	var err error
	s.closeOnce.Do(func() {
		close(s.closing)
		if s.started.Load() {
			err = s.tp.Close()
		}
		s.wg.Wait()
	})
	if err != nil && !errors.Is(err, ErrTransportClosed) {
		return fmt.Errorf("muster: close scope %q: %w", s.name, err)
	}
	return nil
}

// Join registers m as a local member of group. The first local member makes
// the scope claim the group at its router (one Call), so Join may take up to
// RPCTimeout. It returns ErrRPCFailed if the router could not be told
// (nothing registered; retry), ErrDraining after Drain, or ctx's error. A Join
// abandoned by its ctx is compensated by a Leave, so it leaves no member.
func (s *Scope) Join(ctx context.Context, group string, m Member) error {
	if err := s.usable(); err != nil {
		return fmt.Errorf("muster: join %q: %w", group, err)
	}
	if s.draining.Load() {
		return fmt.Errorf("muster: join %q: %w", group, ErrDraining)
	}
	sh := s.shardFor(group)
	req := &joinReq{group: group, m: m, reply: make(chan error, 1)}
	if err := sh.mbox.post(ctx, req); err != nil {
		return fmt.Errorf("muster: join %q: %w", group, err)
	}
	select {
	case err := <-req.reply:
		if err != nil {
			return fmt.Errorf("muster: join %q: %w", group, err)
		}
		return nil
	case <-ctx.Done():
		s.tr.Emit("muster_join_abandoned", "scope", s.name, "node", s.self, "group", group)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			sh.mbox.postAsync(&leaveReq{group: group, id: m.ID()})
		}()
		return fmt.Errorf("muster: join %q: %w", group, ctx.Err())
	case <-s.closing:
		return fmt.Errorf("muster: join %q: %w", group, ErrClosed)
	}
}

// Leave removes m from group. Leaving a group one is not in is not an error.
// The router is told later, by the vacant flush, after the cooldown.
func (s *Scope) Leave(ctx context.Context, group string, m Member) error {
	if err := s.usable(); err != nil {
		return fmt.Errorf("muster: leave %q: %w", group, err)
	}
	req := &leaveReq{group: group, id: m.ID(), reply: make(chan error, 1)}
	if err := s.shardFor(group).mbox.post(ctx, req); err != nil {
		return fmt.Errorf("muster: leave %q: %w", group, err)
	}
	select {
	case err := <-req.reply:
		return err
	case <-ctx.Done():
		return fmt.Errorf("muster: leave %q: %w", group, ctx.Err())
	case <-s.closing:
		return fmt.Errorf("muster: leave %q: %w", group, ErrClosed)
	}
}

// Router names group's router: {RouteOK, Node} while converging or ready,
// {RouteRebalancing, Members} while the view changes (send to every member).
// Lock-free.
func (s *Scope) Router(group string) RouteResult {
	v := s.view.Load()
	if Status(s.status.Load()) == Rebalancing {
		return RouteResult{Status: RouteRebalancing, Members: v.fanout}
	}
	return RouteResult{Status: RouteOK, Node: v.cur.Find(group)}
}

// Targets is the router side of a routed broadcast: the sorted nodes holding
// group, ok=true, when this node is ready and senderViewHash equals its view
// hash (the occupancy table can be trusted); otherwise ok=false and the
// caller floods every node its transport knows (never Members()). The
// caller also re-checks that Router(group) still names this node.
//
// The rows are read between two checks of status and view hash: a writer
// that removes a member's rows (a departure) first leaves Ready, so a read
// that raced with it fails the second check instead of answering without
// that member.
func (s *Scope) Targets(group string, senderViewHash uint64) (nodes []string, ok bool) {
	trusted := func() bool { return Status(s.status.Load()) == Ready && s.viewHash.Load() == senderViewHash }
	if !trusted() {
		s.met.Flood()
		return nil, false
	}
	nodes = s.occ.sources(group)
	if !trusted() {
		s.met.Flood()
		return nil, false
	}
	return nodes, true
}

// ViewHash returns the published view hash (see ViewHash the function).
func (s *Scope) ViewHash() uint64 { return s.viewHash.Load() }

// Status returns the lifecycle status. Lock-free.
func (s *Scope) Status() Status { return Status(s.status.Load()) }

// Members returns the committed view's node names, sorted.
func (s *Scope) Members() []string { return names(s.view.Load().members) }

// Node returns this node's name.
func (s *Scope) Node() string { return s.self }

// Incarnation returns the current incarnation (it changes when the
// coordinator resets).
func (s *Scope) Incarnation() uint64 { return s.inc.Load() }

// Occupancy returns the raw occupancy of group on this node (sources with a
// present row), not gated by the readiness barrier.
func (s *Scope) Occupancy(group string) []string { return s.occ.sources(group) }

// LocalMembers returns the IDs of group's local members.
func (s *Scope) LocalMembers(group string) []string { return s.shardFor(group).localMembers(group) }

func (s *Scope) usable() error {
	select {
	case <-s.closing:
		return ErrClosed
	default:
	}
	if !s.started.Load() {
		return ErrNotStarted
	}
	return nil
}

func (s *Scope) shardFor(group string) *shard {
	return s.shards[xxhash.Sum64String(group)%uint64(len(s.shards))]
}

// nextSeq returns a fresh seq of the current incarnation.
func (s *Scope) nextSeq() Seq { return Seq{Inc: s.inc.Load(), N: s.seqN.Add(1)} }

// call makes a Call bounded by RPCTimeout.
func (s *Scope) call(to string, m *wireMsg) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.RPCTimeout)
	defer cancel()
	go func() {
		select {
		case <-s.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	_, err := s.tp.Call(ctx, to, encode(m))
	return err
}

// send is a best-effort Send.
func (s *Scope) send(to string, m *wireMsg) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.RPCTimeout)
	defer cancel()
	if err := s.tp.Send(ctx, to, encode(m)); err != nil {
		s.log.Debug("muster: send failed", zap.String("to", to), zap.String("kind", m.Kind), zap.Error(err))
	}
}

func (s *Scope) broadcast(m *wireMsg) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.RPCTimeout)
	defer cancel()
	if err := s.tp.Broadcast(ctx, encode(m)); err != nil {
		s.log.Debug("muster: broadcast failed", zap.String("kind", m.Kind), zap.Error(err))
	}
}

// worker runs f on a tracked goroutine.
func (s *Scope) worker(f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}

// liveness records when each node incarnation was last heard from.
type liveness struct {
	mu   sync.Mutex
	seen map[string]liveEntry
}

type liveEntry struct {
	inc  uint64
	last time.Time
}

func newLiveness() *liveness { return &liveness{seen: make(map[string]liveEntry)} }

// heard records a message from (node, inc) and reports whether this
// incarnation is new (never heard, or newer than the last one heard).
func (l *liveness) heard(node string, inc uint64, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.seen[node]
	if ok && inc < e.inc {
		return false
	}
	l.seen[node] = liveEntry{inc, now}
	return !ok || inc > e.inc
}

// last returns when (node, inc) was last heard; zero if never or if a newer
// incarnation has been heard since.
func (l *liveness) last(node string, inc uint64) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.seen[node]
	if e.inc != inc {
		return time.Time{}
	}
	return e.last
}

// alive lists nodes heard from since cutoff.
func (l *liveness) alive(cutoff time.Time) []NodeID {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []NodeID
	for n, e := range l.seen {
		if e.last.After(cutoff) {
			out = append(out, NodeID{n, e.inc})
		}
	}
	return out
}

// silent lists node incarnations last heard before cutoff.
func (l *liveness) silent(cutoff time.Time) []NodeID {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []NodeID
	for n, e := range l.seen {
		if !e.last.After(cutoff) {
			out = append(out, NodeID{n, e.inc})
		}
	}
	return out
}

// silence marks node as not heard from since the zero time (tests use it
// to make the failure detector fire).
func (l *liveness) silence(node string) {
	l.mu.Lock()
	if e, ok := l.seen[node]; ok {
		e.last = time.Time{}
		l.seen[node] = e
	}
	l.mu.Unlock()
}

// errText is err's text for trace points ("" for nil).
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
