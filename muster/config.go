package muster

import (
	"fmt"
	"runtime"
	"time"

	"go.uber.org/zap"

	"github.com/relaygw/relay/internal/trace"
	"github.com/relaygw/relay/muster/ring"
)

// Config configures a Scope. Zero durations take the defaults listed on
// each field (DefaultConfig fills them all).
type Config struct {
	// Name is the scope name; it appears in logs, traces and Dump.
	Name string
	// Node is this node's name: its transport address (Transport.Self()).
	Node string
	// Incarnation identifies this process's run of the node. It must grow
	// across restarts of the same node name; zero means the start time in
	// Unix nanoseconds. A coordinator reset inside the process moves to a
	// larger incarnation on its own.
	Incarnation uint64
	// Transport carries Muster's messages. Required.
	Transport Transport
	// Shards is the number of claim shards (default runtime.NumCPU()).
	Shards int
	// VirtualNodes per ring member (default 128).
	VirtualNodes int

	// Cooldown is how long a group whose last member left stays claimed
	// before its vacancy is queued (default 30 s). Zero in DefaultConfig
	// terms means the default; use NoCooldown for none.
	Cooldown time.Duration
	// VacantFlush is each shard's vacant flush interval (default 5 s).
	VacantFlush time.Duration
	// ViewHeartbeat is the view re-announce and re-discovery interval
	// (default 10 s).
	ViewHeartbeat time.Duration
	// RPCTimeout bounds every Call Muster makes (default 5 s).
	RPCTimeout time.Duration
	// GatherTimeout bounds the synchronous shard gather of a rebalance
	// (default 15 s); a shard that does not answer resets the coordinator.
	GatherTimeout time.Duration
	// PingInterval is the failure detector's heartbeat period (default 1 s).
	PingInterval time.Duration
	// PeerDownAfter is the silence after which a peer is declared down
	// (default 5 s).
	PeerDownAfter time.Duration
	// TombstoneWindow is how long vacancy tombstones are kept, and the
	// period of the stale-row sweep (default 5 × RPCTimeout).
	TombstoneWindow time.Duration
	// SingletonPromotion is how long a freshly (re)started coordinator
	// waits for peers before declaring itself a ready singleton
	// (default 3 × ViewHeartbeat).
	SingletonPromotion time.Duration
	// AntiEntropy is the add-only reconcile period (default 6 ×
	// ViewHeartbeat); negative disables it.
	AntiEntropy time.Duration
	// DrainSettle is how long Drain waits after every peer acknowledged,
	// so broadcasts already routed here still fan out (default RPCTimeout).
	DrainSettle time.Duration

	// Logger receives logs (default zap.NewNop()).
	Logger *zap.Logger
	// Tracer receives trace points (nil: none).
	Tracer *trace.Tracer
	// Metrics receives metric hooks (nil: none).
	Metrics Metrics
}

// NoCooldown makes a group's vacancy queue at once when its last member
// leaves.
const NoCooldown = time.Duration(-1)

// DefaultConfig returns a Config with every default filled in and no Name,
// Node or Transport.
func DefaultConfig() Config {
	c := Config{}
	c.fill()
	return c
}

func (c *Config) fill() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.Shards <= 0 {
		c.Shards = runtime.NumCPU()
	}
	if c.VirtualNodes <= 0 {
		c.VirtualNodes = ring.DefaultVirtualNodes
	}
	def(&c.Cooldown, 30*time.Second)
	def(&c.VacantFlush, 5*time.Second)
	def(&c.ViewHeartbeat, 10*time.Second)
	def(&c.RPCTimeout, 5*time.Second)
	def(&c.GatherTimeout, 15*time.Second)
	def(&c.PingInterval, time.Second)
	def(&c.PeerDownAfter, 5*time.Second)
	def(&c.TombstoneWindow, 5*c.RPCTimeout)
	def(&c.SingletonPromotion, 3*c.ViewHeartbeat)
	def(&c.AntiEntropy, 6*c.ViewHeartbeat)
	def(&c.DrainSettle, c.RPCTimeout)
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Incarnation == 0 {
		c.Incarnation = uint64(time.Now().UnixNano())
	}
}

func (c *Config) validate() error {
	bad := func(f string, args ...any) error {
		return fmt.Errorf("%w: "+f, append([]any{ErrInvalidConfig}, args...)...)
	}
	switch {
	case c.Transport == nil:
		return bad("Transport is required")
	case c.Node == "":
		return bad("Node is required")
	case c.Node != c.Transport.Self():
		return bad("Node %q differs from Transport.Self() %q", c.Node, c.Transport.Self())
	case c.Cooldown < 0 && c.Cooldown != NoCooldown:
		return bad("Cooldown %v is negative", c.Cooldown)
	}
	for _, d := range []struct {
		n string
		v time.Duration
	}{{"VacantFlush", c.VacantFlush}, {"ViewHeartbeat", c.ViewHeartbeat}, {"RPCTimeout", c.RPCTimeout},
		{"GatherTimeout", c.GatherTimeout}, {"PingInterval", c.PingInterval}, {"PeerDownAfter", c.PeerDownAfter},
		{"TombstoneWindow", c.TombstoneWindow}, {"SingletonPromotion", c.SingletonPromotion}, {"DrainSettle", c.DrainSettle}} {
		if d.v <= 0 {
			return bad("%s %v must be positive", d.n, d.v)
		}
	}
	if c.PeerDownAfter <= c.PingInterval {
		return bad("PeerDownAfter %v must exceed PingInterval %v", c.PeerDownAfter, c.PingInterval)
	}
	return nil
}
