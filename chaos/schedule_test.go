package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/relaygw/relay/internal/testkit/proctest"
	"github.com/relaygw/relay/internal/testkit/testenv"
)

// faultKind names one fault the schedule applies to one node.
type faultKind string

const (
	faultKill    faultKind = "kill"     // SIGKILL; after Hold, a new incarnation under the same name
	faultPause   faultKind = "pause"    // SIGSTOP for Hold (longer than the lease TTL), then SIGCONT
	faultTerm    faultKind = "term"     // SIGTERM: drain, exit, then a new incarnation at once
	faultNATSCut faultKind = "nats-cut" // the node's NATS link cut at its proxy for Hold, then healed
	faultPGCut   faultKind = "pg-cut"   // the node's Postgres link cut at its proxy for Hold, then healed
)

var faultKinds = []faultKind{faultKill, faultPause, faultTerm, faultNATSCut, faultPGCut}

// fault is one step of a schedule: Gap of normal running, then Kind on
// node Node (an index into the cluster's nodes) for Hold.
type fault struct {
	Kind faultKind
	Node int
	Gap  time.Duration
	Hold time.Duration
}

func (f fault) String() string {
	return fmt.Sprintf("+%v %s node %d for %v", f.Gap.Round(time.Millisecond), f.Kind, f.Node, f.Hold.Round(time.Millisecond))
}

// schedule is the whole fault sequence of one checker run, drawn from Seed.
// The same seed gives the same faults, nodes, gaps and holds; the
// interleaving with the writers' traffic still varies from run to run.
type schedule struct {
	Seed   uint64
	Faults []fault
}

// newSchedule draws n faults over nodes nodes from seed. A pause lasts past
// ttl (0.3–1.5 s beyond), so the paused owner's lease lapses; a cut lasts
// 0.2–3 s (blips shorter than the TTL and outages past it); a killed node
// stays down up to 1 s; gaps of normal running are 0.5–2.5 s.
func newSchedule(seed uint64, n, nodes int, ttl time.Duration) schedule {
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	span := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	s := schedule{Seed: seed}
	for range n {
		f := fault{
			Kind: faultKinds[rng.IntN(len(faultKinds))],
			Node: rng.IntN(nodes),
			Gap:  span(500*time.Millisecond, 2500*time.Millisecond),
		}
		switch f.Kind {
		case faultKill:
			f.Hold = span(0, time.Second)
		case faultPause:
			f.Hold = ttl + span(300*time.Millisecond, 1500*time.Millisecond)
		case faultNATSCut, faultPGCut:
			f.Hold = span(200*time.Millisecond, 3*time.Second)
		}
		s.Faults = append(s.Faults, f)
	}
	return s
}

func (s schedule) String() string {
	parts := make([]string, len(s.Faults))
	for i, f := range s.Faults {
		parts[i] = f.String()
	}
	return fmt.Sprintf("seed %d: %s", s.Seed, strings.Join(parts, "; "))
}

// faultCluster is a cluster whose nodes reach Postgres and NATS through a
// cuttable TCP proxy each (testenv.TCPProxy), so one node's links can be
// cut while the others keep theirs. Redis is reached directly.
type faultCluster struct {
	*proctest.Cluster
	nodes []*proctest.Proc
	pg    []*testenv.TCPProxy // pg[i] carries nodes[i]'s Postgres connections
	nats  []*testenv.TCPProxy // nats[i] carries nodes[i]'s NATS connection
}

// startFaultCluster starts n nodes ("a", "b", …) with env over the
// cluster's defaults, each behind its own Postgres and NATS proxies.
func startFaultCluster(t *testing.T, n int, env map[string]string) *faultCluster {
	t.Helper()
	fc := &faultCluster{Cluster: newCluster(t, env)}
	pgTarget, err := testenv.HostPort(fc.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	natsTarget, err := testenv.HostPort(testenv.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		pg, nc := testenv.Proxy(t, pgTarget), testenv.Proxy(t, natsTarget)
		fc.pg, fc.nats = append(fc.pg, pg), append(fc.nats, nc)
		fc.nodes = append(fc.nodes, fc.Add(string(rune('a'+i)), map[string]string{
			"DATABASE_URL": pg.URL(fc.DatabaseURL),
			"NATS_URL":     nc.URL(testenv.NATSURL()),
		}))
	}
	for _, p := range fc.nodes {
		if err := fc.Restart(p); err != nil {
			t.Fatal(err)
		}
	}
	return fc
}

// apply runs fault f to its end: the node is running and ready again and
// every link is healed when it returns nil. An error means the cluster
// could not be brought back (a node that did not exit or restart).
func (fc *faultCluster) apply(ctx context.Context, f fault) error {
	p := fc.nodes[f.Node]
	switch f.Kind {
	case faultKill:
		if err := p.Kill(); err != nil {
			return err
		}
		sleep(ctx, f.Hold)
		return fc.Restart(p)
	case faultPause:
		if err := p.Pause(); err != nil {
			return err
		}
		sleep(ctx, f.Hold)
		return p.Resume()
	case faultTerm:
		if err := p.Terminate(); err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, fc.Duration("DRAIN_WINDOW")+10*time.Second)
		defer cancel()
		if _, err := p.Wait(wctx); err != nil {
			return err
		}
		return fc.Restart(p)
	case faultNATSCut, faultPGCut:
		proxy := fc.nats[f.Node]
		if f.Kind == faultPGCut {
			proxy = fc.pg[f.Node]
		}
		proxy.Cut()
		sleep(ctx, f.Hold)
		proxy.Restore()
		return nil
	}
	return fmt.Errorf("chaos: unknown fault %q", f.Kind)
}

// waitReady waits until every node answers /readyz with 200.
func (fc *faultCluster) waitReady(ctx context.Context) error {
	for _, p := range fc.nodes {
		if err := p.WaitReady(ctx); err != nil {
			return err
		}
	}
	return nil
}

// sleep waits d or until ctx ends. The schedule's gaps and holds are the
// faults' shape (how long a link stays cut), not synchronization.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
