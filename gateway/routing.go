package gateway

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/relaygw/relay/muster"
	"github.com/relaygw/relay/pubsub"
)

// validateRouting checks PUBSUB_ROUTING: one of muster, subjects, flood; the
// last two carry events on NATS subjects, so they need NATS_URL.
func (c Config) validateRouting() error {
	r, err := pubsub.ParseRouting(c.PubSubRouting)
	if err != nil {
		return fmt.Errorf("gateway: PUBSUB_ROUTING %q must be muster, subjects or flood", c.PubSubRouting)
	}
	if r != pubsub.RoutingMuster && c.NATSURL == "" {
		return fmt.Errorf("gateway: PUBSUB_ROUTING=%s needs NATS_URL (cluster mode); a single node routes nothing, leave it at muster", r)
	}
	return nil
}

// buildPubSub creates the node's PubSub for PUBSUB_ROUTING and starts it
// (scope routes topics; psTr carries muster routing). Under subjects and
// flood the PubSub gets a NATS connection of its own, made with NoEcho, so a
// node never receives its own publications; psTr is then left unused.
func (n *Node) buildPubSub(ctx context.Context, scope *muster.Scope, psTr muster.Transport) error {
	routing, err := pubsub.ParseRouting(n.cfg.PubSubRouting)
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	cfg := pubsub.Config{Node: n.name, Scope: scope, Local: n.sequence, Metrics: n.metrics.pubsub,
		Logger: n.log.Named("pubsub"), Routing: routing, Prefix: n.cfg.Cluster}
	if routing == pubsub.RoutingMuster {
		cfg.Transport = psTr
		n.pubsub = pubsub.New(cfg)
		psTr.Register(n.pubsub)
		if err := psTr.Start(ctx); err != nil {
			return fmt.Errorf("gateway: start pubsub transport: %w", err)
		}
		n.closers = append(n.closers, func() { _ = psTr.Close() })
		return nil
	}
	nc, err := nats.Connect(n.cfg.NATSURL,
		nats.Name(n.Owner()+"/pubsub"),
		nats.NoEcho(),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
	)
	if err != nil {
		return fmt.Errorf("gateway: nats (pubsub): %w", err)
	}
	n.busConn = nc
	n.closers = append(n.closers, nc.Close)
	cfg.Conn = nc
	n.pubsub = pubsub.New(cfg)
	n.closers = append(n.closers, n.pubsub.Close) // also after a failed Start
	if err := n.pubsub.Start(ctx); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	return nil
}
