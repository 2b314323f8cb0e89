package session_test

import (
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/relaygw/relay/session"
	"github.com/relaygw/relay/session/pgstore"
	"github.com/relaygw/relay/session/redisstore"
)

// The in-package tests run the actor against the cluster adapters too;
// they reach them through session.ClusterAdapters (see there).
func init() {
	session.ClusterAdapters = &session.Adapters{
		LeaseStore:   func(pool *pgxpool.Pool) session.LeaseStore { return pgstore.NewLeaseStore(pool) },
		SessionStore: func(pool *pgxpool.Pool) session.SessionStore { return pgstore.NewSessionStore(pool) },
		ReplayLog: func(client redis.UniversalClient, prefix string, maxLen int64, ttl time.Duration) session.ReplayLog {
			return redisstore.NewReplayLog(client, redisstore.ReplayConfig{Prefix: prefix, MaxLen: maxLen, TTL: ttl})
		},
	}
}
