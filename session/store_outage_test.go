package session_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/testkit/testenv"
	"github.com/relaygw/relay/session"
	"github.com/relaygw/relay/session/pgstore"
	"github.com/relaygw/relay/session/redisstore"
)

// An unreachable store must answer with an error that is none of the
// store's verdicts (held, not owner, fenced): the caller then refuses the
// work instead of treating it as decided.
func TestStoresUnreachableAreErrorsNotVerdicts(t *testing.T) {
	ctx := context.Background()

	dsn := testenv.PostgresURL(t)
	pgAddr, err := testenv.HostPort(dsn)
	if err != nil {
		t.Fatal(err)
	}
	pgProxy := testenv.Proxy(t, pgAddr)
	pool, err := pgxpool.New(ctx, pgProxy.URL(dsn))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	client, prefix := testenv.Redis(t)
	redisAddr, err := testenv.HostPort(testenv.RedisServerURL())
	if err != nil {
		t.Fatal(err)
	}
	redisProxy := testenv.Proxy(t, redisAddr)
	opts := client.(*redis.Client).Options()
	proxied := redis.NewClient(&redis.Options{Addr: redisProxy.Addr(), DB: opts.DB, MaxRetries: -1})
	t.Cleanup(func() { _ = proxied.Close() })

	leases := pgstore.NewLeaseStore(pool)
	store := pgstore.NewSessionStore(pool)
	replay := redisstore.NewReplayLog(proxied, redisstore.ReplayConfig{Prefix: prefix, TTL: time.Minute})

	l, err := leases.Claim(ctx, "k", "a/1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := replay.Append(ctx, redisEvent("s", 1, 1)); err != nil {
		t.Fatal(err)
	}

	pgProxy.Cut()
	redisProxy.Cut()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	verdicts := []error{session.ErrNotOwner, session.ErrFenced}
	isVerdict := func(err error) bool {
		var held *session.LeaseHeldError
		if errors.As(err, &held) {
			return true
		}
		for _, v := range verdicts {
			if errors.Is(err, v) {
				return true
			}
		}
		return false
	}
	for name, err := range map[string]error{
		"claim":   func() error { _, err := leases.Claim(cctx, "k", "b/1", time.Minute); return err }(),
		"release": leases.Release(cctx, "k", "a/1", l.Epoch),
		"get":     func() error { _, _, err := leases.Get(cctx, "k"); return err }(),
		"thaw":    func() error { _, err := store.Thaw(cctx, "k", 1, session.ThawQuery{}); return err }(),
		"accept":  store.Accept(cctx, "k", 1, session.InboxEntry{Epoch: 1, Seq: 1, Input: agent.Input{Type: "m", Data: []byte(`{}`)}}, time.Hour),
		"turn":    store.CompleteTurn(cctx, "k", 1, session.TurnRecord{Seq: 1}),
		"read":    func() error { _, _, err := store.Read(cctx, "k", session.HistoryQuery{Limit: 1}); return err }(),
		"append":  replay.Append(cctx, redisEvent("s", 1, 2)),
		"since":   func() error { _, _, err := replay.Since(cctx, "s", agent.Position{}, 0); return err }(),
	} {
		if err == nil || isVerdict(err) {
			t.Errorf("%s while the store is cut off = %v, want a plain error", name, err)
		}
	}

	pgProxy.Restore()
	redisProxy.Restore()
	// Connections broken by the cut may be handed out once more before the
	// clients notice; the stores answer again within a few attempts.
	var claimErr, appendErr error = errors.New("not tried"), errors.New("not tried")
	for range 3 {
		if claimErr != nil {
			_, claimErr = leases.Claim(ctx, "k", "a/1", time.Minute)
		}
		if appendErr != nil {
			appendErr = replay.Append(ctx, redisEvent("s", 1, 2))
		}
	}
	if claimErr != nil || appendErr != nil {
		t.Fatalf("after restore: claim %v, append %v", claimErr, appendErr)
	}
}
