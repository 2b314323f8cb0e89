// Package pgstore holds the Postgres adapters of the session stores: the
// lease store (LeaseStore) and the session store (SessionStore), on the
// tables of migrations/. Both pass the contract suites of session/storetest.
package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/relaygw/relay/session"
)

// LeaseStore is the cluster session.LeaseStore: one row per session in
// agent_leases (migrations/00001), every decision taken by one statement on
// the database clock (the seed's "Ownership: the lease"). Go never compares
// its own clock with expires_at; Remaining is expires_at - now() computed by
// the database.
//
// now() is the start time of the statement's transaction. A claim that waits
// for a row lock therefore computes an expiry a little earlier than the
// moment it commits and judges the old row live a little longer: both err
// on the safe side. Remaining counts from that start, so a caller that
// starts its own monotonic countdown when it sent the claim never outlives
// the row. Safe for concurrent use.
type LeaseStore struct {
	pool *pgxpool.Pool
}

var _ session.LeaseStore = (*LeaseStore)(nil)

// NewLeaseStore returns a lease store on pool. The pool's
// connections must resolve agent_leases (search_path).
func NewLeaseStore(pool *pgxpool.Pool) *LeaseStore {
	return &LeaseStore{pool: pool}
}

// claimSQL is the four-case claim in one statement. The upsert (up) changes
// the row only when it is the caller's own or has expired; an expired row
// moves to epoch+1, a live own row keeps its epoch. When the upsert changes
// nothing, the statement returns the row as it read it (cur), so the caller
// learns the holder without another round trip.
//
// cur is read from the statement's snapshot, while the upsert waits for and
// re-checks the newest committed row. When a concurrent claim commits in
// between, cur can be stale: missing, the caller's own, or expired although
// the upsert refused. Claim then runs the statement again under a fresh
// snapshot.
//
// $1 agent_key, $2 owner, $3 ttl (interval). Columns: won, owner, epoch,
// remaining in microseconds (database clock), and the owner cur read (""
// for no row; Lease.Previous).
const claimSQL = `
WITH cur AS (
    SELECT owner_node, epoch, expires_at FROM agent_leases WHERE agent_key = $1
), up AS (
    INSERT INTO agent_leases AS l (agent_key, owner_node, epoch, expires_at)
    VALUES ($1, $2, 1, now() + $3::interval)
    ON CONFLICT (agent_key) DO UPDATE SET
        owner_node = EXCLUDED.owner_node,
        epoch      = CASE WHEN l.expires_at <= now() THEN l.epoch + 1 ELSE l.epoch END,
        expires_at = EXCLUDED.expires_at
    WHERE l.owner_node = EXCLUDED.owner_node OR l.expires_at <= now()
    RETURNING owner_node, epoch, expires_at
)
SELECT true, owner_node, epoch, (extract(epoch FROM expires_at - now()) * 1000000)::bigint,
       COALESCE((SELECT owner_node FROM cur), '') FROM up
UNION ALL
SELECT false, owner_node, epoch, (extract(epoch FROM expires_at - now()) * 1000000)::bigint, owner_node FROM cur
WHERE NOT EXISTS (SELECT 1 FROM up)`

// releaseSQL expires a live lease now, only for its owner and epoch.
const releaseSQL = `
UPDATE agent_leases SET expires_at = now()
WHERE agent_key = $1 AND owner_node = $2 AND epoch = $3 AND expires_at > now()`

const getSQL = `
SELECT owner_node, epoch, (extract(epoch FROM expires_at - now()) * 1000000)::bigint
FROM agent_leases WHERE agent_key = $1`

// claimAttempts bounds how often Claim re-runs the statement after reading
// a stale row (see claimSQL). One re-run suffices unless the row keeps
// changing hands within milliseconds.
const claimAttempts = 4

// Claim implements session.LeaseStore. ttl must be positive; it is stored with
// microsecond precision.
func (s *LeaseStore) Claim(ctx context.Context, key, owner string, ttl time.Duration) (session.Lease, error) {
	if ttl <= 0 {
		return session.Lease{}, fmt.Errorf("session: claim %q: ttl %v is not positive", key, ttl)
	}
	for range claimAttempts {
		var (
			won      bool
			holder   string
			epoch    int64
			micros   int64
			previous string
		)
		err := s.pool.QueryRow(ctx, claimSQL, key, owner, ttl).Scan(&won, &holder, &epoch, &micros, &previous)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return session.Lease{}, fmt.Errorf("session: claim %q: %w", key, err)
		}
		remaining := time.Duration(micros) * time.Microsecond
		switch {
		case err == nil && won:
			return session.Lease{Key: key, Owner: holder, Epoch: epoch, Remaining: remaining, Previous: previous}, nil
		case err != nil, holder == owner, remaining <= 0:
			// No row, or a row the upsert would have taken: cur was stale.
			continue
		default:
			return session.Lease{}, &session.LeaseHeldError{Key: key, Holder: holder, Epoch: epoch, Remaining: remaining}
		}
	}
	return session.Lease{}, fmt.Errorf("session: claim %q: lease row changed under %d attempts", key, claimAttempts)
}

// TryClaim runs Claim's statement for key and owner in a transaction that
// it rolls back: it reports whether the store accepts that lease write now
// (privileges, a read-only database, constraints, triggers) and changes
// nothing. A lease another owner holds is no error. The gateway's
// readiness probe uses it.
func (s *LeaseStore) TryClaim(ctx context.Context, key, owner string, ttl time.Duration) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("session: try claim %q: %w", key, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	rows, err := tx.Query(ctx, claimSQL, key, owner, ttl)
	if err != nil {
		return fmt.Errorf("session: try claim %q: %w", key, err)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("session: try claim %q: %w", key, err)
	}
	return nil
}

// Release implements session.LeaseStore.
func (s *LeaseStore) Release(ctx context.Context, key, owner string, epoch int64) error {
	tag, err := s.pool.Exec(ctx, releaseSQL, key, owner, epoch)
	if err != nil {
		return fmt.Errorf("session: release %q: %w", key, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("session: release %q epoch %d: %w", key, epoch, session.ErrNotOwner)
	}
	return nil
}

// Get implements session.LeaseStore.
func (s *LeaseStore) Get(ctx context.Context, key string) (session.Lease, bool, error) {
	l := session.Lease{Key: key}
	var micros int64
	err := s.pool.QueryRow(ctx, getSQL, key).Scan(&l.Owner, &l.Epoch, &micros)
	if errors.Is(err, pgx.ErrNoRows) {
		return session.Lease{}, false, nil
	}
	if err != nil {
		return session.Lease{}, false, fmt.Errorf("session: get lease %q: %w", key, err)
	}
	l.Remaining = time.Duration(micros) * time.Microsecond
	return l, true, nil
}
