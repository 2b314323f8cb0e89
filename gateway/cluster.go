package gateway

import (
	"context"
	"fmt"
	"regexp"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/relaygw/relay/muster"
	"github.com/relaygw/relay/muster/memnet"
	"github.com/relaygw/relay/muster/natstransport"
	"github.com/relaygw/relay/pubsub"
	"go.uber.org/zap"
)

// Muster scope names used by the gateway.
const (
	scopeSessions = "sessions" // session topics: which nodes hold sockets
	scopePubSub   = "pubsub"   // routed and flooded event delivery
)

var tokenPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// natsDisconnected logs a lost NATS link: a warning while the node runs
// (nats.go reconnects), a debug line when the link went because the node
// closed it itself (its stop), which is no fault.
func (n *Node) natsDisconnected(nc *nats.Conn, err error) {
	if nc.IsClosed() {
		n.log.Debug("nats connection closed")
		return
	}
	n.log.Warn("nats disconnected", zap.Error(err))
}

// buildCluster starts the Muster scope and the PubSub that routes session
// events between nodes. In cluster mode both run over NATS (subjects
// prefixed by the cluster name); in the embedded default they run over the
// in-process transport, so one node takes exactly the same path.
func (n *Node) buildCluster(ctx context.Context) error {
	var musterTr, psTr muster.Transport
	if n.cfg.NATSURL != "" {
		if !tokenPattern.MatchString(n.name) || !tokenPattern.MatchString(n.cfg.Cluster) {
			return fmt.Errorf("gateway: in cluster mode NODE_NAME (%q) and CLUSTER (%q) must be 1-64 characters of [A-Za-z0-9_-]", n.name, n.cfg.Cluster)
		}
		nc, err := nats.Connect(n.cfg.NATSURL,
			nats.Name(n.Owner()),
			nats.MaxReconnects(-1),
			nats.ReconnectWait(250*time.Millisecond),
			nats.DisconnectErrHandler(n.natsDisconnected),
			nats.ReconnectHandler(func(*nats.Conn) { n.log.Info("nats reconnected") }),
		)
		if err != nil {
			return fmt.Errorf("gateway: nats: %w", err)
		}
		n.nc = nc
		n.closers = append(n.closers, nc.Close)
		musterTr = natstransport.New(nc, natstransport.Config{Prefix: n.cfg.Cluster, Scope: scopeSessions, Node: n.name, Logger: n.log})
		psTr = natstransport.New(nc, natstransport.Config{Prefix: n.cfg.Cluster, Scope: scopePubSub, Node: n.name, Logger: n.log})
	} else {
		musterTr = memnet.New(1).Transport(n.name)
		psTr = memnet.New(1).Transport(n.name)
	}

	mcfg := n.cfg.Muster
	if n.cfg.NATSURL == "" && mcfg.SingletonPromotion == 0 {
		// Alone by construction: no peer can appear, so become ready at once.
		mcfg.SingletonPromotion = 10 * time.Millisecond
	}
	if mcfg.ViewHeartbeat == 0 {
		mcfg.ViewHeartbeat = n.cfg.MusterHeartbeat
	}
	if mcfg.PingInterval == 0 {
		mcfg.PingInterval = n.cfg.MusterPing
	}
	if mcfg.PeerDownAfter == 0 {
		mcfg.PeerDownAfter = n.cfg.MusterPeerDown
	}
	if mcfg.DrainSettle == 0 {
		// Muster's own default settle is its RPC timeout (5 s), longer than
		// a short DRAIN_WINDOW: the drain would always run out the window.
		// Keep the settle to a fifth of the window, after the sessions'
		// hand-back and the sockets' close.
		settle := mcfg.RPCTimeout
		if settle == 0 {
			settle = 5 * time.Second
		}
		mcfg.DrainSettle = min(settle, n.cfg.DrainWindow/5)
	}
	mcfg.Name = scopeSessions
	mcfg.Node = n.name
	mcfg.Incarnation = n.incarnationNum
	mcfg.Transport = musterTr
	mcfg.Logger = n.baseLog.Named("muster") // muster adds the node field itself
	mcfg.Tracer = n.tracer
	scope, err := muster.New(mcfg)
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	if err := scope.Start(ctx); err != nil {
		return fmt.Errorf("gateway: start muster: %w", err)
	}
	n.scope = scope
	n.closers = append(n.closers, func() { _ = scope.Close() })

	window := n.cfg.ReorderWindow
	if window == 0 {
		window = -1 // no wait: the Sequencer's zero means its default
	}
	n.sequence = pubsub.NewSequencer(n.hub, pubsub.SequencerConfig{Window: window, Metrics: n.metrics.pubsub})
	n.closers = append(n.closers, n.sequence.Close)
	if err := n.buildPubSub(ctx, scope, psTr); err != nil { // PUBSUB_ROUTING
		return err
	}
	if n.cfg.NATSURL != "" {
		n.log.Info("cluster mode: pubsub over NATS", zap.String("cluster", n.cfg.Cluster), zap.String("owner", n.Owner()), zap.String("routing", string(n.pubsub.Routing())))
	}
	return nil
}
