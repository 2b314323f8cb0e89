package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"pgregory.net/rapid"

	"github.com/relaygw/relay/internal/testkit/testenv"
	"github.com/relaygw/relay/session"
	"github.com/relaygw/relay/session/pgstore"
)

// fenceModel is what the property test expects the stores to hold for one
// run. Time is simulated: now advances only when the test shifts every
// expires_at into the past by the same amount, and the test steps take a
// few milliseconds against margins of whole seconds.
type fenceModel struct {
	now time.Duration // simulated time since the run started
	// belief[owner][key] is the lease an owner believes it holds: its epoch
	// and when it lapses in simulated time (now at the claim + Remaining).
	belief map[string]map[string]heldLease
	// lastEpoch[owner][key] is the newest epoch the owner ever held, live or
	// not: a writer that stalled keeps writing with it.
	lastEpoch map[string]map[string]int64
	rowEpoch  map[string]int64 // epoch of the row, 0 = no row
	cpEpoch   map[string]int64 // epoch of the stored checkpoint, 0 = none
	// Highest epochs read back from the database so far.
	seenRowEpoch, seenCpEpoch map[string]int64
}

type heldLease struct {
	epoch int64
	until time.Duration
}

// liveHolder returns the owner that believes it holds key now, if any.
func (m *fenceModel) liveHolder(key string) (string, heldLease, bool) {
	for owner, keys := range m.belief {
		if h, ok := keys[key]; ok && h.until > m.now {
			return owner, h, true
		}
	}
	return "", heldLease{}, false
}

// TestPostgresFenceProperties runs random interleavings of claims, renewals,
// releases, checkpoint writes and the passing of time for four owners (three
// nodes, one of them restarted under a new incarnation) on two keys, and
// after every step checks on the database clock that:
//   - at most one owner believes it holds a live lease for a key, and that
//     owner is the row's owner at the row's epoch, live in SQL;
//   - epochs of lease rows and checkpoints never go down;
//   - a checkpoint lands exactly when its epoch is not below the stored one,
//     so a stale writer is fenced.
//
// Every claim's outcome is predicted by the four-case rule and checked.
func TestPostgresFenceProperties(t *testing.T) {
	pool := testenv.Postgres(t)
	leases := pgstore.NewLeaseStore(pool)
	checkpoints := pgstore.NewSessionStore(pool)
	ctx := context.Background()
	const ttl = 100 * time.Second
	owners := []string{"n1/i1", "n2/i1", "n3/i1", "n1/i2"}
	var runs atomic.Int64

	rapid.Check(t, func(rt *rapid.T) {
		prefix := fmt.Sprintf("run%d:", runs.Add(1))
		keys := []string{prefix + "a", prefix + "b"}
		m := &fenceModel{
			belief:    map[string]map[string]heldLease{},
			lastEpoch: map[string]map[string]int64{},
			rowEpoch:  map[string]int64{},
			cpEpoch:   map[string]int64{},

			seenRowEpoch: map[string]int64{},
			seenCpEpoch:  map[string]int64{},
		}
		for _, o := range owners {
			m.belief[o] = map[string]heldLease{}
			m.lastEpoch[o] = map[string]int64{}
		}
		ownerGen := rapid.SampledFrom(owners)
		keyGen := rapid.SampledFrom(keys)

		claim := func(rt *rapid.T, owner, key string) {
			holder, h, held := m.liveHolder(key)
			l, err := leases.Claim(ctx, key, owner, ttl)
			switch {
			case held && holder != owner:
				var he *session.LeaseHeldError
				if !errors.As(err, &he) || he.Holder != holder || he.Epoch != h.epoch {
					rt.Fatalf("claim %s by %s = %+v, %v; want held by %s epoch %d", key, owner, l, err, holder, h.epoch)
				}
				return
			case err != nil:
				rt.Fatalf("claim %s by %s: %v", key, owner, err)
			case held: // own live lease: renewal keeps the epoch
				if l.Epoch != h.epoch {
					rt.Fatalf("renewal of %s by %s = epoch %d, want %d", key, owner, l.Epoch, h.epoch)
				}
			default: // no live lease: fresh claim or takeover
				if want := m.rowEpoch[key] + 1; l.Epoch != want {
					rt.Fatalf("claim of free %s by %s = epoch %d, want %d", key, owner, l.Epoch, want)
				}
			}
			if l.Remaining != ttl {
				rt.Fatalf("claim remaining = %v, want %v", l.Remaining, ttl)
			}
			m.rowEpoch[key] = l.Epoch
			m.belief[owner][key] = heldLease{epoch: l.Epoch, until: m.now + l.Remaining}
			m.lastEpoch[owner][key] = l.Epoch
		}

		rt.Repeat(map[string]func(*rapid.T){
			"claim": func(rt *rapid.T) { claim(rt, ownerGen.Draw(rt, "owner"), keyGen.Draw(rt, "key")) },
			"renew": func(rt *rapid.T) {
				owner, key := ownerGen.Draw(rt, "owner"), keyGen.Draw(rt, "key")
				if _, ok := m.belief[owner][key]; !ok {
					rt.Skip("owner holds nothing to renew")
				}
				claim(rt, owner, key)
			},
			"release": func(rt *rapid.T) {
				owner, key := ownerGen.Draw(rt, "owner"), keyGen.Draw(rt, "key")
				h, ok := m.belief[owner][key]
				if !ok {
					rt.Skip("owner holds nothing to release")
				}
				err := leases.Release(ctx, key, owner, h.epoch)
				if h.until > m.now {
					if err != nil {
						rt.Fatalf("release of live %s by %s epoch %d: %v", key, owner, h.epoch, err)
					}
				} else if !errors.Is(err, session.ErrNotOwner) {
					rt.Fatalf("release of lapsed %s by %s = %v, want ErrNotOwner", key, owner, err)
				}
				delete(m.belief[owner], key)
			},
			"checkpoint": func(rt *rapid.T) {
				owner, key := ownerGen.Draw(rt, "owner"), keyGen.Draw(rt, "key")
				epoch, ok := m.lastEpoch[owner][key]
				if !ok {
					rt.Skip("owner never held the key")
				}
				_, err := checkpoints.Thaw(ctx, key, epoch, session.ThawQuery{})
				if epoch >= m.cpEpoch[key] {
					if err != nil {
						rt.Fatalf("checkpoint %s by %s epoch %d (stored %d): %v", key, owner, epoch, m.cpEpoch[key], err)
					}
					m.cpEpoch[key] = epoch
				} else if !errors.Is(err, session.ErrFenced) {
					rt.Fatalf("stale checkpoint %s by %s epoch %d (stored %d) = %v, want ErrFenced", key, owner, epoch, m.cpEpoch[key], err)
				}
			},
			"time passes": func(rt *rapid.T) {
				// Whole seconds: a lease the model calls live has at least
				// a second left on the database clock.
				d := time.Duration(rapid.IntRange(1, 110).Draw(rt, "seconds")) * time.Second
				shiftLeases(rt, pool, prefix, d)
				m.now += d
			},
			"": func(rt *rapid.T) { checkFenceInvariants(rt, pool, m, keys) },
		})
	})
}

func checkFenceInvariants(rt *rapid.T, pool *pgxpool.Pool, m *fenceModel, keys []string) {
	ctx := context.Background()
	for _, key := range keys {
		var believers []string
		for owner, held := range m.belief {
			if h, ok := held[key]; ok && h.until > m.now {
				believers = append(believers, owner)
			}
		}
		if len(believers) > 1 {
			rt.Fatalf("%s: owners %v all believe they hold a live lease", key, believers)
		}
		var (
			owner string
			epoch int64
			live  bool
		)
		err := pool.QueryRow(ctx,
			"SELECT owner_node, epoch, expires_at > now() FROM agent_leases WHERE agent_key = $1", key).Scan(&owner, &epoch, &live)
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil
		}
		if err != nil {
			rt.Fatalf("read lease %s: %v", key, err)
		}
		if epoch < m.seenRowEpoch[key] || epoch != m.rowEpoch[key] {
			rt.Fatalf("%s: row epoch %d, model %d, highest seen %d", key, epoch, m.rowEpoch[key], m.seenRowEpoch[key])
		}
		m.seenRowEpoch[key] = epoch
		switch {
		case len(believers) == 1:
			h := m.belief[believers[0]][key]
			if !live || owner != believers[0] || epoch != h.epoch {
				rt.Fatalf("%s: %s believes it holds epoch %d; database has %s epoch %d live %v", key, believers[0], h.epoch, owner, epoch, live)
			}
		case live:
			rt.Fatalf("%s: live lease of %s epoch %d that no owner believes it holds", key, owner, epoch)
		}

		var cp int64
		err = pool.QueryRow(ctx, "SELECT epoch FROM session_state WHERE key = $1", key).Scan(&cp)
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil
		}
		if err != nil {
			rt.Fatalf("read checkpoint %s: %v", key, err)
		}
		if cp < m.seenCpEpoch[key] || cp != m.cpEpoch[key] {
			rt.Fatalf("%s: checkpoint epoch %d, model %d, highest seen %d", key, cp, m.cpEpoch[key], m.seenCpEpoch[key])
		}
		m.seenCpEpoch[key] = cp
	}
}
