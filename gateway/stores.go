package gateway

import (
	"context"

	"github.com/relaygw/relay/session"
	"go.uber.org/zap"
)

// buildStores picks the lease, checkpoint and replay stores from the
// configuration: in-memory for the embedded default.
func (n *Node) buildStores(_ context.Context) error {
	n.mode = "embedded"
	n.leases = session.NewMemoryLeaseStore()
	n.checkpoints = session.NewMemoryCheckpointStore()
	n.replay = session.NewMemoryReplayLog(int(n.cfg.ReplayMaxLen), n.cfg.ReplayTTL)
	n.log.Info("single-node mode: in-memory lease, checkpoint and replay stores; nothing survives a restart",
		zap.String("owner", n.Owner()))
	return nil
}
