package pgstore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/relaygw/relay/internal/testkit/testenv"
	"github.com/relaygw/relay/session/pgstore"
)

// TryClaim reports whether the store would accept a claim and changes
// nothing: no row for a new key, the row of a held key as it was, and a
// CHECK constraint that refuses the claim's row is reported, as Claim
// reports it.
func TestPostgresTryClaimChangesNothing(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	s := pgstore.NewLeaseStore(pool)
	if err := s.TryClaim(ctx, "new", "a/1", testTTL); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM agent_leases").Scan(&n); err != nil || n != 0 {
		t.Fatalf("rows after TryClaim of a new key: %d, %v; want none", n, err)
	}
	if _, err := s.Claim(ctx, "held", "a/1", testTTL); err != nil {
		t.Fatal(err)
	}
	shiftLeases(t, pool, "held", 2*testTTL) // expired: a claim by b would take it over
	if err := s.TryClaim(ctx, "held", "b/1", testTTL); err != nil {
		t.Fatal(err)
	}
	if owner, epoch, live := leaseRow(t, pool, "held"); owner != "a/1" || epoch != 1 || live {
		t.Fatalf("row after TryClaim: %s epoch %d live %v; want a/1's expired row at epoch 1", owner, epoch, live)
	}
	if _, err := pool.Exec(ctx, "ALTER TABLE agent_leases ADD CONSTRAINT no_x CHECK (agent_key NOT LIKE 'x-%') NOT VALID"); err != nil {
		t.Fatal(err)
	}
	err := s.TryClaim(ctx, "x-1", "a/1", testTTL)
	if err == nil || !strings.Contains(err.Error(), "no_x") {
		t.Fatalf("TryClaim refused by a CHECK constraint: %v, want the constraint's error", err)
	}
	if _, cerr := s.Claim(ctx, "x-1", "a/1", testTTL); cerr == nil {
		t.Fatal("Claim succeeded where TryClaim failed")
	}
}
