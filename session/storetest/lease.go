package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/relaygw/relay/session"
)

// LeaseFixture is one fresh lease store with no rows.
type LeaseFixture struct {
	Store session.LeaseStore
	// Advance makes d of store time pass for every lease of the store: a
	// lease with Remaining r before has about r-d after.
	Advance func(t *testing.T, d time.Duration)
}

// LeaseStoreSuite checks the four-case claim, release and get rules
// (LeaseStore's doc, docs/OWNERSHIP.md "Storage") against the stores newFixture
// returns; it calls newFixture once per subtest.
func LeaseStoreSuite(t *testing.T, newFixture func(t *testing.T) LeaseFixture) {
	const ttl = 15 * time.Second
	ctx := context.Background()

	t.Run("NoRowClaimsEpochOne", func(t *testing.T) {
		f := newFixture(t)
		l := mustClaim(t, f.Store, "k", "a/1", ttl)
		want := session.Lease{Key: "k", Owner: "a/1", Epoch: 1, Remaining: ttl}
		if l != want {
			t.Fatalf("claim = %+v, want %+v", l, want)
		}
	})

	t.Run("OwnLiveRowExtendsSameEpoch", func(t *testing.T) {
		f := newFixture(t)
		mustClaim(t, f.Store, "k", "a/1", ttl)
		f.Advance(t, 10*time.Second)
		l := mustClaim(t, f.Store, "k", "a/1", ttl)
		if l.Epoch != 1 || l.Owner != "a/1" || l.Remaining != ttl || l.Previous != "a/1" {
			t.Fatalf("re-claim = %+v, want epoch 1, owner a/1, remaining %v, previous a/1", l, ttl)
		}
		// The extension counts from the re-claim, not from the first claim.
		f.Advance(t, 10*time.Second)
		g := mustGet(t, f.Store, "k")
		if g.Remaining <= 0 || g.Remaining > 5*time.Second {
			t.Fatalf("remaining after extension and 10s = %v, want in (0, 5s]", g.Remaining)
		}
	})

	t.Run("OthersExpiredRowTakesOverEpochPlusOne", func(t *testing.T) {
		f := newFixture(t)
		mustClaim(t, f.Store, "k", "a/1", ttl)
		f.Advance(t, ttl)
		l := mustClaim(t, f.Store, "k", "b/1", ttl)
		want := session.Lease{Key: "k", Owner: "b/1", Epoch: 2, Remaining: ttl, Previous: "a/1"}
		if l != want {
			t.Fatalf("takeover = %+v, want %+v", l, want)
		}
	})

	t.Run("OthersLiveRowReportsHolder", func(t *testing.T) {
		f := newFixture(t)
		mustClaim(t, f.Store, "k", "a/1", ttl)
		f.Advance(t, 4*time.Second)
		_, err := f.Store.Claim(ctx, "k", "b/1", ttl)
		var held *session.LeaseHeldError
		if !errors.As(err, &held) {
			t.Fatalf("claim of a live row = %v, want *LeaseHeldError", err)
		}
		if held.Key != "k" || held.Holder != "a/1" || held.Epoch != 1 {
			t.Fatalf("held = %+v, want key k, holder a/1, epoch 1", held)
		}
		if held.Remaining <= 0 || held.Remaining > ttl-4*time.Second {
			t.Fatalf("held remaining = %v, want in (0, %v]", held.Remaining, ttl-4*time.Second)
		}
		// Nothing changed.
		g := mustGet(t, f.Store, "k")
		if g.Owner != "a/1" || g.Epoch != 1 {
			t.Fatalf("row after refused claim = %+v", g)
		}
	})

	t.Run("OwnExpiredRowReclaimsEpochPlusOne", func(t *testing.T) {
		f := newFixture(t)
		mustClaim(t, f.Store, "k", "a/1", ttl)
		f.Advance(t, ttl+time.Second)
		l := mustClaim(t, f.Store, "k", "a/1", ttl)
		if l.Epoch != 2 || l.Owner != "a/1" {
			t.Fatalf("re-claim after expiry = %+v, want epoch 2", l)
		}
	})

	t.Run("RestartedNodeCannotExtendOldIncarnation", func(t *testing.T) {
		f := newFixture(t)
		mustClaim(t, f.Store, "k", "node-a/inc-1", ttl)
		_, err := f.Store.Claim(ctx, "k", "node-a/inc-2", ttl)
		var held *session.LeaseHeldError
		if !errors.As(err, &held) || held.Holder != "node-a/inc-1" {
			t.Fatalf("claim by new incarnation = %v, want held by node-a/inc-1", err)
		}
		f.Advance(t, ttl)
		l := mustClaim(t, f.Store, "k", "node-a/inc-2", ttl)
		if l.Epoch != 2 || l.Previous != "node-a/inc-1" {
			t.Fatalf("takeover by new incarnation = %+v, want epoch 2, previous node-a/inc-1", l)
		}
	})

	t.Run("ExpiryIsInclusive", func(t *testing.T) {
		f := newFixture(t)
		mustClaim(t, f.Store, "k", "a/1", ttl)
		f.Advance(t, ttl)
		g := mustGet(t, f.Store, "k")
		if g.Remaining > 0 {
			t.Fatalf("remaining at expiry = %v, want <= 0", g.Remaining)
		}
	})

	t.Run("ReleaseHandsBackAtOnce", func(t *testing.T) {
		f := newFixture(t)
		l := mustClaim(t, f.Store, "k", "a/1", ttl)
		if err := f.Store.Release(ctx, "k", "a/1", l.Epoch); err != nil {
			t.Fatalf("release: %v", err)
		}
		if g := mustGet(t, f.Store, "k"); g.Remaining > 0 || g.Owner != "a/1" || g.Epoch != 1 {
			t.Fatalf("row after release = %+v, want a/1 epoch 1 expired", g)
		}
		n := mustClaim(t, f.Store, "k", "b/1", ttl)
		if n.Epoch != 2 || n.Owner != "b/1" {
			t.Fatalf("claim after release = %+v, want b/1 epoch 2", n)
		}
	})

	t.Run("ReleaseRefusesMismatch", func(t *testing.T) {
		f := newFixture(t)
		if err := f.Store.Release(ctx, "none", "a/1", 1); !errors.Is(err, session.ErrNotOwner) {
			t.Fatalf("release of no row = %v, want ErrNotOwner", err)
		}
		l := mustClaim(t, f.Store, "k", "a/1", ttl)
		if err := f.Store.Release(ctx, "k", "b/1", l.Epoch); !errors.Is(err, session.ErrNotOwner) {
			t.Fatalf("release by another owner = %v, want ErrNotOwner", err)
		}
		if err := f.Store.Release(ctx, "k", "a/1", l.Epoch+1); !errors.Is(err, session.ErrNotOwner) {
			t.Fatalf("release with another epoch = %v, want ErrNotOwner", err)
		}
		if g := mustGet(t, f.Store, "k"); g.Remaining <= 0 {
			t.Fatalf("refused releases expired the lease: %+v", g)
		}
		if err := f.Store.Release(ctx, "k", "a/1", l.Epoch); err != nil {
			t.Fatalf("release: %v", err)
		}
		if err := f.Store.Release(ctx, "k", "a/1", l.Epoch); !errors.Is(err, session.ErrNotOwner) {
			t.Fatalf("second release = %v, want ErrNotOwner", err)
		}
	})

	t.Run("ReleaseOfLapsedLeaseRefused", func(t *testing.T) {
		f := newFixture(t)
		l := mustClaim(t, f.Store, "k", "a/1", ttl)
		f.Advance(t, ttl+time.Second)
		if err := f.Store.Release(ctx, "k", "a/1", l.Epoch); !errors.Is(err, session.ErrNotOwner) {
			t.Fatalf("release of lapsed lease = %v, want ErrNotOwner", err)
		}
	})

	t.Run("GetReadsWithoutChanging", func(t *testing.T) {
		f := newFixture(t)
		if _, ok, err := f.Store.Get(ctx, "k"); err != nil || ok {
			t.Fatalf("get of no row = ok %v err %v, want false nil", ok, err)
		}
		mustClaim(t, f.Store, "k", "a/1", ttl)
		f.Advance(t, ttl+time.Second)
		g := mustGet(t, f.Store, "k")
		if g.Owner != "a/1" || g.Epoch != 1 || g.Remaining >= 0 {
			t.Fatalf("get of expired row = %+v, want a/1 epoch 1 negative remaining", g)
		}
		if g2 := mustGet(t, f.Store, "k"); g2.Epoch != 1 || g2.Owner != "a/1" {
			t.Fatalf("second get = %+v", g2)
		}
	})

	t.Run("KeysAreIndependent", func(t *testing.T) {
		f := newFixture(t)
		mustClaim(t, f.Store, "k1", "a/1", ttl)
		l := mustClaim(t, f.Store, "k2", "b/1", ttl)
		if l.Epoch != 1 || l.Owner != "b/1" {
			t.Fatalf("claim of second key = %+v", l)
		}
	})

	t.Run("ConcurrentClaimsOneWinner", func(t *testing.T) {
		f := newFixture(t)
		const n = 8
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			winners []string
			errs    []error
		)
		for i := range n {
			wg.Go(func() {
				owner := fmt.Sprintf("n%d/1", i)
				l, err := f.Store.Claim(ctx, "k", owner, ttl)
				mu.Lock()
				defer mu.Unlock()
				var held *session.LeaseHeldError
				switch {
				case err == nil:
					winners = append(winners, l.Owner)
				case !errors.As(err, &held):
					errs = append(errs, err)
				}
			})
		}
		wg.Wait()
		if len(errs) > 0 || len(winners) != 1 {
			t.Fatalf("winners %v errors %v, want exactly one winner", winners, errs)
		}
		if g := mustGet(t, f.Store, "k"); g.Owner != winners[0] || g.Epoch != 1 {
			t.Fatalf("row %+v, want winner %s epoch 1", g, winners[0])
		}
	})
}

func mustClaim(t *testing.T, s session.LeaseStore, key, owner string, ttl time.Duration) session.Lease {
	t.Helper()
	l, err := s.Claim(context.Background(), key, owner, ttl)
	if err != nil {
		t.Fatalf("claim %s by %s: %v", key, owner, err)
	}
	return l
}

func mustGet(t *testing.T, s session.LeaseStore, key string) session.Lease {
	t.Helper()
	l, ok, err := s.Get(context.Background(), key)
	if err != nil || !ok {
		t.Fatalf("get %s: ok %v err %v", key, ok, err)
	}
	return l
}
