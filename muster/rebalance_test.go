package muster_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/relaygw/relay/internal/testkit/mustertest"
	"github.com/relaygw/relay/muster"
)

func longRPC(_ string, cfg *muster.Config) { cfg.RPCTimeout = 30 * time.Second }

func joinOK(t *testing.T, s *muster.Scope, g string) *mustertest.Member {
	t.Helper()
	m := mustertest.NewMember()
	if err := s.Join(ctxT(t), g, m); err != nil {
		t.Fatalf("join %s on %s: %v", g, s.Node(), err)
	}
	return m
}

func waitOwedEmpty(t *testing.T, s *muster.Scope) {
	t.Helper()
	eventually(t, 10*time.Second, s.Node()+" owes nothing", func() bool { return len(s.Owed()) == 0 })
}

// U:1297 / U:1322: a rebalance announces occupied and cooldown groups to
// their new router, but not queued vacancies.
func TestRebalanceAnnouncesHeldNotQueued(t *testing.T) {
	c := newCluster(t, 1)
	c.mod = func(_ string, cfg *muster.Config) { cfg.Cooldown = time.Hour }
	a := c.add("a")
	eventually(t, 5*time.Second, "ready", func() bool { return a.Status() == muster.Ready })
	occ := groupRoutedTo("occ", []string{"a", "b"}, "b", nil, "")
	cool := groupRoutedTo("cool", []string{"a", "b"}, "b", nil, "")
	queued := groupRoutedTo("q", []string{"a", "b"}, "b", nil, "")
	joinOK(t, a, occ)
	m := joinOK(t, a, cool)
	_ = a.Leave(ctxT(t), cool, m)
	m = joinOK(t, a, queued)
	_ = a.Leave(ctxT(t), queued, m)
	a.ExpireCooldown(queued)
	b := c.add("b")
	c.waitReady("a", "b")
	eventually(t, 5*time.Second, "b lists a for held groups", func() bool {
		return slices.Equal(b.Occupancy(occ), []string{"a"}) && slices.Equal(b.Occupancy(cool), []string{"a"})
	})
	if got := b.Occupancy(queued); len(got) != 0 {
		t.Fatalf("queued vacancy announced: %v", got)
	}
}

// D:482 / U:1651 / TLA "the delta path is reachable only through a shrink
// of 3+ nodes": when d leaves {t,s,d}, t sends s a delta with exactly the
// groups that moved onto s, never the ones s already had, and no full
// snapshot.
func TestShrinkOfThreeSendsDelta(t *testing.T) {
	c := newCluster(t, 1)
	c.add("t")
	c.add("s")
	c.waitReady("t", "s")
	c.add("d")
	c.waitReady("t", "s", "d")
	tt, s := c.node("t"), c.node("s")
	three, two := []string{"d", "s", "t"}, []string{"s", "t"}
	keep := groupRoutedTo("keep", three, "s", two, "s")
	move := groupRoutedTo("move", three, "d", two, "s")
	joinOK(t, tt, keep)
	joinOK(t, tt, move)
	waitOwedEmpty(t, tt)
	fullBefore := c.tr.Count(kindOf("muster_round_dispatch", "t", "router", "s", "full", true))
	c.stop("d")
	c.waitReady("t", "s")
	deltas := c.tr.Filter(kindOf("muster_round_dispatch", "t", "router", "s", "full", false))
	if len(deltas) != 1 || deltas[0].Get("groups") != 1 {
		t.Fatalf("deltas t→s: %v, want one carrying exactly the moved group", deltas)
	}
	if n := c.tr.Count(kindOf("muster_round_dispatch", "t", "router", "s", "full", true)); n != fullBefore {
		t.Fatalf("full snapshots t→s went from %d to %d on a shrink", fullBefore, n)
	}
	eventually(t, 5*time.Second, "s lists t for both", func() bool {
		return slices.Equal(s.Occupancy(keep), []string{"t"}) && slices.Equal(s.Occupancy(move), []string{"t"})
	})
}

// D:942: the receiver owns removes: when d joins, s drops (move, t) by its
// own sweep; when d leaves, a delta re-adds it.
func TestReceiverOwnsRemoves(t *testing.T) {
	c := newCluster(t, 1)
	c.add("t")
	c.add("s")
	c.waitReady("t", "s")
	tt, s := c.node("t"), c.node("s")
	three, two := []string{"d", "s", "t"}, []string{"s", "t"}
	keep := groupRoutedTo("keep", two, "s", three, "s")
	move := groupRoutedTo("move", two, "s", three, "d")
	joinOK(t, tt, keep)
	joinOK(t, tt, move)
	c.add("d")
	c.waitReady("t", "s", "d")
	if _, err := c.tr.WaitFor(ctxT(t), kindOf("muster_drop_stale_entry", "s", "group", move, "source", "t")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "d lists t", func() bool { return slices.Equal(c.node("d").Occupancy(move), []string{"t"}) })
	if !slices.Equal(s.Occupancy(keep), []string{"t"}) {
		t.Fatal("s lost the group it kept routing")
	}
	waitOwedEmpty(t, tt)
	fullBefore := c.tr.Count(kindOf("muster_round_dispatch", "t", "router", "s", "full", true))
	c.stop("d")
	c.waitReady("t", "s")
	eventually(t, 5*time.Second, "s lists t for both", func() bool {
		return slices.Equal(s.Occupancy(keep), []string{"t"}) && slices.Equal(s.Occupancy(move), []string{"t"})
	})
	if n := c.tr.Count(kindOf("muster_round_dispatch", "t", "router", "s", "full", true)); n != fullBefore {
		t.Fatal("a full snapshot went to s on the shrink")
	}
	if n := c.tr.Count(kindOf("muster_drop_stale_entry", "t", "group", move)); n != 0 {
		t.Fatal("only s may drop the moved row")
	}
}

// D:582 / U:1705: a router still owed an un-acked round gets a full
// snapshot on the next rebalance, never a delta.
func TestOwedRouterGetsFullSnapshot(t *testing.T) {
	c := newCluster(t, 1)
	c.mod = longRPC
	c.add("t")
	c.add("o")
	c.waitReady("t", "o")
	tt := c.node("t")
	three, two := []string{"o", "s", "t"}, []string{"s", "t"}
	park := groupRoutedTo("park", three, "s", two, "s")
	move := groupRoutedTo("move", three, "o", two, "s")
	joinOK(t, tt, park)
	joinOK(t, tt, move)
	until, release := releaser(c)
	c.tr.Park(kindOf("muster_round_apply", "s", "span", "start", "source", "t"), until)
	c.add("s")
	if _, err := c.tr.WaitFor(ctxT(t), kindOf("muster_round_apply", "s", "span", "start", "source", "t")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "t owes s", func() bool { return slices.Contains(tt.Owed(), "s") })
	c.stop("o")
	if _, err := c.tr.WaitFor(ctxT(t), withList(kindOf("muster_rebalance_done", "t"), "members", []string{"s", "t"})); err != nil {
		t.Fatal(err)
	}
	release()
	c.waitReady("t", "s")
	s := c.node("s")
	eventually(t, 5*time.Second, "s lists t", func() bool {
		return slices.Equal(s.Occupancy(park), []string{"t"}) && slices.Equal(s.Occupancy(move), []string{"t"})
	})
	if n := c.tr.Count(kindOf("muster_round_dispatch", "t", "router", "s", "full", false)); n != 0 {
		t.Fatalf("%d deltas to an owed router", n)
	}
}

// A late occupied that lands on the old router after it rebalanced away
// and ran both its sweeps is removed by the periodic sweep.
func TestLateOccupiedAfterBothSweeps(t *testing.T) {
	c := newCluster(t, 1)
	c.mod = longRPC
	c.add("a")
	c.add("b")
	c.waitReady("a", "b")
	a, b := c.node("a"), c.node("b")
	g := groupRoutedTo("g", []string{"a", "b"}, "b", []string{"a", "b", "c"}, "c")
	until, release := releaser(c)
	c.tr.Park(kindOf("muster_occupied_apply", "b", "span", "start", "group", g), until)
	done := make(chan error, 1)
	go func() { done <- a.Join(ctxT(t), g, mustertest.NewMember()) }()
	if _, err := c.tr.WaitFor(ctxT(t), kindOf("muster_occupied_apply", "b", "span", "start", "group", g)); err != nil {
		t.Fatal(err)
	}
	c.add("c")
	if err := <-done; err != nil {
		t.Fatalf("pending join settled by the rebalance: %v", err)
	}
	c.waitReady("a", "b", "c")
	eventually(t, 5*time.Second, "c lists a", func() bool { return slices.Equal(c.node("c").Occupancy(g), []string{"a"}) })
	release()
	if _, err := c.tr.WaitFor(ctxT(t), kindOf("muster_occupied", "b", "group", g, "source", "a")); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(b.Occupancy(g), []string{"a"}) {
		t.Fatal("the late write did not land")
	}
	b.Tick("gc")
	if _, err := c.tr.WaitFor(ctxT(t), kindOf("muster_drop_stale_entry", "b", "group", g, "source", "a")); err != nil {
		t.Fatal(err)
	}
	if got := b.Occupancy(g); len(got) != 0 {
		t.Fatalf("phantom row survived the periodic sweep: %v", got)
	}
	if nodes, ok := c.node("c").Targets(g, a.ViewHash()); !ok || !slices.Equal(nodes, []string{"a"}) {
		t.Fatalf("Targets on c = %v %v", nodes, ok)
	}
}

// The sweep's delete matches the exact seq it judged: a re-claim that raised
// the row between judging and deleting survives.
func TestSweepExactSeqDeleteSparesReclaim(t *testing.T) {
	c := newCluster(t, 1)
	c.add("a")
	c.add("b")
	c.waitReady("a", "b")
	a, b := c.node("a"), c.node("b")
	g := groupRoutedTo("g", []string{"a", "b"}, "a", nil, "")
	inc := a.Incarnation()
	if err := b.WriteOccupied(g, "a", muster.Seq{Inc: inc, N: 1}); err != nil {
		t.Fatal(err)
	}
	until, release := releaser(c)
	c.tr.Park(kindOf("muster_drop_stale_judged", "b", "group", g), until)
	b.Tick("gc")
	if _, err := c.tr.WaitFor(ctxT(t), kindOf("muster_drop_stale_judged", "b", "group", g)); err != nil {
		t.Fatal(err)
	}
	raised := muster.Seq{Inc: inc, N: 1 << 40}
	if err := b.WriteOccupied(g, "a", raised); err != nil {
		t.Fatal(err)
	}
	release()
	_ = b.Dump() // the coordinator answered, so the sweep is over
	if seq, tomb, ok := b.Row(g, "a"); !ok || tomb || seq != raised {
		t.Fatalf("row %v tomb=%v ok=%v, want the raised row kept", seq, tomb, ok)
	}
	if n := c.tr.Count(kindOf("muster_drop_stale_entry", "b", "group", g)); n != 0 {
		t.Fatal("sweep deleted the re-claimed row")
	}
}

// Fresher incarnation races in both directions (TLA pre-merge finding 2):
// a departure deletes only the departed incarnation's rows, whether the new
// incarnation's data landed before it or after it; a late write from the
// departed incarnation is refused.
func TestFresherIncarnationRaces(t *testing.T) {
	c := newCluster(t, 1)
	c.add("b")
	b := c.node("b")
	// "x" is a source node seen only through its writes, so its
	// incarnations are under the test's control.
	const old, newer = uint64(100), uint64(105)
	// New data first, then the old incarnation's departure.
	if err := b.WriteOccupied("gold", "x", muster.Seq{Inc: old, N: 3}); err != nil {
		t.Fatal(err)
	}
	if err := b.WriteOccupied("gnew", "x", muster.Seq{Inc: newer, N: 1}); err != nil {
		t.Fatal(err)
	}
	b.Depart("x", old)
	if got := b.Occupancy("gnew"); !slices.Equal(got, []string{"x"}) {
		t.Fatalf("departure of the old incarnation removed the new one's row: %v", got)
	}
	if got := b.Occupancy("gold"); len(got) != 0 {
		t.Fatalf("old incarnation's row survived: %v", got)
	}
	// Departure first, then data: the new incarnation's write lands, a late
	// write from the departed one is refused.
	if err := b.WriteOccupied("gnew2", "x", muster.Seq{Inc: newer, N: 2}); err != nil {
		t.Fatal(err)
	}
	if err := b.WriteOccupied("glate", "x", muster.Seq{Inc: old, N: 9}); err == nil {
		t.Fatal("late write from a departed incarnation accepted")
	}
	if len(b.Occupancy("glate")) != 0 || !slices.Equal(b.Occupancy("gnew2"), []string{"x"}) {
		t.Fatal("wrong rows after departure-first order")
	}
	// A departure event for the superseded incarnation arriving late
	// changes nothing.
	b.Depart("x", old)
	if !slices.Equal(b.Occupancy("gnew"), []string{"x"}) {
		t.Fatal("late departure removed the fresher rows")
	}
}

// Losing Muster's state inside a live process never reuses the identity: a
// coordinator reset takes a new incarnation, peers treat it as a departure
// plus a join, and the node's groups are re-announced under it.
func TestCoordinatorResetTakesNewIncarnation(t *testing.T) {
	c := newCluster(t, 1)
	c.add("a")
	c.add("b")
	c.waitReady("a", "b")
	a, b := c.node("a"), c.node("b")
	g := groupRoutedTo("g", []string{"a", "b"}, "b", nil, "")
	joinOK(t, a, g)
	old := a.Incarnation()
	a.ResetCoordinator()
	eventually(t, 10*time.Second, "new incarnation", func() bool { return a.Incarnation() > old })
	c.waitReady("a", "b")
	eventually(t, 5*time.Second, "b lists a under its new incarnation", func() bool {
		seq, tomb, ok := b.Row(g, "a")
		return ok && !tomb && seq.Inc == a.Incarnation()
	})
	if a.GroupState(g) != "occupied" || len(a.LocalMembers(g)) != 1 {
		t.Fatal("local membership lost across the reset")
	}
}

// Owed snapshot withheld from the heartbeat and from the handshake (TLA
// pre-merge findings 3 and 4): while c's snapshot from a is unapplied, a
// sends c no bare marker and answers c's discover without its view.
func TestOwedSnapshotWithheldFromHeartbeatAndHandshake(t *testing.T) {
	c := newCluster(t, 1)
	c.mod = longRPC
	c.add("a")
	c.add("b")
	c.waitReady("a", "b")
	a := c.node("a")
	until, release := releaser(c)
	c.tr.Park(kindOf("muster_round_apply", "c", "span", "start", "source", "a"), until)
	cs := c.add("c")
	parked, err := c.tr.WaitFor(ctxT(t), kindOf("muster_round_apply", "c", "span", "start", "source", "a"))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "a owes c", func() bool { return slices.Contains(a.Owed(), "c") })
	for i := 0; i < 3; i++ {
		a.Tick("heartbeat")
	}
	cs.SendDiscover("a")
	ack, err := c.tr.WaitAfter(ctxT(t), parked.Seq, kindOf("muster_discover_ack_sent", "a", "to", "c"))
	if err != nil {
		t.Fatal(err)
	}
	if ack.Get("withheld") != true {
		t.Fatalf("discover-ack to an owed node carried our view: %v", ack)
	}
	_ = a.Dump() // heartbeats processed
	for _, e := range c.tr.Filter(kindOf("muster_marker_sent", "a", "to", "c")) {
		if e.Seq > parked.Seq {
			t.Fatalf("bare marker to an owed node: %v", e)
		}
	}
	release()
	c.waitReady("a", "b", "c")
}

// An asymmetric partition (a and b split, c sees both) keeps every node
// converging, so routers flood instead of trusting their tables; the heal
// re-converges.
func TestAsymmetricPartitionKeepsConvergingAndFlooding(t *testing.T) {
	c := newCluster(t, 1)
	for _, n := range []string{"a", "b", "c"} {
		c.add(n)
	}
	c.waitReady("a", "b", "c")
	c.net.Block("a", "b")
	c.net.Block("b", "a")
	c.node("a").ForceDown("b")
	c.node("b").ForceDown("a")
	if _, err := c.tr.WaitFor(ctxT(t), kindOf("muster_peer_down", "a", "peer", "b")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.tr.WaitFor(ctxT(t), kindOf("muster_peer_down", "b", "peer", "a")); err != nil {
		t.Fatal(err)
	}
	// Let several heartbeat rounds pass.
	last := c.tr.Count(kindOf("muster_marker_sent", "c"))
	if _, err := c.tr.WaitForN(ctxT(t), kindOf("muster_marker_sent", "c"), last+6); err != nil {
		t.Fatal(err)
	}
	for _, s := range c.all() {
		if s.Status() == muster.Ready {
			t.Fatalf("%s ready during an asymmetric partition:\n%s", s.Node(), s.Dump())
		}
		if _, ok := s.Targets("g", s.ViewHash()); ok {
			t.Fatalf("%s decided targets during the partition", s.Node())
		}
	}
	c.net.Heal()
	c.waitReady("a", "b", "c")
}

// Cascading joins (with a frozen old member delaying the prepare round)
// converge to the final view only: rounds toward intermediate views are
// superseded, and every node ends ready on the final view.
func TestCascadingJoinsWithFrozenPeerConvergeToFinalView(t *testing.T) {
	c := newCluster(t, 1)
	c.mod = longRPC
	c.add("a")
	c.add("b")
	c.waitReady("a", "b")
	c.net.Freeze("b")
	c.add("c")
	if _, err := c.tr.WaitFor(ctxT(t), withList(kindOf("muster_view_prepare", "a"), "to", []string{"a", "b", "c"})); err != nil {
		t.Fatal(err)
	}
	c.add("d")
	if _, err := c.tr.WaitFor(ctxT(t), withList(kindOf("muster_view_prepare", "a"), "to", []string{"a", "b", "c", "d"})); err != nil {
		t.Fatal(err)
	}
	c.net.Thaw("b")
	c.waitReady("a", "b", "c", "d")
	for _, e := range c.tr.Filter(kindOf("muster_rebalance_start", "a")) {
		if slices.Equal(e.Get("to").([]string), []string{"a", "b", "c"}) {
			t.Fatalf("a committed the superseded view: %v", e)
		}
	}
	final := c.node("a").ViewHash()
	for _, s := range c.all() {
		ready := c.tr.Filter(kindOf("muster_status_change", s.Node(), "to", "ready"))
		if ready[len(ready)-1].Get("view_hash") != final {
			t.Fatalf("%s's last ready is not on the final view", s.Node())
		}
	}
}

// Cancel after a partial ack (TLA "cancel stranding"): a prepares b and c
// for d; b acks, c is frozen; d leaves, so a cancels, raising its watermark
// past the round and re-announcing. Everyone converges on the old view.
func TestCancelAfterPartialAck(t *testing.T) {
	c := newCluster(t, 1)
	c.mod = longRPC
	for _, n := range []string{"a", "b", "c"} {
		c.add(n)
	}
	c.waitReady("a", "b", "c")
	c.net.Freeze("c")
	mark := c.mark()
	c.add("d")
	if _, err := c.tr.WaitAfter(ctxT(t), mark, kindOf("muster_transition_applied", "b", "source", "a")); err != nil {
		t.Fatal(err)
	}
	c.stop("d")
	if _, err := c.tr.WaitFor(ctxT(t), kindOf("muster_view_cancel", "a")); err != nil {
		t.Fatal(err)
	}
	c.net.Thaw("c")
	c.waitReady("a", "b", "c")
}

// A prepare that fails toward a member still in the target resets the
// coordinator; the cluster still converges.
func TestPrepareFailureResetsCoordinator(t *testing.T) {
	c := newCluster(t, 1)
	c.add("a")
	c.add("b")
	c.waitReady("a", "b")
	c.net.Block("a", "b")
	c.add("c")
	ev, err := c.tr.WaitFor(ctxT(t), kindOf("muster_coordinator_crash", "a"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ev.Get("reason").(string), "prepare") {
		t.Fatalf("reset for %v", ev)
	}
	c.net.Unblock("a", "b")
	c.waitReady("a", "b", "c")
}

// D:2798: a round that fails at its router resets the sender, which
// re-announces; the router ends up listing the holder.
func TestRoundFailureResetsSenderAndRecovers(t *testing.T) {
	c := newCluster(t, 1)
	c.mod = func(_ string, cfg *muster.Config) { cfg.RPCTimeout = 300 * time.Millisecond }
	c.add("r")
	c.add("t")
	c.waitReady("r", "t")
	tt := c.node("t")
	g := groupRoutedTo("g", []string{"r", "t"}, "r", []string{"c", "r", "t"}, "c")
	joinOK(t, tt, g)
	cs := c.add("c", func(cfg *muster.Config) {})
	cs.ArmCrash("coordinator.round.apply", 1)
	if _, err := c.tr.WaitFor(ctxT(t), kindOf("muster_injected_crash", "c")); err != nil {
		t.Fatal(err)
	}
	c.waitReady("r", "t", "c")
	eventually(t, 10*time.Second, "c lists t", func() bool { return slices.Equal(cs.Occupancy(g), []string{"t"}) })
	if len(tt.LocalMembers(g)) != 1 {
		t.Fatal("t lost its member")
	}
}

// D:3016: a shard that does not answer the gather in time resets the
// coordinator; after it answers, the cluster converges.
func TestGatherTimeoutResetsCoordinator(t *testing.T) {
	c := newCluster(t, 1)
	c.mod = func(n string, cfg *muster.Config) {
		if n == "t" {
			cfg.GatherTimeout = 150 * time.Millisecond
		}
	}
	c.add("t")
	c.add("r")
	c.waitReady("t", "r")
	until, release := releaser(c)
	c.tr.Park(kindOf("muster_shard_gather", "t", "shard", 0), until)
	c.add("c")
	if _, err := c.tr.WaitFor(ctxT(t), kindOf("muster_coordinator_crash", "t")); err != nil {
		t.Fatal(err)
	}
	release()
	c.waitReady("t", "r", "c")
	joinOK(t, c.node("t"), "after")
}

// D:2386: a self-routed flush that tombstones a group while the rebalance
// gather is parked wins over the coordinator's later, lower-seq self upsert.
func TestSelfRoutedFlushRacingGather(t *testing.T) {
	c := newCluster(t, 1)
	c.mod = func(_ string, cfg *muster.Config) { cfg.GatherTimeout = 30 * time.Second }
	c.add("t")
	c.add("r")
	c.waitReady("t", "r")
	tt := c.node("t")
	var g string
	for i := 0; ; i++ {
		g = groupRoutedTo("g"+string(rune('a'+i%26)), []string{"r", "t"}, "r", nil, "")
		if tt.ShardIndex(g) == 0 {
			break
		}
	}
	m := joinOK(t, tt, g)
	until, release := releaser(c)
	c.tr.Park(kindOf("muster_shard_gather", "t", "shard", 1), until)
	c.stop("r")
	if _, err := c.tr.WaitFor(ctxT(t), kindOf("muster_shard_gather", "t", "shard", 1)); err != nil {
		t.Fatal(err)
	}
	m.Kill()
	waitState(t, tt, g, "cooldown")
	tt.ExpireCooldown(g)
	tt.FlushAll()
	waitState(t, tt, g, "nil")
	release()
	eventually(t, 10*time.Second, "t alone ready", func() bool {
		return tt.Status() == muster.Ready && slices.Equal(tt.Members(), []string{"t"})
	})
	if got := tt.Occupancy(g); len(got) != 0 {
		t.Fatalf("rebalance self-upsert resurrected the flushed group: %v", got)
	}
}

// Finding B residual, accepted and documented: right after s's coordinator
// resets, a router r that has not yet processed s's new incarnation is still
// ready on the old view and answers a fresh self-routed join on s with
// {ok, []}. The window closes when r processes the new incarnation.
func TestFindingBResidualWindow(t *testing.T) {
	c := newCluster(t, 1)
	c.add("r")
	c.add("s")
	c.waitReady("r", "s")
	r, s := c.node("r"), c.node("s")
	g := groupRoutedTo("g", []string{"r", "s"}, "r", []string{"s"}, "s")
	c.net.Freeze("r")
	s.ResetCoordinator()
	eventually(t, 10*time.Second, "s alone and ready", func() bool {
		return s.Status() == muster.Ready && slices.Equal(s.Members(), []string{"s"})
	})
	joinOK(t, s, g)
	// The characterised miss: r still routes g, is ready, lists nobody.
	if rt := r.Router(g); rt.Node != "r" {
		t.Fatalf("r routes %v", rt)
	}
	if nodes, ok := r.Targets(g, r.ViewHash()); !ok || len(nodes) != 0 {
		t.Fatalf("Targets on r = %v %v; the documented window has changed", nodes, ok)
	}
	c.net.Thaw("r")
	c.waitReady("r", "s")
	router := c.node(r.Router(g).Node)
	eventually(t, 5*time.Second, "router lists s", func() bool {
		nodes, ok := router.Targets(g, s.ViewHash())
		return ok && slices.Equal(nodes, []string{"s"})
	})
}

// Drain: joins are refused, peers depart the drained node and re-home its
// router role, then Drain returns; with a frozen peer it times out naming it.
func TestDrain(t *testing.T) {
	c := newCluster(t, 1)
	for _, n := range []string{"a", "b", "c"} {
		c.add(n)
	}
	c.waitReady("a", "b", "c")
	a, b := c.node("a"), c.node("b")
	g := groupRoutedTo("g", []string{"a", "b", "c"}, "a", []string{"b", "c"}, "b")
	joinOK(t, c.node("c"), g)
	if err := a.Drain(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := a.Join(ctxT(t), "x", mustertest.NewMember()); !errors.Is(err, muster.ErrDraining) {
		t.Fatalf("join after drain = %v", err)
	}
	c.waitReady("b", "c")
	eventually(t, 5*time.Second, "b took over g", func() bool { return slices.Equal(b.Occupancy(g), []string{"c"}) })

	c2 := newCluster(t, 2)
	c2.add("x")
	c2.add("y")
	c2.waitReady("x", "y")
	c2.net.Freeze("y")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := c2.node("x").Drain(ctx)
	var de *muster.DrainError
	if !errors.As(err, &de) || !errors.Is(err, muster.ErrDrainTimeout) || !slices.Equal(de.Unacked, []string{"y"}) {
		t.Fatalf("drain = %v, want DrainError naming y", err)
	}
	c2.net.Thaw("y")
}

// A deadline that falls during the settle, after every peer acknowledged the
// departure, ends a complete hand-off: Drain returns nil, not a DrainError
// with an empty list. Forced ordering: the settle is an hour long, and ctx is
// cancelled only once the last acknowledgement started it.
func TestDrainDeadlineDuringSettleIsDone(t *testing.T) {
	c := newCluster(t, 1)
	c.add("a", func(cfg *muster.Config) { cfg.DrainSettle = time.Hour })
	c.add("b")
	c.add("c")
	c.waitReady("a", "b", "c")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.node("a").Drain(ctx) }()
	if _, err := c.tr.WaitFor(ctxT(t), kindOf("muster_drain_settle", "a")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"b", "c"} {
		if _, err := c.tr.WaitFor(ctxT(t), kindOf("muster_peer_down", p, "peer", "a", "reason", "leaving")); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("drain cut during the settle = %v, want nil", err)
	}
	if _, err := c.tr.WaitFor(ctxT(t), kindOf("muster_drain_settle_cut", "a")); err != nil {
		t.Fatal(err)
	}
	c.waitReady("b", "c")
}

// Anti-entropy re-asserts a held group whose row the router lost, as an
// add-only delta, without touching owed snapshots.
func TestAntiEntropyRepairsLostRow(t *testing.T) {
	c, g := twoNodes(t)
	a, b := c.node("a"), c.node("b")
	joinOK(t, a, g)
	if !b.DropRow(g, "a") {
		t.Fatal("no row to drop")
	}
	a.Tick("ae")
	eventually(t, 5*time.Second, "row repaired", func() bool { return slices.Equal(b.Occupancy(g), []string{"a"}) })
	if len(a.Owed()) != 0 {
		t.Fatal("anti-entropy recorded an owed snapshot")
	}
}

// The event-driven path converges growth and shrink on its own (the view
// heartbeat is only the backstop): with the heartbeat an hour away, a round
// still owed when the next view commits announces that view on its ack.
func TestConvergesWithoutHeartbeat(t *testing.T) {
	c := newCluster(t, 1)
	c.mod = func(_ string, cfg *muster.Config) {
		cfg.ViewHeartbeat = time.Hour
		cfg.PingInterval = 10 * time.Second
		cfg.PeerDownAfter = time.Minute
	}
	for _, n := range []string{"a", "b", "c", "d"} {
		c.add(n)
	}
	c.waitReady("a", "b", "c", "d")
	c.stop("d")
	c.waitReady("a", "b", "c")
}
