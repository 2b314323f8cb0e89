package session

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// MemoryOption configures an in-memory store (lease, session or replay).
type MemoryOption func(*memoryOptions)

type memoryOptions struct {
	now func() time.Time
}

func newMemoryOptions(opts []MemoryOption) memoryOptions {
	o := memoryOptions{now: time.Now}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// WithMemoryClock makes an in-memory store read time from now instead of
// time.Now. The store only ever subtracts two readings of now, so now must be
// monotonic (time.Now readings carry a monotonic component; ManualClock.Now
// only moves forward).
func WithMemoryClock(now func() time.Time) MemoryOption {
	return func(o *memoryOptions) {
		if now != nil {
			o.now = now
		}
	}
}

// ManualClock is a clock that moves only when told to. Hand its Now to
// WithMemoryClock to make store time pass in tests without sleeping.
// The zero value starts at the zero time and is ready to use.
type ManualClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewManualClock returns a clock reading start.
func NewManualClock(start time.Time) *ManualClock { return &ManualClock{now: start} }

// Now returns the clock's current reading.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d; a negative d is ignored, so readings
// never go backwards.
func (c *ManualClock) Advance(d time.Duration) {
	if d <= 0 {
		return
	}
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// MemoryLeaseStore is a LeaseStore kept in process memory, for the embedded
// single-node mode and for tests. It follows the same four-case rule as the
// Postgres store, decided under one mutex on the store's own monotonic clock,
// which plays the part of the database clock. Safe for concurrent use.
type MemoryLeaseStore struct {
	now  func() time.Time
	mu   sync.Mutex
	rows map[string]memoryLease
}

type memoryLease struct {
	owner   string
	epoch   int64
	expires time.Time
}

var _ LeaseStore = (*MemoryLeaseStore)(nil)

// NewMemoryLeaseStore returns an empty in-memory lease store.
func NewMemoryLeaseStore(opts ...MemoryOption) *MemoryLeaseStore {
	o := newMemoryOptions(opts)
	return &MemoryLeaseStore{now: o.now, rows: make(map[string]memoryLease)}
}

// Claim implements LeaseStore with the four-case rule:
//
//	no row                        → owner, epoch 1, expires now+ttl;
//	owner's own live row          → expires now+ttl, epoch unchanged;
//	any expired row (own or not)  → owner, epoch+1, expires now+ttl;
//	another owner's live row      → unchanged, *LeaseHeldError.
//
// A lease is live while now < expires. ttl must be positive.
func (s *MemoryLeaseStore) Claim(ctx context.Context, key, owner string, ttl time.Duration) (Lease, error) {
	if err := ctx.Err(); err != nil {
		return Lease{}, fmt.Errorf("session: claim %q: %w", key, err)
	}
	if ttl <= 0 {
		return Lease{}, fmt.Errorf("session: claim %q: ttl %v is not positive", key, ttl)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	row, found := s.rows[key]
	live := found && now.Before(row.expires)
	previous := row.owner
	switch {
	case !found:
		row = memoryLease{owner: owner, epoch: 1}
	case !live:
		row.owner = owner
		row.epoch++
	case row.owner != owner:
		return Lease{}, &LeaseHeldError{Key: key, Holder: row.owner, Epoch: row.epoch, Remaining: row.expires.Sub(now)}
	}
	row.expires = now.Add(ttl)
	s.rows[key] = row
	return Lease{Key: key, Owner: owner, Epoch: row.epoch, Remaining: ttl, Previous: previous}, nil
}

// Release implements LeaseStore: the lease expires now if owner and epoch
// match a live row; otherwise nothing changes and ErrNotOwner is returned.
func (s *MemoryLeaseStore) Release(ctx context.Context, key, owner string, epoch int64) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("session: release %q: %w", key, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	row, found := s.rows[key]
	if !found || row.owner != owner || row.epoch != epoch || !now.Before(row.expires) {
		return fmt.Errorf("session: release %q epoch %d: %w", key, epoch, ErrNotOwner)
	}
	row.expires = now
	s.rows[key] = row
	return nil
}

// Get implements LeaseStore. Remaining is negative or zero for an expired row.
func (s *MemoryLeaseStore) Get(ctx context.Context, key string) (Lease, bool, error) {
	if err := ctx.Err(); err != nil {
		return Lease{}, false, fmt.Errorf("session: get lease %q: %w", key, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	row, found := s.rows[key]
	if !found {
		return Lease{}, false, nil
	}
	return Lease{Key: key, Owner: row.owner, Epoch: row.epoch, Remaining: row.expires.Sub(s.now())}, true, nil
}
