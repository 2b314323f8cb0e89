package gateway

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
	"github.com/relaygw/relay/channels"
	"github.com/relaygw/relay/muster"
	"github.com/relaygw/relay/session"
	"go.uber.org/zap"
)

// Readiness (README "HTTP API", docs/ARCHITECTURE.md "Readiness"): a node is
// ready when it can do its job, which a probe round checks with real
// round trips to every dependency it has:
//
//   - nats: the connection is up and a flush (PING/PONG) answers;
//   - lease_store: a lease write succeeds: the lease claim statement, run on
//     a probe key in a transaction that is rolled back (so privileges, a
//     read-only database, constraints and triggers all answer), and, after
//     a real lease write failed (leaseWatch), that same write, rolled back
//     likewise, until it succeeds;
//   - replay_store: a SET with a short expiry on a key of the node's own
//     succeeds (a read-only replica answers READONLY);
//   - muster: the sessions scope is Ready.
//
// Hysteresis: a ready node turns unready after readyFailRounds failing rounds
// in a row and back after readyOKRounds good rounds in a row, so one slow
// answer does not flap it and a recovering dependency proves itself first.
// Until its first good round the node is unready ("starting"); New runs the
// first round before it returns. Rounds run every READY_INTERVAL (every
// readyFastInterval while unready), each check bounded by the interval (at
// least readyMinTimeout).
//
// Sockets: a node that is not ready and whose dependency checks fail (every
// check but muster, with the same hysteresis: Node.serving) refuses new sockets, WebSocket
// upgrades and new LongPoll sessions, with 503 not_ready and a retry
// directive (Node.admitSocket); sockets already open stay. The muster
// check is left out there: a scope converging or rebalancing still
// delivers every event (routers flood), and it rebalances exactly when a
// failed node's sockets reconnect to the survivors.
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
	for _, k := range slices.Sorted(maps.Keys(r.reasons)) {
		out = append(out, k+": "+r.reasons[k])
	}
	if len(out) == 0 { // recovering: the checks pass, the streak is not long enough yet
		out = append(out, fmt.Sprintf("recovering: %d of %d good probe rounds", r.streak, readyOKRounds))
	}
	return false, out
}

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

// leaseWatch is the node's lease store seen by its session manager: it
// remembers the last lease write (Claim, which also renews, or Release)
// that failed for another reason than a legitimate answer (the lease is
// held by another owner, not ours any more, fenced) or the caller giving
// up, until a later lease write succeeds or the readiness probe finds the
// failed write would succeed now.
type leaseWatch struct {
	session.LeaseStore
	mu     sync.Mutex
	failed *leaseFailure // guarded by mu
}

// leaseFailure is a failed lease write: the claim to re-try (a failed
// Release is re-tried as its owner's claim of the key) and its error.
type leaseFailure struct {
	key, owner string
	ttl        time.Duration
	err        string
}

func (w *leaseWatch) Claim(ctx context.Context, key, owner string, ttl time.Duration) (session.Lease, error) {
	l, err := w.LeaseStore.Claim(ctx, key, owner, ttl)
	w.observe(ctx, key, owner, ttl, err)
	return l, err
}

func (w *leaseWatch) Release(ctx context.Context, key, owner string, epoch int64) error {
	err := w.LeaseStore.Release(ctx, key, owner, epoch)
	w.observe(ctx, key, owner, time.Second, err)
	return err
}

func (w *leaseWatch) observe(ctx context.Context, key, owner string, ttl time.Duration, err error) {
	var held *session.LeaseHeldError
	switch {
	case err == nil:
		w.mu.Lock()
		w.failed = nil
		w.mu.Unlock()
	case errors.As(err, &held), errors.Is(err, session.ErrNotOwner), errors.Is(err, session.ErrFenced), ctx.Err() != nil:
	default:
		w.mu.Lock()
		w.failed = &leaseFailure{key: key, owner: owner, ttl: ttl, err: err.Error()}
		w.mu.Unlock()
	}
}

// failure returns the failed lease write, or nil.
func (w *leaseWatch) failure() *leaseFailure {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.failed
}

// clear forgets f unless a newer failure replaced it.
func (w *leaseWatch) clear(f *leaseFailure) {
	w.mu.Lock()
	if w.failed == f {
		w.failed = nil
	}
	w.mu.Unlock()
}

// leaseTrier is a lease store that can try a claim without making it
// (pgstore.LeaseStore).
type leaseTrier interface {
	TryClaim(ctx context.Context, key, owner string, ttl time.Duration) error
}

// readyProbes are the node's dependencies to check; nil ones are skipped.
type readyProbes struct {
	nc    *nats.Conn
	bus   *nats.Conn // PubSub's own connection (PUBSUB_ROUTING=subjects or flood)
	lease leaseTrier // the lease store's trial claim (nil: in memory)
	watch *leaseWatch
	owner string // this node's lease owner identity
	redis redis.UniversalClient
	key   string // the replay store key the probe writes, and the lease key the probe tries
	scope *muster.Scope
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
	if p.lease != nil {
		checks["lease_store"] = func(ctx context.Context) error {
			f := p.watch.failure()
			if f == nil {
				return p.lease.TryClaim(ctx, p.key, p.owner, time.Minute)
			}
			if err := p.lease.TryClaim(ctx, f.key, f.owner, f.ttl); err != nil {
				return fmt.Errorf("a lease write of session %q failed (%s) and would fail again: %w", f.key, f.err, err)
			}
			p.watch.clear(f)
			return nil
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

// readyRound runs one probe round and records it in n.readiness and, with
// the muster check left out, in n.serving; it reports whether the node is
// ready.
func (n *Node) readyRound(ctx context.Context, p *readyProbes, every time.Duration) bool {
	failures := p.round(ctx, max(every, readyMinTimeout))
	if ctx.Err() != nil {
		return false
	}
	serving := make(map[string]string, len(failures))
	for k, v := range failures {
		if k != "muster" {
			serving[k] = v
		}
	}
	if changed, ok := n.serving.record(serving); changed {
		n.tracer.Emit("node.serving", "ready", ok)
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
	return ready
}

// readyLoop runs probe rounds until ctx ends; ready is the outcome of the
// round New ran.
func (n *Node) readyLoop(ctx context.Context, p *readyProbes, every time.Duration, ready bool) {
	next := func(ready bool) time.Duration {
		if !ready {
			return min(every, readyFastInterval)
		}
		return every
	}
	t := time.NewTimer(next(ready))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ready = n.readyRound(ctx, p, every)
		if ctx.Err() != nil {
			return
		}
		t.Reset(next(ready))
	}
}

// admitSocket is the endpoint's Admit: while the node is not ready and its
// dependency checks fail (n.serving; the two differ in the muster check and
// in their first rounds, so /readyz 200 always means sockets are taken) a
// new socket is refused with 503 not_ready, the failing
// checks, Retry-After and a retry directive: after about three probe
// rounds (plus jitter), within a budget of one more lease TTL.
func (n *Node) admitSocket(*http.Request) *channels.Refusal {
	if ok, _ := n.readiness.state(); ok {
		return nil // a node that /readyz calls ready takes sockets
	}
	ok, reasons := n.serving.state()
	if ok {
		return nil
	}
	d := session.NewRetryDirective(readyOKRounds*n.cfg.ReadyInterval, n.cfg.LeaseTTL)
	return retryRefusal(d, map[string]any{
		"error": CodeNotReady, "message": "this node is not ready (" + strings.Join(reasons, "; ") + "); connect again after the delay, or to another node",
		"reasons": reasons,
	})
}

// drainRefusal is the endpoint's Draining: a new socket on a draining node
// is refused with 503 draining, Retry-After and a retry directive (the
// one an event refused by a draining node gets), so clients come back to
// another node after the delay rather than at once.
func (n *Node) drainRefusal(*http.Request) *channels.Refusal {
	return retryRefusal(session.NewRetryDirective(0, n.cfg.LeaseTTL), map[string]any{
		"error": CodeDraining, "message": "this node is draining; connect again after the delay, to another node",
	})
}

// retryRefusal is a 503 refusal of a new socket with body, the retry
// directive d under "retry" and Retry-After (d.After in whole seconds,
// rounded up).
func retryRefusal(d session.RetryDirective, body map[string]any) *channels.Refusal {
	retry := &RetryDirective{AfterMS: d.After.Milliseconds(), BudgetMS: d.Budget.Milliseconds()}
	h := http.Header{}
	h.Set("Retry-After", strconv.FormatInt(int64(math.Ceil(float64(retry.AfterMS)/1000)), 10))
	body["retry"] = retry
	return &channels.Refusal{Status: http.StatusServiceUnavailable, Header: h, Body: body}
}
