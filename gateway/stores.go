package gateway

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/relaygw/relay/migrations"
	"github.com/relaygw/relay/session"
	"github.com/relaygw/relay/session/pgstore"
	"github.com/relaygw/relay/session/redisstore"
	"go.uber.org/zap"
)

// buildStores picks the lease, session and replay stores: Postgres when
// DATABASE_URL is set (migrations applied at start under an advisory lock),
// Redis Streams when REDIS_URL is set, in-memory otherwise.
func (n *Node) buildStores(ctx context.Context) error {
	cfg := n.cfg
	if cfg.DatabaseURL != "" {
		pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
		if err != nil {
			return fmt.Errorf("gateway: postgres: %w", err)
		}
		n.closers = append(n.closers, pool.Close)
		n.pg = pool
		schema := firstSchema(pool.Config().ConnConfig.RuntimeParams["search_path"])
		if err := migrations.Apply(ctx, pool, schema); err != nil {
			return fmt.Errorf("gateway: %w", err)
		}
		n.leases = pgstore.NewLeaseStore(pool)
		n.store = pgstore.NewSessionStore(pool)
	} else {
		n.leases = session.NewMemoryLeaseStore()
		n.store = session.NewMemorySessionStore()
	}
	n.leaseWatch = &leaseWatch{LeaseStore: n.leases}
	if cfg.RedisURL != "" {
		opt, err := redis.ParseURL(cfg.RedisURL)
		if err != nil {
			return fmt.Errorf("gateway: redis url: %w", err)
		}
		// No client retries: an append is a fenced write with an explicit
		// entry id, and a retried XADD that had landed would come back as
		// "id not above the top", a false fence. Fail fast instead; the
		// actor counts a failed append and keeps publishing live.
		opt.MaxRetries = -1
		opt.DialTimeout = time.Second
		opt.ReadTimeout = time.Second
		opt.WriteTimeout = time.Second
		opt.PoolTimeout = time.Second
		client := redis.NewClient(opt)
		n.closers = append(n.closers, func() { _ = client.Close() })
		n.redis = client
		n.replay = redisstore.NewReplayLog(client, redisstore.ReplayConfig{
			Prefix: cfg.Cluster + ":", MaxLen: cfg.ReplayMaxLen, TTL: cfg.ReplayTTL,
		})
	} else {
		n.replay = session.NewMemoryReplayLog(int(cfg.ReplayMaxLen), cfg.ReplayTTL)
	}

	switch {
	case cfg.DatabaseURL == "" && cfg.RedisURL == "" && cfg.NATSURL == "":
		n.mode = "embedded"
		n.log.Info("embedded mode (single node): in-memory lease, session and replay stores; nothing survives a restart",
			zap.String("owner", n.Owner()))
	case cfg.NATSURL == "":
		n.mode = "single"
		n.log.Info("single-node mode with durable stores",
			zap.Bool("postgres", cfg.DatabaseURL != ""), zap.Bool("redis", cfg.RedisURL != ""), zap.String("owner", n.Owner()))
	default:
		n.mode = "cluster"
	}
	return nil
}

// firstSchema returns the first entry of a search_path setting ("" if none).
func firstSchema(searchPath string) string {
	s, _, _ := strings.Cut(searchPath, ",")
	return strings.Trim(strings.TrimSpace(s), `"`)
}
