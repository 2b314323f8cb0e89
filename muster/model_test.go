package muster_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relaygw/relay/internal/testkit/mustertest"
	"github.com/relaygw/relay/muster"
	"github.com/relaygw/relay/muster/memnet"
)

var (
	modelRuns     = flag.Int("muster.runs", envInt("MUSTER_MODEL_RUNS", 200), "seeded runs of TestModel")
	modelSeed     = flag.Int64("muster.seed", int64(envInt("MUSTER_MODEL_SEED", 0)), "replay one TestModel seed (0: all)")
	modelParallel = flag.Int("muster.parallel", envInt("MUSTER_MODEL_PARALLEL", 4), "TestModel runs at a time")
)

func envInt(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil {
		return v
	}
	return def
}

// Counted over all runs of one TestModel: the faults the runs injected must
// actually have happened (a model whose failure detector never fires proves
// nothing about it).
var modelCounts struct {
	fdFired, fdWanted, pauses, oneWay, safetyChecks, stableSweeps, hostStalls atomic.Int64
}

// TestModel drives random joins, leaves, member deaths, node adds, removes
// and restarts, shard crashes, coordinator resets and network faults (lossy,
// reordering, duplicating links; two-sided partitions with forced
// suspicion; one-way cuts; paused nodes whose deliveries stop then resume;
// silences long enough for the real failure detector to declare a peer down,
// then healed) on memnet, against its own record of which joins succeeded
// and which members left, died or went with their node.
//
// During the run, after every step, it checks safety: a ready router whose
// Targets answers for a sender on its view never omits a holder of that view
// whose join succeeded and whose member is still live. After the faults stop
// it waits for quiescence and checks that every node is ready on the same
// view of the live nodes, every node's local members are exactly the
// record's, the router's Targets for each group are exactly the record's
// holders, and no node keeps a present row for a group it does not route
// (no phantom row). It then runs further sweeps, heartbeats and flushes and
// checks it all again at once: convergence is stable, not a one-off.
//
// A failing seed prints its replay command (-muster.seed=N or
// MUSTER_MODEL_SEED=N); MUSTER_MODEL_TRACE_DIR=dir writes its timed trace
// (MUSTER_MODEL_NETTRACE=1 adds memnet's sends, deliveries and drops).
// MUSTER_MODEL_RUNS sets the number of seeds (default 200) and
// MUSTER_MODEL_PARALLEL how many run at a time (default 4).
func TestModel(t *testing.T) {
	seeds := make([]int64, 0, *modelRuns)
	if *modelSeed != 0 {
		seeds = append(seeds, *modelSeed)
	} else {
		for i := 1; i <= *modelRuns; i++ {
			seeds = append(seeds, int64(i))
		}
	}
	// The runs mostly wait (on timers, on convergence); they run in a pool
	// of their own rather than under -test.parallel, which is GOMAXPROCS.
	sem := make(chan struct{}, max(1, *modelParallel))
	var wg sync.WaitGroup
	for _, seed := range seeds {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { runModel(t, seed) })
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	t.Logf("model: %d runs, failure detector fired %d of %d times, %d pauses, %d one-way cuts, %d safety checks, %d stable re-checks, %d host stalls re-converged",
		len(seeds), modelCounts.fdFired.Load(), modelCounts.fdWanted.Load(), modelCounts.pauses.Load(),
		modelCounts.oneWay.Load(), modelCounts.safetyChecks.Load(), modelCounts.stableSweeps.Load(), modelCounts.hostStalls.Load())
	if len(seeds) >= 50 && (modelCounts.fdFired.Load() == 0 || modelCounts.pauses.Load() == 0 || modelCounts.oneWay.Load() == 0) {
		t.Fatal("the runs never exercised the failure detector, a pause or a one-way cut")
	}
}

// modelMember is one Join the run made.
type modelMember struct {
	node, group string
	gen         int // the node's generation (restarts) when it joined
	m           *mustertest.Member
	held        bool // Join returned nil, and no Leave, death or stop since
}

// modelRun is one seeded run: the cluster and the run's own record.
type modelRun struct {
	t      *testing.T
	seed   int64
	rng    *rand.Rand
	c      *cluster
	groups []string
	live   map[string]bool
	gen    map[string]int
	paused map[string]int // frozen node → steps left before it thaws
	mems   []*modelMember
}

// modelConfig is the model's timer preset. The call timeout and the
// failure detector stay well above the stalls of a loaded -race process
// (trace gaps of 0.4 s with no event anywhere were measured beside two CPU
// hogs, and a coordinator goroutine left unscheduled for 0.8 s with six runs
// at a time): a timeout is how the protocol detects a lost call, and in the
// model calls are lost only to the faults it injects. A shorter timeout let
// the host's scheduler fail healthy calls; every such failure resets a
// coordinator, whose reset costs every peer a rebalance with full
// snapshots, more calls that can time out: under load the run never
// converged.
func modelConfig(_ string, cfg *muster.Config) {
	cfg.VacantFlush = 30 * time.Millisecond
	cfg.RPCTimeout = time.Second
	cfg.ViewHeartbeat = 50 * time.Millisecond
	cfg.Cooldown = 20 * time.Millisecond
	cfg.PingInterval = 50 * time.Millisecond
	cfg.PeerDownAfter = 2 * time.Second
	// The spec's default ratio: a claim in flight outlives its tombstone.
	cfg.TombstoneWindow = 5 * cfg.RPCTimeout
}

func runModel(t *testing.T, seed int64) {
	md := &modelRun{
		t: t, seed: seed, rng: rand.New(rand.NewSource(seed)), c: newCluster(t, seed),
		groups: []string{"g0", "g1", "g2", "g3", "g4", "g5", "g6", "g7"},
		live:   map[string]bool{}, gen: map[string]int{}, paused: map[string]int{},
	}
	c := md.c
	c.mod = modelConfig
	if os.Getenv("MUSTER_MODEL_NETTRACE") != "" {
		c.net.SetTracer(c.tr)
	}
	defer md.onFailure()
	pool := []string{"n1", "n2", "n3", "n4", "n5"}
	for _, n := range pool[:2+md.rng.Intn(2)] {
		c.add(n)
		md.live[n] = true
	}
	c.net.SetDefaultLink(memnet.LinkFaults{Drop: 0.01, Jitter: 2 * time.Millisecond, Duplicate: 0.05, Reorder: 0.1})
	steps := 25 + md.rng.Intn(25)
	fdAt := -1
	if md.rng.Intn(4) == 0 {
		fdAt = md.rng.Intn(steps)
	}
	for i := 0; i < steps; i++ {
		if i == fdAt {
			md.fireFailureDetector()
		} else {
			md.step(pool)
		}
		md.thawDue()
		md.checkSafety()
		if md.rng.Intn(3) == 0 {
			time.Sleep(time.Duration(md.rng.Intn(20)) * time.Millisecond)
		}
	}
	// Faults stop.
	for n := range md.paused {
		c.net.Thaw(n)
	}
	clear(md.paused)
	c.net.Heal()
	c.net.SetDefaultLink(memnet.LinkFaults{})
	// Every message of the fault phase (held in a paused node's inbox,
	// delayed by jitter) is handled before convergence is judged. A
	// stopped node's discovery, sent before it stopped and handled only
	// after a survivor was seen converged without it, makes the survivor
	// take the dead incarnation in again until its silence departs it:
	// right, but it undid a convergence the check had already accepted.
	qctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // a hang guard
	defer cancel()
	if err := c.net.Quiesce(qctx); err != nil {
		md.fail("after the faults: %v", err)
	}
	md.checkSafety()
	since := c.mark() // calls dropped by the faults may still time out after this
	md.checkQuiescent()
	stalls := 0
	for range 3 {
		mark := c.mark()
		md.sweep()
		md.checkSafety()
		if msg, _ := md.converged(); msg != "" {
			// No fault is injected any more, so a call can time out, or a
			// peer fall silent, only because the host stalled this process
			// longer than RPCTimeout or PeerDownAfter (or a call the faults
			// dropped timed out late); the protocol's answer (a reset) is
			// right, and the run must converge again, at most twice.
			// Anything else that undoes convergence is a bug.
			stall := md.hostStall(since)
			if stall == "" || stalls == 2 {
				md.fail("not stable after a further sweep: %s", msg)
			}
			stalls++
			modelCounts.hostStalls.Add(1)
			md.t.Logf("host stall (%s) undid convergence (%s); waiting for it again", stall, msg)
			since = c.mark()
			md.checkQuiescent()
			continue
		}
		since = mark
		modelCounts.stableSweeps.Add(1)
	}
}

// hostStall returns the first trace event after mark that only a stalled
// host explains once faults stopped: a call that timed out, or a peer
// declared down for silence ("" if none).
func (md *modelRun) hostStall(mark uint64) string {
	for _, e := range md.c.tr.Events() {
		if e.Seq <= mark {
			continue
		}
		switch {
		case e.Kind == "muster_rpc_result" && strings.Contains(fmt.Sprint(e.Get("err")), "deadline exceeded"):
			return e.String()
		case e.Kind == "muster_peer_down" && e.Get("reason") == "silent":
			return e.String()
		}
	}
	return ""
}

func (md *modelRun) liveNodes() []string {
	out := make([]string, 0, len(md.live))
	for n := range md.live {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// step runs one random operation.
func (md *modelRun) step(pool []string) {
	c, rng := md.c, md.rng
	nodes := md.liveNodes()
	n := nodes[rng.Intn(len(nodes))]
	s := c.node(n)
	switch op := rng.Intn(100); {
	case op < 36: // join
		m := &modelMember{node: n, group: md.groups[rng.Intn(len(md.groups))], gen: md.gen[n], m: mustertest.NewMember()}
		ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
		err := s.Join(ctx, m.group, m.m)
		cancel()
		m.held = err == nil
		md.mems = append(md.mems, m)
	case op < 48: // leave
		if m := md.pickMember(); m != nil {
			if err := c.node(m.node).Leave(ctxT(md.t), m.group, m.m); err != nil {
				md.t.Fatalf("leave %s of %s on %s: %v", m.m.ID(), m.group, m.node, err)
			}
			m.held = false
		}
	case op < 56: // member death
		if m := md.pickMember(); m != nil {
			m.m.Kill()
			m.held = false
		}
	case op < 61: // add a node
		for _, p := range pool {
			if !md.live[p] {
				c.add(p)
				md.live[p] = true
				break
			}
		}
	case op < 65: // remove a node
		if len(nodes) > 1 {
			md.stopNode(n)
			delete(md.live, n)
		}
	case op < 69: // restart a node (same name, new incarnation)
		if len(nodes) > 1 {
			md.stopNode(n)
			c.add(n)
		}
	case op < 74:
		s.CrashShard(md.groups[rng.Intn(len(md.groups))])
	case op < 77:
		s.ResetCoordinator()
	case op < 82: // two-sided partition, each side suspects the other at once
		if len(nodes) > 1 {
			a, b := md.split(nodes)
			c.net.Partition(a, b)
			for _, x := range a {
				for _, y := range b {
					c.node(x).ForceDown(y)
					c.node(y).ForceDown(x)
				}
			}
		}
	case op < 88: // one-way cuts: what a sends to b is lost, b → a still works
		if len(nodes) > 1 {
			a, b := md.split(nodes)
			for _, x := range a {
				for _, y := range b {
					if rng.Intn(2) == 0 {
						c.net.Block(x, y)
						modelCounts.oneWay.Add(1)
					}
				}
			}
		}
	case op < 93: // pause: the node's deliveries stop, and resume a few steps later
		if _, ok := md.paused[n]; !ok {
			c.net.Freeze(n)
			md.paused[n] = 1 + rng.Intn(4)
			modelCounts.pauses.Add(1)
		}
	default:
		c.net.Heal()
		for p := range md.paused {
			c.net.Thaw(p)
		}
		clear(md.paused)
	}
}

// split cuts nodes (at least two) in two non-empty random halves.
func (md *modelRun) split(nodes []string) (a, b []string) {
	k := 1 + md.rng.Intn(len(nodes)-1)
	for j, p := range md.rng.Perm(len(nodes)) {
		if j < k {
			a = append(a, nodes[p])
		} else {
			b = append(b, nodes[p])
		}
	}
	return a, b
}

// thawDue resumes the paused nodes whose pause is over.
func (md *modelRun) thawDue() {
	for n, left := range md.paused {
		if left <= 1 {
			md.c.net.Thaw(n)
			delete(md.paused, n)
			continue
		}
		md.paused[n] = left - 1
	}
}

// pickMember returns a random member of a live node's current generation.
func (md *modelRun) pickMember() *modelMember {
	var cand []*modelMember
	for _, m := range md.mems {
		if md.live[m.node] && m.gen == md.gen[m.node] {
			cand = append(cand, m)
		}
	}
	if len(cand) == 0 {
		return nil
	}
	return cand[md.rng.Intn(len(cand))]
}

// stopNode kills n: its members go with it.
func (md *modelRun) stopNode(n string) {
	md.c.stop(n)
	for _, m := range md.mems {
		if m.node == n && m.gen == md.gen[n] {
			m.held = false
		}
	}
	md.gen[n]++
	if _, ok := md.paused[n]; ok {
		md.c.net.Thaw(n)
		delete(md.paused, n)
	}
}

// fireFailureDetector silences one node toward every other (its messages are
// lost, theirs still reach it) until the others' own failure detectors
// declare it down for silence, then heals the cut. The wait is on that
// condition; it is bounded because a peer that already departed the node
// (an earlier suspicion) has nothing left to declare.
func (md *modelRun) fireFailureDetector() {
	c := md.c
	nodes := md.liveNodes()
	if len(nodes) < 2 {
		return
	}
	x := nodes[md.rng.Intn(len(nodes))]
	mark := c.mark()
	var others []string
	for _, o := range nodes {
		if o != x {
			others = append(others, o)
			c.net.Block(x, o)
		}
	}
	modelCounts.fdWanted.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	fired := false
	for _, o := range others {
		if _, err := c.tr.WaitAfter(ctx, mark, kindOf("muster_peer_down", o, "peer", x, "reason", "silent")); err == nil {
			fired = true
		}
	}
	if fired {
		modelCounts.fdFired.Add(1)
	}
	for _, o := range others {
		c.net.Unblock(x, o)
	}
}

// holders returns the record's holders of g: live nodes with a member of
// their current generation whose join succeeded and that did not leave or
// die since.
func (md *modelRun) holders(g string) []string {
	var out []string
	for _, m := range md.mems {
		if m.held && m.group == g && md.live[m.node] && m.gen == md.gen[m.node] && !slices.Contains(out, m.node) {
			out = append(out, m.node)
		}
	}
	slices.Sort(out)
	return out
}

// heldIDs returns the record's held member IDs of g on n.
func (md *modelRun) heldIDs(n, g string) []string {
	var out []string
	for _, m := range md.mems {
		if m.held && m.node == n && m.group == g && m.gen == md.gen[n] {
			out = append(out, m.m.ID())
		}
	}
	slices.Sort(out)
	return out
}

// checkSafety: for every group, a ready router r that routes it and
// answers Targets for a sender on r's view lists every record holder h
// that is ready on that same view. The reads race with the cluster, so a
// suspected omission is judged only if r and h still show the same status
// and view after Targets was read.
func (md *modelRun) checkSafety() {
	c := md.c
	modelCounts.safetyChecks.Add(1)
	for _, g := range md.groups {
		holders := md.holders(g)
		if len(holders) == 0 {
			continue
		}
		for _, r := range md.liveNodes() {
			rs := c.node(r)
			h := rs.ViewHash()
			if rs.Status() != muster.Ready {
				continue
			}
			if rt := rs.Router(g); rt.Status != muster.RouteOK || rt.Node != r {
				continue
			}
			var agree []string
			for _, hn := range holders {
				if hs := c.node(hn); hs.Status() == muster.Ready && hs.ViewHash() == h {
					agree = append(agree, hn)
				}
			}
			got, ok := rs.Targets(g, h)
			if !ok {
				continue
			}
			for _, hn := range agree {
				hs := c.node(hn)
				if slices.Contains(got, hn) || rs.Status() != muster.Ready || rs.ViewHash() != h ||
					hs.Status() != muster.Ready || hs.ViewHash() != h {
					continue
				}
				if rt := rs.Router(g); rt.Status != muster.RouteOK || rt.Node != r {
					continue
				}
				md.fail("safety: ready router %s omits live holder %s of %s from Targets %v (view %d)", r, hn, g, got, h)
			}
		}
	}
}

// sweep runs every live node's stale-row sweep, heartbeat and vacant flush,
// and waits until each coordinator has handled them.
func (md *modelRun) sweep() {
	for _, n := range md.liveNodes() {
		s := md.c.node(n)
		s.Tick("gc")
		s.Tick("heartbeat")
		s.FlushAll()
	}
	for _, n := range md.liveNodes() {
		md.c.node(n).SyncCoordinator()
	}
}

// checkQuiescent waits (bounded) until the cluster converged to the record.
func (md *modelRun) checkQuiescent() {
	c := md.c
	final := md.liveNodes()
	// Let every coordinator process what the fault phase posted to it
	// (suspicions, failure-detector ticks) before judging readiness.
	for _, n := range final {
		c.node(n).SyncCoordinator()
	}
	c.waitReady(final...)
	deadline := time.Now().Add(60 * time.Second)
	for {
		msg, hole := md.converged()
		if msg == "" {
			return
		}
		// A hole (a holder missing from a ready router's Targets) never
		// heals on its own (anti-entropy is off); anything else may still
		// be settling (a death being processed, a cooldown, a flush, a
		// stale row awaiting its sweep).
		if hole || time.Now().After(deadline) {
			md.fail("%s", msg)
		}
		md.sweep()
		time.Sleep(20 * time.Millisecond)
	}
}

// converged reports the first difference between the cluster and the
// record ("" if none); hole is set when a router's Targets omits a holder.
func (md *modelRun) converged() (msg string, hole bool) {
	c := md.c
	nodes := md.liveNodes()
	for _, n := range nodes {
		s := c.node(n)
		if s.Status() != muster.Ready || !slices.Equal(s.Members(), nodes) {
			return fmt.Sprintf("%s: status %s members %v, want ready on %v", n, s.Status(), s.Members(), nodes), false
		}
		for _, g := range md.groups {
			want := md.heldIDs(n, g)
			if got := s.LocalMembers(g); !slices.Equal(got, want) {
				return fmt.Sprintf("%s: local members of %s = %v, record %v", n, g, got, want), false
			}
			st, held := s.GroupState(g), len(want) > 0
			if !(st == "nil" && !held) && !(st == "occupied" && held) {
				return fmt.Sprintf("%s: group %s in state %s with %d members", n, g, st, len(want)), false
			}
		}
	}
	h := c.node(nodes[0]).ViewHash()
	for _, n := range nodes[1:] {
		if c.node(n).ViewHash() != h {
			return fmt.Sprintf("%s: view hash %d, %s has %d", n, c.node(n).ViewHash(), nodes[0], h), false
		}
	}
	for _, g := range md.groups {
		want := md.holders(g)
		r := c.node(nodes[0]).Router(g)
		if r.Status != muster.RouteOK {
			return fmt.Sprintf("group %s: router status %v", g, r.Status), false
		}
		rs := c.node(r.Node)
		got, ok := rs.Targets(g, h)
		if !ok {
			return fmt.Sprintf("group %s: router %s cannot decide (status %s)", g, r.Node, rs.Status()), false
		}
		if !slices.Equal(got, want) {
			for _, w := range want {
				if !slices.Contains(got, w) {
					hole = true
				}
			}
			return fmt.Sprintf("group %s: router %s Targets = %v, record holders %v", g, r.Node, got, want), hole
		}
		// No phantom: a node that does not route g keeps no present row
		// for it once the sweeps ran.
		for _, n := range nodes {
			if n == r.Node {
				continue
			}
			if rows := c.node(n).Occupancy(g); len(rows) > 0 {
				return fmt.Sprintf("group %s: non-router %s keeps rows %v (router %s)", g, n, rows, r.Node), false
			}
		}
	}
	return "", false
}

func (md *modelRun) fail(format string, args ...any) {
	md.t.Helper()
	var b strings.Builder
	for _, n := range md.liveNodes() {
		b.WriteString(md.c.node(n).Dump().String())
	}
	b.WriteString("record holders:")
	for _, g := range md.groups {
		fmt.Fprintf(&b, " %s=%v", g, md.holders(g))
	}
	md.t.Fatalf(format+"\n%s", append(args, b.String())...)
}

// onFailure prints the replay command of a failing seed and, with
// MUSTER_MODEL_TRACE_DIR set, writes its timed trace there.
func (md *modelRun) onFailure() {
	if !md.t.Failed() {
		return
	}
	md.t.Logf("FAILING SEED %d: replay with go test -race ./muster -run 'TestModel/seed=%d$' -muster.seed=%d", md.seed, md.seed, md.seed)
	if dir := os.Getenv("MUSTER_MODEL_TRACE_DIR"); dir != "" {
		var all []byte
		for _, e := range md.c.tr.Events() {
			all = append(all, e.At.Format("15:04:05.000000 ")...)
			all = append(all, e.String()...)
			all = append(all, '\n')
		}
		path := fmt.Sprintf("%s/seed-%d.trace", dir, md.seed)
		if err := os.WriteFile(path, all, 0o644); err == nil {
			md.t.Logf("trace written to %s", path)
		}
	}
}
