package presence_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/relaygw/relay/internal/testkit/mustertest"
	"github.com/relaygw/relay/internal/testkit/testenv"
	"github.com/relaygw/relay/internal/trace"
	"github.com/relaygw/relay/muster"
	"github.com/relaygw/relay/muster/natstransport"
	"github.com/relaygw/relay/muster/ring"
	"github.com/relaygw/relay/presence"
)

// musterNATSNode is one simulated node on the real NATS server: a Muster
// scope and a Census, each on its own connection and transport.
type musterNATSNode struct {
	scope  *muster.Scope
	census *presence.Census
}

// TestMusterOverRealNATS: Muster and the Census, its user in this package,
// side by side on every node. Three nodes converge over NATS; a fourth
// joins and about a quarter of the groups move router; one node is killed
// and the rest re-converge by failure detection; routed targets are exact
// throughout, and Census counts agree within one interval.
func TestMusterOverRealNATS(t *testing.T) {
	prefix := testenv.NATSPrefix(t)
	tr := trace.New()
	const censusInterval = 100 * time.Millisecond
	nodes := map[string]*musterNATSNode{}
	start := func(name string) {
		cfg := mustertest.FastConfig()
		cfg.Node = name
		cfg.Tracer = tr
		cfg.PingInterval = 50 * time.Millisecond
		cfg.PeerDownAfter = 750 * time.Millisecond
		cfg.VacantFlush = 100 * time.Millisecond
		cfg.Transport = natstransport.New(testenv.NATSConn(t), natstransport.Config{Prefix: prefix, Scope: "muster", Node: name})
		s, err := muster.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		cen := presence.NewCensus(presence.CensusConfig{
			Transport:         natstransport.New(testenv.NATSConn(t), natstransport.Config{Prefix: prefix, Scope: "census", Node: name}),
			BroadcastInterval: censusInterval,
		})
		if err := cen.Start(musterCtx(t)); err != nil {
			t.Fatal(err)
		}
		nodes[name] = &musterNATSNode{s, cen}
		t.Cleanup(func() { cen.Stop(); _ = s.Close() })
	}
	names := func() []string {
		out := slices.Collect(maps.Keys(nodes))
		slices.Sort(out)
		return out
	}
	waitReady := func() {
		t.Helper()
		want := names()
		waitUntil(t, 20*time.Second, fmt.Sprintf("%v ready over NATS", want), func() bool {
			h := nodes[want[0]].scope.ViewHash()
			for _, n := range want {
				s := nodes[n].scope
				if s.Status() != muster.Ready || s.ViewHash() != h || !slices.Equal(s.Members(), want) {
					return false
				}
			}
			return true
		})
	}
	// holders[g] is the set of nodes holding g.
	holders := map[string][]string{}
	join := func(node, g string) {
		t.Helper()
		if err := nodes[node].scope.Join(musterCtx(t), g, mustertest.NewMember()); err != nil {
			t.Fatal(err)
		}
		nodes[node].census.Inc(g)
		holders[g] = append(holders[g], node)
		slices.Sort(holders[g])
	}
	checkTargets := func() {
		t.Helper()
		any := nodes[names()[0]].scope
		waitUntil(t, 10*time.Second, "targets exact on every router", func() bool {
			for g, want := range holders {
				r := any.Router(g)
				got, ok := nodes[r.Node].scope.Targets(g, any.ViewHash())
				if r.Status != muster.RouteOK || !ok || !slices.Equal(got, want) {
					return false
				}
			}
			return true
		})
	}
	checkCensus := func() {
		t.Helper()
		want := map[string]int{}
		for g, hs := range holders {
			want[g] = len(hs)
		}
		waitUntil(t, 10*censusInterval+2*time.Second, "census counts agree", func() bool {
			for _, n := range names() {
				if !maps.Equal(nodes[n].census.Counts(), want) {
					return false
				}
			}
			return true
		})
	}

	for _, n := range []string{"n1", "n2", "n3"} {
		start(n)
	}
	waitReady()
	const groups = 200
	for i := 0; i < groups; i++ {
		join([]string{"n1", "n2", "n3"}[i%3], fmt.Sprintf("room:%d", i))
		if i%5 == 0 {
			join([]string{"n1", "n2", "n3"}[(i+1)%3], fmt.Sprintf("room:%d", i))
		}
	}
	checkTargets()
	checkCensus()

	start("n4")
	waitReady()
	old, cur := ring.New([]string{"n1", "n2", "n3"}, 0), ring.New(names(), 0)
	moved := 0
	for g := range holders {
		if old.Find(g) != cur.Find(g) {
			moved++
		}
	}
	if frac := float64(moved) / groups; frac < 0.12 || frac > 0.38 {
		t.Fatalf("%d of %d groups moved router when the 4th node joined, want about a quarter", moved, groups)
	}
	join("n4", "room:0")
	checkTargets()
	checkCensus()

	// Kill n2 without a drain: the failure detector notices the silence.
	nodes["n2"].census.Stop()
	_ = nodes["n2"].scope.Close()
	delete(nodes, "n2")
	for g, hs := range holders {
		hs = slices.DeleteFunc(hs, func(n string) bool { return n == "n2" })
		if len(hs) == 0 {
			delete(holders, g)
		} else {
			holders[g] = hs
		}
	}
	waitReady()
	checkTargets()
	checkCensus()
}

// musterCtx is a hang guard for one Muster call.
func musterCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitUntil polls cond until it holds; d is a hang guard.
func waitUntil(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
