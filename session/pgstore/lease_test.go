package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/relaygw/relay/internal/testkit/testenv"
	"github.com/relaygw/relay/session"
	"github.com/relaygw/relay/session/pgstore"
	"github.com/relaygw/relay/session/storetest"
)

// shiftLeases makes d of lease time pass for the rows of keys starting with
// prefix: expires_at moves d into the past, so the database clock sees the
// leases d closer to (or further past) expiry. Tests use it instead of
// sleeping.
func shiftLeases(tb interface{ Fatalf(string, ...any) }, pool *pgxpool.Pool, prefix string, d time.Duration) {
	_, err := pool.Exec(context.Background(),
		"UPDATE agent_leases SET expires_at = expires_at - $1::interval WHERE starts_with(agent_key, $2)", d, prefix)
	if err != nil {
		tb.Fatalf("shift leases by %v: %v", d, err)
	}
}

// leaseRow reads key's row with liveness decided on the database clock.
func leaseRow(t *testing.T, pool *pgxpool.Pool, key string) (owner string, epoch int64, live bool) {
	t.Helper()
	err := pool.QueryRow(context.Background(),
		"SELECT owner_node, epoch, expires_at > now() FROM agent_leases WHERE agent_key = $1", key).Scan(&owner, &epoch, &live)
	if err != nil {
		t.Fatalf("read lease %s: %v", key, err)
	}
	return owner, epoch, live
}

func TestPostgresLeaseStore(t *testing.T) {
	storetest.LeaseStoreSuite(t, func(t *testing.T) storetest.LeaseFixture {
		pool := testenv.Postgres(t)
		return storetest.LeaseFixture{
			Store:   pgstore.NewLeaseStore(pool),
			Advance: func(t *testing.T, d time.Duration) { shiftLeases(t, pool, "", d) },
		}
	})
}

const testTTL = 15 * time.Second

func TestPostgresClaimNoRow(t *testing.T) {
	pool := testenv.Postgres(t)
	s := pgstore.NewLeaseStore(pool)
	l, err := s.Claim(context.Background(), "k", "a/1", testTTL)
	if err != nil {
		t.Fatal(err)
	}
	if l.Owner != "a/1" || l.Epoch != 1 || l.Remaining != testTTL {
		t.Fatalf("claim = %+v, want a/1 epoch 1 remaining %v", l, testTTL)
	}
	var left time.Duration
	if err := pool.QueryRow(context.Background(),
		"SELECT expires_at - now() FROM agent_leases WHERE agent_key = 'k'").Scan(&left); err != nil {
		t.Fatal(err)
	}
	if owner, epoch, live := leaseRow(t, pool, "k"); owner != "a/1" || epoch != 1 || !live || left <= 0 || left > testTTL {
		t.Fatalf("row = %s epoch %d live %v expires in %v, want a/1 epoch 1 live within %v", owner, epoch, live, left, testTTL)
	}
}

func TestPostgresClaimOwnLiveRowExtendsSameEpoch(t *testing.T) {
	pool := testenv.Postgres(t)
	s := pgstore.NewLeaseStore(pool)
	ctx := context.Background()
	if _, err := s.Claim(ctx, "k", "a/1", testTTL); err != nil {
		t.Fatal(err)
	}
	// Leave one second on the lease by the database clock.
	var before time.Time
	if err := pool.QueryRow(ctx, "UPDATE agent_leases SET expires_at = now() + interval '1 second' RETURNING expires_at").Scan(&before); err != nil {
		t.Fatal(err)
	}
	l, err := s.Claim(ctx, "k", "a/1", testTTL)
	if err != nil {
		t.Fatal(err)
	}
	if l.Epoch != 1 || l.Remaining != testTTL {
		t.Fatalf("extend = %+v, want epoch 1 remaining %v", l, testTTL)
	}
	// The row moved past its old expiry, to at most TTL from now (both on
	// the database clock; no bound on how long the statements took).
	var after time.Time
	var left time.Duration
	if err := pool.QueryRow(ctx, "SELECT expires_at, expires_at - now() FROM agent_leases WHERE agent_key = 'k'").Scan(&after, &left); err != nil {
		t.Fatal(err)
	}
	if !after.After(before) || left > testTTL {
		t.Fatalf("row expires at %v (in %v) after extension, want after %v and within %v", after, left, before, testTTL)
	}
}

func TestPostgresClaimOthersExpiredRowTakesOver(t *testing.T) {
	pool := testenv.Postgres(t)
	s := pgstore.NewLeaseStore(pool)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "INSERT INTO agent_leases VALUES ('k', 'a/1', 7, now() - interval '1 millisecond')"); err != nil {
		t.Fatal(err)
	}
	l, err := s.Claim(ctx, "k", "b/1", testTTL)
	if err != nil {
		t.Fatal(err)
	}
	if l.Owner != "b/1" || l.Epoch != 8 || l.Remaining != testTTL {
		t.Fatalf("takeover = %+v, want b/1 epoch 8 remaining %v", l, testTTL)
	}
	if owner, epoch, live := leaseRow(t, pool, "k"); owner != "b/1" || epoch != 8 || !live {
		t.Fatalf("row = %s epoch %d live %v", owner, epoch, live)
	}
}

func TestPostgresClaimOthersLiveRowReportsHolder(t *testing.T) {
	pool := testenv.Postgres(t)
	s := pgstore.NewLeaseStore(pool)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "INSERT INTO agent_leases VALUES ('k', 'a/1', 3, now() + interval '42 seconds')"); err != nil {
		t.Fatal(err)
	}
	_, err := s.Claim(ctx, "k", "b/1", testTTL)
	var held *session.LeaseHeldError
	if !errors.As(err, &held) {
		t.Fatalf("claim = %v, want *LeaseHeldError", err)
	}
	// Remaining is the database's expires_at - now(), not the caller's ttl.
	if held.Holder != "a/1" || held.Epoch != 3 || held.Remaining > 42*time.Second || held.Remaining < 40*time.Second {
		t.Fatalf("held = %+v, want a/1 epoch 3 about 42s left", held)
	}
	if owner, epoch, live := leaseRow(t, pool, "k"); owner != "a/1" || epoch != 3 || !live {
		t.Fatalf("row changed: %s epoch %d live %v", owner, epoch, live)
	}
}

func TestPostgresRelease(t *testing.T) {
	pool := testenv.Postgres(t)
	s := pgstore.NewLeaseStore(pool)
	ctx := context.Background()
	l, err := s.Claim(ctx, "k", "a/1", testTTL)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, "k", "b/1", l.Epoch); !errors.Is(err, session.ErrNotOwner) {
		t.Fatalf("release by another owner = %v, want ErrNotOwner", err)
	}
	if err := s.Release(ctx, "k", "a/1", l.Epoch); err != nil {
		t.Fatal(err)
	}
	if _, _, live := leaseRow(t, pool, "k"); live {
		t.Fatal("released lease is still live on the database clock")
	}
	if err := s.Release(ctx, "k", "a/1", l.Epoch); !errors.Is(err, session.ErrNotOwner) {
		t.Fatalf("second release = %v, want ErrNotOwner", err)
	}
	n, err := s.Claim(ctx, "k", "b/1", testTTL)
	if err != nil || n.Epoch != 2 {
		t.Fatalf("claim after release = %+v, %v; want epoch 2 at once", n, err)
	}
}

func TestPostgresRestartedNodeCannotExtendOldIncarnation(t *testing.T) {
	pool := testenv.Postgres(t)
	s := pgstore.NewLeaseStore(pool)
	ctx := context.Background()
	if _, err := s.Claim(ctx, "k", "node-a/7f3e", testTTL); err != nil {
		t.Fatal(err)
	}
	// node-a restarts with a new incarnation id.
	_, err := s.Claim(ctx, "k", "node-a/91c2", testTTL)
	var held *session.LeaseHeldError
	if !errors.As(err, &held) || held.Holder != "node-a/7f3e" || held.Epoch != 1 {
		t.Fatalf("claim by the new incarnation = %v, want held by node-a/7f3e epoch 1", err)
	}
	if err := s.Release(ctx, "k", "node-a/91c2", 1); !errors.Is(err, session.ErrNotOwner) {
		t.Fatalf("release by the new incarnation = %v, want ErrNotOwner", err)
	}
	shiftLeases(t, pool, "", testTTL)
	l, err := s.Claim(ctx, "k", "node-a/91c2", testTTL)
	if err != nil || l.Epoch != 2 || l.Owner != "node-a/91c2" {
		t.Fatalf("claim after expiry = %+v, %v; want node-a/91c2 epoch 2", l, err)
	}
}

// TestPostgresClaimStorm has 50 goroutines acting for 5 owners claim one key
// at once, round after round with the lease expired in between: each round
// has exactly one owner, at the next epoch, and every other claimer learns
// that owner.
func TestPostgresClaimStorm(t *testing.T) {
	pool := testenv.Postgres(t)
	s := pgstore.NewLeaseStore(pool)
	ctx := context.Background()
	const goroutines, owners, rounds = 50, 5, 6
	for round := int64(1); round <= rounds; round++ {
		type result struct {
			owner string
			lease session.Lease
			err   error
		}
		results := make([]result, goroutines)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range goroutines {
			wg.Go(func() {
				owner := fmt.Sprintf("n%d/1", i%owners)
				<-start
				l, err := s.Claim(ctx, "k", owner, time.Minute)
				results[i] = result{owner, l, err}
			})
		}
		close(start)
		wg.Wait()

		winners := map[string]bool{}
		for _, r := range results {
			if r.err == nil {
				winners[r.lease.Owner] = true
				if r.lease.Epoch != round || r.lease.Owner != r.owner {
					t.Fatalf("round %d: %s won %+v, want epoch %d", round, r.owner, r.lease, round)
				}
			}
		}
		if len(winners) != 1 {
			t.Fatalf("round %d: winners %v, want exactly one owner", round, winners)
		}
		for _, r := range results {
			var held *session.LeaseHeldError
			switch {
			case r.err == nil:
			case errors.As(r.err, &held):
				if !winners[held.Holder] || held.Epoch != round || held.Remaining <= 0 {
					t.Fatalf("round %d: %s told %+v, want the winner at epoch %d", round, r.owner, held, round)
				}
			default:
				t.Fatalf("round %d: %s: %v", round, r.owner, r.err)
			}
		}
		if _, epoch, live := leaseRow(t, pool, "k"); epoch != round || !live {
			t.Fatalf("round %d: row epoch %d live %v", round, epoch, live)
		}
		shiftLeases(t, pool, "", time.Minute)
	}
}

func BenchmarkPostgresClaim(b *testing.B) {
	pool := testenv.Postgres(b)
	s := pgstore.NewLeaseStore(pool)
	ctx := context.Background()
	b.Run("extend", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.Claim(ctx, "extend", "a/1", time.Minute); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("held", func(b *testing.B) {
		if _, err := s.Claim(ctx, "held", "a/1", time.Hour); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := s.Claim(ctx, "held", "b/1", time.Minute); !errors.As(err, new(*session.LeaseHeldError)) {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel-keys", func(b *testing.B) {
		var next sync.Mutex
		n := 0
		b.RunParallel(func(pb *testing.PB) {
			next.Lock()
			n++
			key := fmt.Sprintf("par-%d", n)
			next.Unlock()
			for pb.Next() {
				if _, err := s.Claim(ctx, key, "a/1", time.Minute); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("parallel-one-key", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_, err := s.Claim(ctx, "contended", "a/1", time.Minute)
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
