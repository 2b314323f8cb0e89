package muster_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/relaygw/relay/muster"
	"github.com/relaygw/relay/muster/memnet"
)

var (
	modelRuns = flag.Int("muster.runs", envInt("MUSTER_MODEL_RUNS", 200), "seeded runs of TestModel")
	modelSeed = flag.Int64("muster.seed", int64(envInt("MUSTER_MODEL_SEED", 0)), "replay one TestModel seed (0: all)")
)

func envInt(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil {
		return v
	}
	return def
}

// TestModel drives random joins, leaves, member deaths, node adds, removes
// and restarts, shard crashes, coordinator resets and partitions (with lossy,
// reordering, duplicating links) on memnet. After the faults stop and the
// cluster quiesces, every node must be ready with the same view hash and,
// for every group, the router's Targets must be exactly the nodes holding a
// live local member. A failing seed is printed; replay it with
// -muster.seed=N (or MUSTER_MODEL_SEED=N).
func TestModel(t *testing.T) {
	seeds := make([]int64, 0, *modelRuns)
	if *modelSeed != 0 {
		seeds = append(seeds, *modelSeed)
	} else {
		for i := 1; i <= *modelRuns; i++ {
			seeds = append(seeds, int64(i))
		}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			runModel(t, seed)
		})
	}
}

type modelMember struct {
	node, group string
	m           *member
}

func runModel(t *testing.T, seed int64) {
	rng := rand.New(rand.NewSource(seed))
	c := newCluster(t, seed)
	c.mod = func(_ string, cfg *muster.Config) {
		cfg.VacantFlush = 30 * time.Millisecond
		cfg.RPCTimeout = 300 * time.Millisecond
		cfg.ViewHeartbeat = 50 * time.Millisecond
		cfg.Cooldown = 20 * time.Millisecond
		cfg.TombstoneWindow = 5 * cfg.RPCTimeout // the spec's default ratio: a claim in flight outlives its tombstone
	}
	defer func() {
		if t.Failed() {
			t.Logf("FAILING SEED %d: replay with go test ./muster -run 'TestModel/seed=%d$' -muster.seed=%d", seed, seed, seed)
			if dir := os.Getenv("MUSTER_MODEL_TRACE_DIR"); dir != "" {
				var all []byte
				for _, e := range c.tr.Events() {
					all = append(all, e.At.Format("15:04:05.000000 ")...)
					all = append(all, e.String()...)
					all = append(all, '\n')
				}
				_ = os.WriteFile(fmt.Sprintf("%s/seed-%d.trace", dir, seed), all, 0o644)
			}
		}
	}()
	pool := []string{"n1", "n2", "n3", "n4", "n5"}
	live := map[string]bool{}
	for _, n := range pool[:2+rng.Intn(2)] {
		c.add(n)
		live[n] = true
	}
	c.net.SetDefaultLink(memnet.LinkFaults{Drop: 0.01, Jitter: 2 * time.Millisecond, Duplicate: 0.05, Reorder: 0.1})
	groups := []string{"g0", "g1", "g2", "g3", "g4", "g5", "g6", "g7"}
	var mems []*modelMember
	liveNodes := func() []string {
		out := []string{}
		for n := range live {
			out = append(out, n)
		}
		slices.Sort(out)
		return out
	}
	steps := 25 + rng.Intn(25)
	for i := 0; i < steps; i++ {
		nodes := liveNodes()
		n := nodes[rng.Intn(len(nodes))]
		s := c.node(n)
		switch op := rng.Intn(100); {
		case op < 40: // join
			m := &modelMember{n, groups[rng.Intn(len(groups))], newMember()}
			ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
			_ = s.Join(ctx, m.group, m.m)
			cancel()
			mems = append(mems, m)
		case op < 55: // leave
			if len(mems) > 0 {
				m := mems[rng.Intn(len(mems))]
				if s := c.node(m.node); s != nil {
					ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
					_ = s.Leave(ctx, m.group, m.m)
					cancel()
				}
			}
		case op < 65: // member death
			if len(mems) > 0 {
				mems[rng.Intn(len(mems))].m.kill()
			}
		case op < 71: // add a node
			for _, p := range pool {
				if !live[p] {
					c.add(p)
					live[p] = true
					break
				}
			}
		case op < 75: // remove a node
			if len(nodes) > 1 {
				c.stop(n)
				delete(live, n)
			}
		case op < 79: // restart a node (same name, new incarnation)
			if len(nodes) > 1 {
				c.stop(n)
				c.add(n)
			}
		case op < 85:
			s.CrashShard(groups[rng.Intn(len(groups))])
		case op < 88:
			s.ResetCoordinator()
		case op < 95: // partition: cut the cluster in two, each side suspects the other
			if len(nodes) > 1 {
				k := 1 + rng.Intn(len(nodes)-1)
				perm := rng.Perm(len(nodes))
				var a, b []string
				for j, p := range perm {
					if j < k {
						a = append(a, nodes[p])
					} else {
						b = append(b, nodes[p])
					}
				}
				c.net.Partition(a, b)
				for _, x := range a {
					for _, y := range b {
						c.node(x).ForceDown(y)
						c.node(y).ForceDown(x)
					}
				}
			}
		default:
			c.net.Heal()
		}
		if rng.Intn(3) == 0 {
			time.Sleep(time.Duration(rng.Intn(20)) * time.Millisecond)
		}
	}
	// Faults stop.
	c.net.Heal()
	c.net.SetDefaultLink(memnet.LinkFaults{})
	final := liveNodes()
	// Let every coordinator process what the fault phase posted to it
	// (failure-detector ticks of simulated suspicions) before judging
	// readiness, or a stale "ready" could pass for quiescence.
	for _, n := range final {
		_ = c.node(n).Dump()
	}
	c.waitReady(final...)
	quiesceGroups(t, c, final, groups)
	checkTargets(t, c, seed, final, groups)
}

// quiesceGroups waits until every group on every node is either held with
// live members (occupied) or forgotten (nil): cooldowns expired and
// vacancies flushed.
func quiesceGroups(t *testing.T, c *cluster, nodes, groups []string) {
	t.Helper()
	eventually(t, 20*time.Second, "groups settle", func() bool {
		for _, n := range nodes {
			s := c.node(n)
			for _, g := range groups {
				st := s.GroupState(g)
				held := len(s.LocalMembers(g)) > 0
				if !(st == "nil" && !held) && !(st == "occupied" && held) {
					return false
				}
			}
		}
		return true
	})
}

func checkTargets(t *testing.T, c *cluster, seed int64, nodes, groups []string) {
	t.Helper()
	check := func() (msg string, hole bool) {
		for _, g := range groups {
			var want []string
			for _, n := range nodes {
				if len(c.node(n).LocalMembers(g)) > 0 {
					want = append(want, n)
				}
			}
			r := c.node(nodes[0]).Router(g)
			if r.Status != muster.RouteOK {
				return fmt.Sprintf("group %s: router status %v", g, r.Status), false
			}
			rs := c.node(r.Node)
			got, ok := rs.Targets(g, c.node(nodes[0]).ViewHash())
			if !ok {
				return fmt.Sprintf("group %s: router %s cannot decide (status %s)", g, r.Node, rs.Status()), false
			}
			if !slices.Equal(got, want) {
				for _, w := range want {
					if !slices.Contains(got, w) {
						hole = true
					}
				}
				return fmt.Sprintf("group %s: router %s Targets = %v, want %v", g, r.Node, got, want), hole
			}
		}
		return "", false
	}
	// Over-delivery from a stale row can take one sweep to clear (polled
	// with a deadline); a hole in a ready cluster never heals on its own
	// (anti-entropy is off), so it fails at once.
	deadline := time.Now().Add(10 * time.Second)
	for {
		msg, hole := check()
		if msg == "" {
			return
		}
		if hole || time.Now().After(deadline) {
			dump := ""
			for _, n := range nodes {
				dump += c.node(n).Dump().String()
			}
			if os.Getenv("MUSTER_MODEL_TRACE") != "" {
				for _, e := range c.tr.Events() {
					switch e.Kind {
					case "muster_peer_registered", "muster_peer_down", "muster_rebalance_start", "muster_rebalance_done",
						"muster_coordinator_init", "muster_coordinator_crash", "muster_status_change", "muster_view_prepare", "muster_view_cancel", "muster_shard_crash":
						dump += e.String() + "\n"
					}
				}
			}
			if dir := os.Getenv("MUSTER_MODEL_TRACE_DIR"); dir != "" {
				var all []byte
				for _, e := range c.tr.Events() {
					all = append(all, e.String()...)
					all = append(all, '\n')
				}
				_ = os.WriteFile(fmt.Sprintf("%s/seed-%d.trace", dir, seed), all, 0o644)
			}
			t.Fatalf("%s\n%s", msg, dump)
		}
		for _, n := range nodes {
			c.node(n).Tick("gc")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
