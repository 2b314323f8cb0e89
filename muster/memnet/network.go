package memnet

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/relaygw/relay/internal/trace"
)

// Errors returned by memnet.
var (
	// ErrNoHandler is returned by Start when Register was not called.
	ErrNoHandler = errors.New("memnet: no handler registered")
	// ErrAlreadyStarted is returned by a second Start.
	ErrAlreadyStarted = errors.New("memnet: transport already started")
)

// link names a one-way connection between two nodes.
type link struct{ from, to string }

// Network is an in-process network of Transports. The zero value is not
// usable; call New. All methods are safe for concurrent use.
type Network struct {
	mu     sync.Mutex
	rng    *rand.Rand
	tracer *trace.Tracer
	log    *zap.Logger

	nodes    map[string]*Transport // live transports by name
	blocked  map[link]bool
	faults   map[link]LinkFaults
	deflt    LinkFaults // faults of links without their own entry
	frozen   map[string]bool
	queues   map[link]*linkQueue // delayed in-order deliveries
	sent     map[link]uint64
	total    uint64
	dropped  uint64
	timers   int // scheduled deliveries not yet arrived (queued, reordered, replies)
	running  int // handler calls in progress, on any transport
	changed  chan struct{}
	closed   bool
	allTimer map[*time.Timer]struct{}
}

// New returns an empty network whose random fault decisions come from a
// rand.Rand seeded with seed.
func New(seed int64) *Network {
	return &Network{
		rng:      rand.New(rand.NewSource(seed)),
		log:      zap.NewNop(),
		nodes:    make(map[string]*Transport),
		blocked:  make(map[link]bool),
		faults:   make(map[link]LinkFaults),
		frozen:   make(map[string]bool),
		queues:   make(map[link]*linkQueue),
		sent:     make(map[link]uint64),
		changed:  make(chan struct{}),
		allTimer: make(map[*time.Timer]struct{}),
	}
}

// SetTracer installs a tracer for the network's trace points:
//
//	memnet.send    from, to, kind ("msg" or "call"), size
//	memnet.drop    from, to, kind, reason ("blocked", "random", "dead", "not-started")
//	memnet.deliver from, to, kind — just before the handler is called
//	memnet.handled from, to, kind — after the handler returned
//
// Call it before traffic starts.
func (n *Network) SetTracer(t *trace.Tracer) {
	n.mu.Lock()
	n.tracer = t
	n.mu.Unlock()
}

// SetLogger installs a logger (default zap.NewNop()).
func (n *Network) SetLogger(l *zap.Logger) {
	if l == nil {
		l = zap.NewNop()
	}
	n.mu.Lock()
	n.log = l
	n.mu.Unlock()
}

// Transport returns the live transport named name, creating it if there is
// none. After Kill or Close, the next call creates a fresh transport under the
// same name (a restarted node).
func (n *Network) Transport(name string) *Transport {
	n.mu.Lock()
	defer n.mu.Unlock()
	if t, ok := n.nodes[name]; ok {
		return t
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &Transport{net: n, name: name, ctx: ctx, cancel: cancel, done: make(chan struct{})}
	t.cond = sync.NewCond(&n.mu)
	if !n.closed {
		n.nodes[name] = t
	} else {
		t.stopLocked()
	}
	return t
}

// Nodes returns the names of the live transports (created and neither killed
// nor closed), sorted.
func (n *Network) Nodes() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]string, 0, len(n.nodes))
	for name := range n.nodes {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// Close closes every transport, cancels scheduled deliveries and waits for
// in-flight handler calls to return. It must not be called from a handler.
func (n *Network) Close() {
	n.mu.Lock()
	n.closed = true
	ts := make([]*Transport, 0, len(n.nodes))
	for _, t := range n.nodes {
		ts = append(ts, t)
	}
	for tm := range n.allTimer {
		tm.Stop()
	}
	clear(n.allTimer)
	clear(n.queues)
	n.timers = 0
	n.notifyLocked()
	n.mu.Unlock()
	for _, t := range ts {
		_ = t.Close()
	}
}

// notifyLocked wakes Quiesce waiters.
func (n *Network) notifyLocked() {
	close(n.changed)
	n.changed = make(chan struct{})
}

// Quiesce blocks until no message is in flight: no delivery is scheduled, no
// handler is running, and every live node that is not frozen has an empty
// inbox. Messages held in a frozen node's inbox do not count. It returns ctx's
// error if ctx ends first. A handler blocked forever (for example in a Call to
// a frozen node without a deadline) keeps the network from quiescing.
func (n *Network) Quiesce(ctx context.Context) error {
	for {
		n.mu.Lock()
		quiet := n.quietLocked()
		ch := n.changed
		n.mu.Unlock()
		if quiet {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("memnet: quiesce: %w", ctx.Err())
		}
	}
}

func (n *Network) quietLocked() bool {
	if n.timers > 0 || n.running > 0 {
		return false
	}
	for name, t := range n.nodes {
		if len(t.inbox) > 0 && !n.frozen[name] {
			return false
		}
	}
	return true
}

// Sent returns how many messages from has sent to to (Send, Broadcast copies
// and Call requests), whatever became of them.
func (n *Network) Sent(from, to string) uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.sent[link{from, to}]
}

// SentFrom returns how many messages from has sent to any node.
func (n *Network) SentFrom(from string) uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	var s uint64
	for l, c := range n.sent {
		if l.from == from {
			s += c
		}
	}
	return s
}

// Total returns how many messages all nodes have sent.
func (n *Network) Total() uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.total
}

// Dropped returns how many messages were lost to blocks, random drops, or
// dead or unstarted receivers.
func (n *Network) Dropped() uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.dropped
}

// ResetCounters sets Sent, Total and Dropped back to zero.
func (n *Network) ResetCounters() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.sent)
	n.total = 0
	n.dropped = 0
}
