// Package gateway composes the parts of a relay node: the HTTP API, the
// Phoenix socket endpoint, session ownership and the admin routes.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/channels"
	"github.com/relaygw/relay/internal/trace"
	"github.com/relaygw/relay/muster"
	"github.com/relaygw/relay/presence"
	"github.com/relaygw/relay/pubsub"
	"github.com/relaygw/relay/session"
	"github.com/relaygw/relay/session/natsforward"
	oteltrace "go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// Node is one gateway process. Create it with New, serve Handler, and stop it
// with Drain (hand back sessions, close sockets) and Close.
type Node struct {
	cfg            Config
	name           string
	incarnation    string
	incarnationNum uint64 // start time in Unix ns: grows across restarts of a node name
	mode           string
	log            *zap.Logger // with the node field
	baseLog        *zap.Logger
	tracer         *trace.Tracer
	tp             oteltrace.TracerProvider // nil: no spans
	otr            oteltrace.Tracer
	auth           *Authenticator
	metrics        *metrics

	hub      *channels.Hub
	endpoint *channels.Endpoint
	longpoll *channels.LongPoll
	manager  *session.Manager
	leases   session.LeaseStore
	store    session.SessionStore
	replay   session.ReplayLog
	nc       *nats.Conn
	busConn  *nats.Conn // PubSub's own connection under PUBSUB_ROUTING=subjects or flood
	scope    *muster.Scope
	pubsub   *pubsub.PubSub
	sequence *pubsub.Sequencer // orders the session events handed to the hub
	presence *presence.Replica
	census   *presence.Census

	// bodyTimeout bounds reading one event body (bodyReadTimeout).
	bodyTimeout time.Duration

	pg         *pgxpool.Pool         // lease and session stores (nil: in memory)
	redis      redis.UniversalClient // replay log (nil: in memory)
	readiness  readiness
	serving    readiness   // readiness without the muster check: gates new sockets (admitSocket)
	leaseWatch *leaseWatch // the lease store the session manager writes through

	draining  atomic.Bool
	drainMu   sync.Mutex     // orders a drain's end and an undrain
	drained   bool           // guarded by drainMu: the drain that draining marks has returned
	drainDone chan struct{}  // guarded by drainMu: closed when the drain that draining marks returns
	ops       *opsStatus     // the cluster's node statuses (ops page)
	bg        sync.WaitGroup // admin-started drains
	closeOnce sync.Once
	closers   []func()
}

// Options are the non-configuration inputs of New.
type Options struct {
	Logger *zap.Logger
	Tracer *trace.Tracer
	Agent  agent.Agent // default: the backend Config.Agent and Config.AgentRoutes select
	// TracerProvider makes the node's OpenTelemetry spans (event POSTs,
	// accepts, forward hops, turns; docs/ARCHITECTURE.md "Tracing").
	// Nil: no spans. cmd/gateway builds one from the OTEL_* variables
	// (internal/telemetry).
	TracerProvider oteltrace.TracerProvider
}

// New builds a node from cfg. With no DATABASE_URL, REDIS_URL or NATS_URL it
// runs the embedded default: in-memory stores, single node.
func New(ctx context.Context, cfg Config, opts Options) (*Node, error) {
	if cfg.JWTSecret == "" {
		return nil, errors.New("gateway: JWT secret is required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	name := cfg.NodeName
	if name == "" {
		name, _ = os.Hostname()
	}
	inc := uint64(time.Now().UnixNano())
	n := &Node{
		cfg:            cfg,
		name:           name,
		incarnation:    strconv.FormatUint(inc, 36),
		incarnationNum: inc,
		log:            log.With(zap.String("node", name)),
		baseLog:        log,
		tracer:         opts.Tracer,
		tp:             opts.TracerProvider,
		otr:            tracerOf(opts.TracerProvider),
		auth:           NewAuthenticator(cfg.JWTSecret, cfg.APIKeys, cfg.AdminToken),
		metrics:        newMetrics(),
		bodyTimeout:    bodyReadTimeout,
	}
	if err := n.buildStores(ctx); err != nil {
		n.Close()
		return nil, err
	}
	agent := opts.Agent
	if agent == nil {
		ag, err := cfg.buildAgent(n.log) // AGENT, AGENT_ROUTES
		if err != nil {
			n.Close()
			return nil, err
		}
		agent = ag
		n.log.Info("agent backend", zap.String("agent", cfg.Agent), zap.Strings("routes", redactRoutes(cfg.AgentRoutes)))
	}
	agent = session.StorableOutput(agent) // what a turn emits can be checkpointed

	n.hub = channels.NewHubWithConfig(channels.HubConfig{
		OnFirstSubscriber: func(topic string) { n.pubsub.JoinTopic(topic) },
		OnLastUnsubscribe: func(topic string) {
			n.pubsub.LeaveTopic(topic)
			n.sequence.Forget(topic)
		},
		Tracer: n.tracer,
	})
	if err := n.buildCluster(ctx); err != nil {
		n.Close()
		return nil, err
	}
	if err := n.buildCensus(ctx); err != nil {
		n.Close()
		return nil, err
	}
	// In cluster mode events for sessions owned elsewhere are forwarded to
	// the owner over NATS request/reply on <cluster>.fwd.<node>.
	var fwd *natsforward.Forwarder
	scfg := session.Config{
		Owner:           n.Owner(),
		Agent:           agent,
		Leases:          n.leaseWatch,
		Store:           n.store,
		IdempotencyTTL:  cfg.IdempotencyTTL,
		HistoryWindow:   cfg.HistoryWindow,
		MaxTurnAttempts: cfg.MaxTurnAttempts,
		DoubleTexting:   cfg.DoubleTexting,
		Log:             n.replay,
		Publisher:       n.pubsub,
		LeaseTTL:        cfg.LeaseTTL,
		RenewEvery:      cfg.LeaseRenew,
		RenewMargin:     cfg.renewMargin(),
		IdleTimeout:     cfg.SessionIdle,
		ForwardTimeout:  cfg.ForwardTimeout,
		Logger:          n.log,
		Tracer:          n.tracer,
		OnTurnEnd: func(outcome string, d time.Duration) {
			n.metrics.turnDuration.WithLabelValues(outcome).Observe(d.Seconds())
		},
		OnTiming:       n.metrics.observeTiming,
		TracerProvider: n.tp,
	}
	if n.nc != nil {
		fwd = natsforward.New(n.nc, natsforward.Config{Prefix: cfg.Cluster, Node: n.name, Logger: n.log})
		scfg.Forwarder = fwd
	}
	n.manager = session.NewManager(scfg)
	if fwd != nil {
		stop, err := fwd.Serve(n.manager)
		if err != nil {
			n.Close()
			return nil, fmt.Errorf("gateway: %w", err)
		}
		n.closers = append(n.closers, stop)
	}
	rctx, rcancel := context.WithCancel(context.Background())
	n.closers = append(n.closers, rcancel)
	n.bg.Add(1)
	go func() {
		defer n.bg.Done()
		n.recoverLoop(rctx, cfg.LeaseTTL)
	}()
	n.endpoint = channels.NewEndpoint(channels.EndpointConfig{
		Hub:              n.hub,
		Connect:          n.connect,
		Admit:            n.admitSocket,
		Draining:         n.drainRefusal,
		AllowedOrigins:   cfg.AllowedOrigins,
		HeartbeatTimeout: cfg.HeartbeatTimeout,
		MaxFrameBytes:    cfg.MaxFrameBytes,
		QueueSize:        cfg.SocketQueue,
		QueueMaxLag:      cfg.SocketMaxLag,
		UnsentBytes:      unsentBytes(cfg.SocketUnsent),
		DrainBatch:       cfg.SocketDrainBatch,
		WriteDelay:       cfg.WriteDelay,
		WriteCoalesce:    writeCoalesce(cfg.WriteCoalesce),
		Logger:           n.log,
		Tracer:           n.tracer,
	})
	n.endpoint.HandleNew("session:*", func() channels.Handler { return &sessionChannel{n: n} })
	n.longpoll = channels.NewLongPoll(n.endpoint, channels.LongPollConfig{
		Node: n.name, Window: cfg.EffectiveLongPollWindow(), MaxBodyBytes: cfg.LongPollMaxBody, SessionMaxAge: cfg.LongPollMaxAge,
	})
	n.metrics.registerNode(n)
	probes := &readyProbes{nc: n.nc, bus: n.busConn, redis: n.redis, scope: n.scope, watch: n.leaseWatch, owner: n.Owner(),
		key: cfg.Cluster + ":ready:" + n.Owner()}
	if lt, ok := n.leaseWatch.LeaseStore.(leaseTrier); ok {
		probes.lease = lt
	}
	pctx, pcancel := context.WithCancel(context.Background())
	// The first round runs before New returns: a node whose dependencies
	// answer accepts sockets at once.
	ready := n.readyRound(pctx, probes, cfg.ReadyInterval)
	n.bg.Add(1)
	go func() {
		defer n.bg.Done()
		n.readyLoop(pctx, probes, cfg.ReadyInterval, ready)
	}()
	n.closers = append(n.closers, pcancel)
	if err := n.startOpsStatus(); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

// unsentBytes maps SOCKET_UNSENT (0: the system default) to
// EndpointConfig.UnsentBytes (0: the default, negative: the system's).
func unsentBytes(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// writeCoalesce maps WRITE_COALESCE to EndpointConfig.WriteCoalesce: 0
// (off) becomes negative, as the endpoint reads 0 as its default.
func writeCoalesce(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// Name returns the node name.
func (n *Node) Name() string { return n.name }

// Owner returns this process's lease owner identity: "<node>/<incarnation>".
// A restarted process under the same name gets a new incarnation, so it can
// never silently extend its predecessor's lease.
func (n *Node) Owner() string { return n.name + "/" + n.incarnation }

// Mode is "embedded" (single node, in-memory stores), "single" (one node
// with durable stores, no NATS) or "cluster".
func (n *Node) Mode() string { return n.mode }

// Auth returns the node's authenticator (used to mint the development token).
func (n *Node) Auth() *Authenticator { return n.auth }

// connect authenticates a socket: the JWT comes from the token param or the
// authToken subprotocol. A refused socket never upgrades (HTTP 403).
func (n *Node) connect(_ *http.Request, _ url.Values, authToken string) (any, error) {
	if n.draining.Load() {
		return nil, errors.New("draining")
	}
	claims, err := n.auth.ParseToken(authToken)
	if err != nil {
		n.metrics.authFailures.Inc()
		return nil, err
	}
	return claims, nil
}

// view reads a session's state for display, with a short timeout and a safe
// empty default; owner is the live lease holder or "".
func (n *Node) view(ctx context.Context, id string, q session.HistoryQuery) (session.State, string) {
	ctx, cancel := context.WithTimeout(ctx, joinTimeout)
	defer cancel()
	st, err := n.manager.State(ctx, id, q)
	if err != nil {
		n.log.Debug("session view fell back to empty", zap.String("session", id), zap.Error(err))
		st = session.State{}
	}
	_, owner := n.owner(ctx, id)
	return st, owner
}

// owner reads the live lease holder of id ("" when none or unknown).
func (n *Node) owner(ctx context.Context, id string) (session.Lease, string) {
	l, ok, err := n.manager.LiveLease(ctx, id)
	if err != nil || !ok {
		return session.Lease{}, ""
	}
	return l, l.Owner
}

// recoverBatch bounds the sessions one recovery pass claims.
const recoverBatch = 100

// recoverLoop runs the inboxes dead owners left behind (session.Manager.Recover)
// at start and then every lease TTL, until ctx ends; passes are skipped while
// the node drains.
func (n *Node) recoverLoop(ctx context.Context, every time.Duration) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n.draining.Load() {
			t.Reset(every) // a drained node may be undrained: look again then
			continue
		}
		started, err := n.manager.Recover(ctx, recoverBatch)
		switch {
		case errors.Is(err, session.ErrClosed), ctx.Err() != nil:
			return
		case errors.Is(err, session.ErrDraining):
		case err != nil:
			n.log.Warn("recovering unfinished sessions failed", zap.Error(err))
		case started > 0:
			n.log.Info("recovered unfinished sessions", zap.Int("sessions", started))
		}
		t.Reset(every)
	}
}

// Drain hands the node's work back: readiness goes false, new sockets and
// events are refused, sessions finish their turns and release their leases (expiry
// now, so the next claim elsewhere is immediate), then every socket is closed
// with 1012 so clients reconnect elsewhere. It returns when done or when ctx
// ends (docs/OWNERSHIP.md "Drain").
//
// Running turns get turnShare of the time ctx leaves; a turn still running
// then is handed over (its input stays in the inbox, the next owner resumes
// it), so the rest of the window is left for the lease hand-back, the
// sockets' close and Muster's settle (a fifth of DRAIN_WINDOW).
//
// When a drain already runs (POST /admin/drain), Drain waits for it to end
// (traced "gateway.drain_wait") or for ctx; after an ended drain it returns
// nil at once.
func (n *Node) Drain(ctx context.Context) error {
	started, done := n.beginDrain()
	if started {
		return n.drain(ctx)
	}
	n.tracer.Emit("gateway.drain_wait", "node", n.name)
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("gateway: waiting for the running drain: %w", ctx.Err())
	}
}

// beginDrain marks the node draining and reports true, or, when a drain had
// begun already, reports false with the channel its end closes.
func (n *Node) beginDrain() (bool, <-chan struct{}) {
	n.drainMu.Lock()
	defer n.drainMu.Unlock()
	if n.draining.Load() {
		return false, n.drainDone
	}
	n.draining.Store(true)
	n.drainDone = make(chan struct{})
	return true, nil
}

// drain runs a drain that its caller started (set draining).
func (n *Node) drain(ctx context.Context) error {
	n.log.Info("draining")
	defer n.drainEnded()
	turns := ctx
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		turns, cancel = context.WithDeadline(ctx, time.Now().Add(time.Until(dl)*turnShare/5))
		defer cancel()
	}
	err := n.manager.Drain(turns)
	if serr := n.endpoint.Shutdown(ctx); err == nil {
		err = serr
	}
	// A node alone in the view has no peer to hand its router role to.
	if n.scope != nil && len(n.scope.Members()) > 1 {
		if merr := n.scope.Drain(ctx); err == nil {
			err = merr
		}
	}
	return err
}

// turnShare is the fifths of a drain's time running turns may use.
const turnShare = 3

// Draining reports whether Drain has started.
func (n *Node) Draining() bool { return n.draining.Load() }

// Close stops everything and releases connections. Call Drain first for a
// graceful stop.
func (n *Node) Close() {
	n.closeOnce.Do(func() {
		if n.endpoint != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = n.endpoint.Shutdown(ctx)
			cancel()
		}
		if n.manager != nil {
			n.manager.Close()
		}
		for i := len(n.closers) - 1; i >= 0; i-- {
			n.closers[i]()
		}
		n.bg.Wait()
	})
}
