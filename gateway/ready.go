package gateway

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
	"github.com/relaygw/relay/muster"
	"go.uber.org/zap"
)

// Readiness (README "HTTP API", docs/ARCHITECTURE.md "Readiness"): a node is
// ready when it can do its job, which a probe round checks with real
// round trips to every dependency it has:
//
//   - nats: the connection is up and a flush (PING/PONG) answers;
//   - lease_store: a no-op UPDATE of the lease table is allowed (Postgres
//     checks the privilege, so a revoked or read-only store fails);
//   - replay_store: a SET with a short expiry on a key of the node's own
//     succeeds (a read-only replica answers READONLY);
//   - muster: the sessions scope is Ready.
//
// Hysteresis: a ready node turns unready after readyFailRounds failing rounds
// in a row and back after readyOKRounds good rounds in a row, so one slow
// answer does not flap it and a recovering dependency proves itself first.
// Until its first good round the node is unready ("starting"). Rounds run
// every READY_INTERVAL (every readyFastInterval while unready), each check
// bounded by the interval (at least readyMinTimeout).
const (
	readyFailRounds   = 2
	readyOKRounds     = 3
	readyFastInterval = 100 * time.Millisecond
	readyMinTimeout   = 500 * time.Millisecond
)

// readiness holds the outcome of the probe rounds.
type readiness struct {
	mu      sync.Mutex
	ready   bool
	started bool              // a round has passed once
	reasons map[string]string // failing checks of the last round: check → error
	streak  int               // rounds in a row that disagree with ready
}

// state returns whether the node is ready and, when not, why (sorted
// "check: error" entries; "starting" before the first good round).
func (r *readiness) state() (bool, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ready {
		return true, nil
	}
	if !r.started && len(r.reasons) == 0 {
		return false, []string{"starting: no probe round has passed yet"}
	}
	out := make([]string, 0, len(r.reasons))
	for _, k := range readyChecks {
		if v, ok := r.reasons[k]; ok {
			out = append(out, k+": "+v)
		}
	}
	if len(out) == 0 { // recovering: the checks pass, the streak is not long enough yet
		out = append(out, fmt.Sprintf("recovering: %d of %d good probe rounds", r.streak, readyOKRounds))
	}
	return false, out
}

// readyChecks names the checks in report order.
var readyChecks = []string{"nats", "lease_store", "replay_store", "muster"}

// record applies one round's failures (empty: all passed) with hysteresis
// and reports whether readiness changed.
func (r *readiness) record(failures map[string]string) (changed, ready bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ok := len(failures) == 0
	if ok && !r.started {
		r.started, r.ready, r.streak, r.reasons = true, true, 0, nil
		return true, true
	}
	if len(failures) > 0 || !r.ready {
		r.reasons = failures
	}
	if ok == r.ready {
		r.streak = 0
		return false, r.ready
	}
	r.streak++
	need := readyOKRounds
	if r.ready {
		need = readyFailRounds
	}
	if !r.started || r.streak < need {
		return false, r.ready
	}
	r.ready, r.streak = ok, 0
	if ok {
		r.reasons = nil
	}
	return true, r.ready
}

// readyProbes are the node's dependencies to check; nil ones are skipped.
type readyProbes struct {
	nc     *nats.Conn
	bus    *nats.Conn // PubSub's own connection (PUBSUB_ROUTING=subjects or flood)
	pg     *pgxpool.Pool
	redis  redis.UniversalClient
	key    string // the replay store key the probe writes
	scope  *muster.Scope
	leases string // the lease table
}

// round runs every check concurrently, each bounded by timeout, and
// returns the failures.
func (p *readyProbes) round(ctx context.Context, timeout time.Duration) map[string]string {
	checks := map[string]func(context.Context) error{}
	if p.nc != nil {
		checks["nats"] = func(ctx context.Context) error {
			if st := p.nc.Status(); st != nats.CONNECTED {
				return fmt.Errorf("connection %s", strings.ToLower(st.String()))
			}
			return p.nc.FlushWithContext(ctx)
		}
	}
	if p.bus != nil {
		checks["nats_pubsub"] = func(ctx context.Context) error {
			if st := p.bus.Status(); st != nats.CONNECTED {
				return fmt.Errorf("connection %s", strings.ToLower(st.String()))
			}
			return p.bus.FlushWithContext(ctx)
		}
	}
	if p.pg != nil {
		checks["lease_store"] = func(ctx context.Context) error {
			_, err := p.pg.Exec(ctx, "UPDATE "+p.leases+" SET epoch = epoch WHERE false")
			return err
		}
	}
	if p.redis != nil {
		checks["replay_store"] = func(ctx context.Context) error {
			return p.redis.Set(ctx, p.key, "1", 10*time.Second).Err()
		}
	}
	if p.scope != nil {
		checks["muster"] = func(context.Context) error {
			if st := p.scope.Status(); st != muster.Ready {
				return fmt.Errorf("scope %s", st)
			}
			return nil
		}
	}
	var mu sync.Mutex
	failures := map[string]string{}
	var wg sync.WaitGroup
	for name, check := range checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			err := check(cctx)
			if err == nil && cctx.Err() != nil {
				err = cctx.Err()
			}
			if err != nil {
				if errors.Is(err, context.DeadlineExceeded) {
					err = fmt.Errorf("no answer within %v", timeout)
				}
				mu.Lock()
				failures[name] = err.Error()
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return failures
}

// readyLoop runs probe rounds until ctx ends.
func (n *Node) readyLoop(ctx context.Context, p *readyProbes, every time.Duration) {
	timeout := max(every, readyMinTimeout)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		failures := p.round(ctx, timeout)
		if ctx.Err() != nil {
			return
		}
		changed, ready := n.readiness.record(failures)
		if changed {
			_, reasons := n.readiness.state()
			if ready {
				n.log.Info("ready")
			} else {
				n.log.Warn("not ready", zap.Strings("reasons", reasons))
			}
			n.tracer.Emit("node.ready", "ready", ready)
		}
		next := every
		if !ready {
			next = min(every, readyFastInterval)
		}
		t.Reset(next)
	}
}
