package muster_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relaygw/relay/internal/testkit/mustertest"
	"github.com/relaygw/relay/internal/trace"
	"github.com/relaygw/relay/muster"
)

var releaseSeq atomic.Int64

// releaser returns a matcher for a test-only release event and the func
// that emits it.
func releaser(c *cluster) (trace.Matcher, func()) {
	id := releaseSeq.Add(1)
	return trace.Kind("test_release", "id", id), func() { c.tr.Emit("test_release", "id", id) }
}

// twoNodes starts a and b, ready with their snapshot rounds acknowledged
// (waitSettled), and returns a group routed to b.
func twoNodes(t *testing.T, mods ...func(string, *muster.Config)) (*cluster, string) {
	c := newCluster(t, 1)
	if len(mods) > 0 {
		c.mod = mods[0]
	}
	c.add("a")
	c.add("b")
	c.waitSettled("a", "b")
	return c, groupRoutedTo("g", []string{"a", "b"}, "b", nil, "")
}

// U:962/974: the first join sends exactly one occupied; a second member sends none.
func TestFirstJoinOneClaimSecondNone(t *testing.T) {
	c, g := twoNodes(t)
	a := c.node("a")
	ctx := ctxT(t)
	if err := a.Join(ctx, g, mustertest.NewMember()); err != nil {
		t.Fatal(err)
	}
	if err := a.Join(ctx, g, mustertest.NewMember()); err != nil {
		t.Fatal(err)
	}
	if n := c.tr.Count(kindOf("muster_occupied_dispatch", "a", "group", g)); n != 1 {
		t.Fatalf("%d claims, want 1", n)
	}
	if got := c.node("b").Occupancy(g); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("router lists %v", got)
	}
}

// U:987: concurrent first joins of one fresh group dedup into one claim;
// U:1050: members are registered only after the router confirmed.
func TestConcurrentFirstJoinsDedup(t *testing.T) {
	c, g := twoNodes(t)
	a := c.node("a")
	until, release := releaser(c)
	c.tr.Park(kindOf("muster_occupied_apply", "b", "span", "start", "group", g), until)
	ctx := ctxT(t)
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- a.Join(ctx, g, mustertest.NewMember())
		}()
	}
	if _, err := c.tr.WaitFor(ctx, kindOf("muster_occupied_apply", "b", "span", "start", "group", g)); err != nil {
		t.Fatal(err)
	}
	if n := len(a.LocalMembers(g)); n != 0 {
		t.Fatalf("%d members registered before the router confirmed", n)
	}
	if st := a.GroupState(g); st != "occupied_pending" {
		t.Fatalf("state %s, want occupied_pending", st)
	}
	release()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := c.tr.Count(kindOf("muster_occupied_dispatch", "a", "group", g)); n != 1 {
		t.Fatalf("%d claims for 50 concurrent joins, want 1", n)
	}
	if n := len(a.LocalMembers(g)); n != 50 {
		t.Fatalf("%d members, want 50", n)
	}
}

// U:1023/1033: a failed claim returns ErrRPCFailed, registers nothing, and
// queues a retraction; the next join retries the claim.
func TestClaimFailureThenRetry(t *testing.T) {
	c, g := twoNodes(t)
	a := c.node("a")
	c.net.Block("a", "b")
	m := mustertest.NewMember()
	if err := a.Join(ctxT(t), g, m); !errors.Is(err, muster.ErrRPCFailed) {
		t.Fatalf("join = %v, want ErrRPCFailed", err)
	}
	if len(a.LocalMembers(g)) != 0 {
		t.Fatal("member registered after a failed claim")
	}
	if st := a.GroupState(g); st != "vacant_queued" {
		t.Fatalf("state %s: a failed claim must keep a record that retracts it", st)
	}
	c.net.Unblock("a", "b")
	if err := a.Join(ctxT(t), g, m); err != nil {
		t.Fatal(err)
	}
	if n := c.tr.Count(kindOf("muster_occupied_dispatch", "a", "group", g)); n != 2 {
		t.Fatalf("%d claims, want 2", n)
	}
	if got := c.node("b").Occupancy(g); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("router lists %v", got)
	}
}

// Caller gone mid-join: the caller's ctx ends while the claim is in flight.
// Join returns the ctx error and the compensating leave leaves no member;
// the group ends retracted at the router.
func TestCallerGoneMidJoin(t *testing.T) {
	c, g := twoNodes(t)
	a, b := c.node("a"), c.node("b")
	until, release := releaser(c)
	c.tr.Park(kindOf("muster_occupied_apply", "b", "span", "start", "group", g), until)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Join(ctx, g, mustertest.NewMember()) }()
	if _, err := c.tr.WaitFor(ctxT(t), kindOf("muster_occupied_apply", "b", "span", "start", "group", g)); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("join = %v, want context.Canceled", err)
	}
	release()
	waitState(t, a, g, "vacant_queued")
	if n := len(a.LocalMembers(g)); n != 0 {
		t.Fatalf("abandoned join left %d members", n)
	}
	a.FlushAll()
	waitState(t, a, g, "nil")
	if got := b.Occupancy(g); len(got) != 0 {
		t.Fatalf("router still lists %v", got)
	}
}

// U:1077: a member that is already done when its claim confirms is removed
// at once and the group is retracted (no phantom).
func TestDeadMemberRemoteRouterRetracts(t *testing.T) {
	c, g := twoNodes(t)
	a, b := c.node("a"), c.node("b")
	m := mustertest.NewMember()
	m.Kill()
	if err := a.Join(ctxT(t), g, m); err != nil {
		t.Fatal(err)
	}
	waitState(t, a, g, "vacant_queued")
	a.FlushAll()
	waitState(t, a, g, "nil")
	if got := b.Occupancy(g); len(got) != 0 {
		t.Fatalf("router still lists %v", got)
	}
}

// Shard crash in each window of the join path (remote router): after the
// pending state is written but before dispatch, and after dispatch (the
// orphaned claim still lands). Either way the restarted shard reconciles to
// vacant_queued, the caller gets ErrRestarted, and the flush leaves the
// router without a row.
func TestShardCrashInRemoteJoinWindows(t *testing.T) {
	for _, point := range []string{"shard.pending.written", "shard.pending.dispatched"} {
		t.Run(point, func(t *testing.T) {
			c, g := twoNodes(t)
			a, b := c.node("a"), c.node("b")
			a.ArmCrash(point, 1)
			if err := a.Join(ctxT(t), g, mustertest.NewMember()); !errors.Is(err, muster.ErrRestarted) {
				t.Fatalf("join = %v, want ErrRestarted", err)
			}
			waitState(t, a, g, "vacant_queued")
			if point == "shard.pending.dispatched" {
				if _, err := c.tr.WaitFor(ctxT(t), kindOf("muster_occupied", "b", "group", g)); err != nil {
					t.Fatal(err)
				}
			}
			a.FlushAll()
			waitState(t, a, g, "nil")
			eventually(t, 5*time.Second, "router row retracted", func() bool { return len(b.Occupancy(g)) == 0 })
			if _, err := c.tr.WaitFor(ctxT(t), kindOf("muster_shard_crash", "a")); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Shard crash in each window of the local-router join path: after the
// member is registered but before the row, and after the row. The join
// answers ErrRestarted and, as that error promises, nothing is registered:
// the member is rolled back, the restarted shard queues the vacancy and the
// flush tombstones any self row. A member of an earlier successful join in
// the same group stays. A retry succeeds.
func TestShardCrashInLocalJoinWindows(t *testing.T) {
	for _, point := range []string{"shard.local.registered", "shard.local.row"} {
		t.Run(point, func(t *testing.T) {
			c := newCluster(t, 1)
			a := c.add("a")
			eventually(t, 5*time.Second, "ready", func() bool { return a.Status() == muster.Ready })
			a.ArmCrash(point, 1)
			m := mustertest.NewMember()
			err := a.Join(ctxT(t), "g", m)
			if !errors.Is(err, muster.ErrRestarted) {
				t.Fatalf("join = %v, want ErrRestarted", err)
			}
			// The answer comes after the rollback.
			if got := a.LocalMembers("g"); len(got) != 0 {
				t.Fatalf("ErrRestarted but members %v registered", got)
			}
			if _, err := c.tr.WaitFor(ctxT(t), kindOf("muster_join_rolled_back", "a", "group", "g", "member", m.ID())); err != nil {
				t.Fatal(err)
			}
			waitState(t, a, "g", "vacant_queued")
			a.FlushAll()
			waitState(t, a, "g", "nil")
			if nodes, ok := a.Targets("g", a.ViewHash()); !ok || len(nodes) != 0 {
				t.Fatalf("Targets after the rolled-back join = %v %v, want [] true", nodes, ok)
			}
			if err := a.Join(ctxT(t), "g", m); err != nil {
				t.Fatalf("retry: %v", err)
			}
			if nodes, ok := a.Targets("g", a.ViewHash()); !ok || !slices.Equal(nodes, []string{"a"}) {
				t.Fatalf("Targets after the retry = %v %v", nodes, ok)
			}
		})
	}
}

// U:1138: join, leave, re-join within the cooldown costs no RPC.
func TestCooldownReclaimNoRPC(t *testing.T) {
	c, g := twoNodes(t, func(_ string, cfg *muster.Config) { cfg.Cooldown = time.Hour })
	a := c.node("a")
	ctx := ctxT(t)
	m := mustertest.NewMember()
	_ = a.Join(ctx, g, m)
	_ = a.Leave(ctx, g, m)
	if st := a.GroupState(g); st != "cooldown" {
		t.Fatalf("state %s", st)
	}
	before := c.net.Sent("a", "b")
	if err := a.Join(ctx, g, m); err != nil {
		t.Fatal(err)
	}
	if n := c.tr.Count(kindOf("muster_occupied_dispatch", "a", "group", g)); n != 1 {
		t.Fatalf("%d claims, want 1", n)
	}
	if a.GroupState(g) != "occupied" {
		t.Fatalf("state %s", a.GroupState(g))
	}
	_ = before
}

// U:2375 (TLA pre-merge finding 1): a cooldown reclaim when we are our own
// router after a coordinator restart must re-assert the self row.
func TestCooldownReclaimAsOwnRouterAfterCoordinatorRestart(t *testing.T) {
	c := newCluster(t, 1)
	c.mod = func(_ string, cfg *muster.Config) { cfg.Cooldown = time.Hour }
	a := c.add("a")
	eventually(t, 5*time.Second, "a ready", func() bool { return a.Status() == muster.Ready })
	g := groupRoutedTo("g", []string{"a", "b"}, "b", []string{"a"}, "a")
	ctx := ctxT(t)
	m := mustertest.NewMember()
	_ = a.Join(ctx, g, m)
	_ = a.Leave(ctx, g, m)
	c.add("b")
	c.waitReady("a", "b")
	eventually(t, 5*time.Second, "a's self row swept", func() bool { return len(a.Occupancy(g)) == 0 })
	c.net.Partition([]string{"a"}, []string{"b"})
	a.ResetCoordinator()
	if _, err := c.tr.WaitForN(ctx, kindOf("muster_coordinator_init", "a"), 2); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "a alone and ready", func() bool {
		return a.Status() == muster.Ready && slices.Equal(a.Members(), []string{"a"})
	})
	if st := a.GroupState(g); st != "cooldown" {
		t.Fatalf("state after restart %s, want cooldown", st)
	}
	if err := a.Join(ctx, g, mustertest.NewMember()); err != nil {
		t.Fatal(err)
	}
	nodes, ok := a.Targets(g, a.ViewHash())
	if !ok || !slices.Equal(nodes, []string{"a"}) {
		t.Fatalf("Targets = %v %v, want [a] (a live member must never read as an empty row)", nodes, ok)
	}
}

// U:1177: a failed vacant batch puts its groups back in the queue; the next
// flush retries and succeeds.
func TestVacantFlushRetryAfterFailedBatch(t *testing.T) {
	c, g := twoNodes(t)
	a, b := c.node("a"), c.node("b")
	ctx := ctxT(t)
	m := mustertest.NewMember()
	_ = a.Join(ctx, g, m)
	_ = a.Leave(ctx, g, m)
	a.ExpireCooldown(g)
	waitState(t, a, g, "vacant_queued")
	c.net.Block("a", "b")
	a.FlushAll()
	if _, err := c.tr.WaitFor(ctx, kindOf("muster_rpc_result", "a", "fn", "vacant_batch", "ok", false)); err != nil {
		t.Fatal(err)
	}
	waitState(t, a, g, "vacant_queued")
	if got := b.Occupancy(g); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("router lost the row without a batch: %v", got)
	}
	c.net.Unblock("a", "b")
	a.FlushAll()
	waitState(t, a, g, "nil")
	if got := b.Occupancy(g); len(got) != 0 {
		t.Fatalf("router still lists %v", got)
	}
}

// U:1209: two groups to one router go in one batch per shard.
func TestVacantFlushBatchesPerRouter(t *testing.T) {
	c := newCluster(t, 1)
	c.mod = func(_ string, cfg *muster.Config) { cfg.Shards = 1 }
	c.add("a")
	c.add("b")
	c.waitReady("a", "b")
	a := c.node("a")
	g1 := groupRoutedTo("x", []string{"a", "b"}, "b", nil, "")
	g2 := groupRoutedTo("y", []string{"a", "b"}, "b", nil, "")
	ctx := ctxT(t)
	for _, g := range []string{g1, g2} {
		m := mustertest.NewMember()
		_ = a.Join(ctx, g, m)
		_ = a.Leave(ctx, g, m)
		a.ExpireCooldown(g)
	}
	a.FlushAll()
	waitState(t, a, g1, "nil")
	waitState(t, a, g2, "nil")
	if n := c.tr.Count(kindOf("muster_rpc_result", "a", "fn", "vacant_batch")); n != 1 {
		t.Fatalf("%d batches, want 1", n)
	}
}

// D:1055: a re-join while the vacant batch is in flight re-claims at once
// with a higher seq; the stale DELETE applied after the INSERT is a no-op.
func TestRejoinDuringVacantFlushDeleteAfterInsert(t *testing.T) {
	c, g := twoNodes(t)
	a, b := c.node("a"), c.node("b")
	ctx := ctxT(t)
	m := mustertest.NewMember()
	if err := a.Join(ctx, g, m); err != nil {
		t.Fatal(err)
	}
	c.tr.Park(kindOf("muster_vacant_batch", "b", "span", "start", "source", "a"), kindOf("muster_occupied", "b", "group", g, "source", "a"))
	_ = a.Leave(ctx, g, m)
	a.ExpireCooldown(g)
	a.FlushAll()
	waitState(t, a, g, "vacant_flushing")
	if _, err := c.tr.WaitFor(ctx, kindOf("muster_vacant_batch", "b", "span", "start", "source", "a")); err != nil {
		t.Fatal(err)
	}
	if err := a.Join(ctx, g, m); err != nil {
		t.Fatal(err)
	}
	if _, err := c.tr.WaitFor(ctx, kindOf("muster_vacant_batch", "b", "span", "complete", "source", "a")); err != nil {
		t.Fatal(err)
	}
	if got := b.Occupancy(g); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("router lists %v after the stale DELETE, want [a]", got)
	}
	if st := a.GroupState(g); st != "occupied" {
		t.Fatalf("state %s", st)
	}
	claims := c.tr.Filter(kindOf("muster_occupied", "b", "group", g, "source", "a"))
	batch := c.tr.Filter(kindOf("muster_vacant_batch", "b", "span", "start", "source", "a"))
	if len(claims) != 2 || !claims[0].Get("seq").(muster.Seq).Less(claims[1].Get("seq").(muster.Seq)) ||
		!batch[0].Get("seq").(muster.Seq).Less(claims[1].Get("seq").(muster.Seq)) {
		t.Fatalf("want two claims with increasing seqs above the batch's: %v %v", claims, batch)
	}
}

// D:1199: the reverse race: the claim's INSERT is parked until a higher-seq
// vacant batch (from the restarted shard's reconciliation) tombstoned the
// row; the late INSERT then loses. No resurrection.
func TestRejoinRaceInsertAfterDelete(t *testing.T) {
	c, g := twoNodes(t)
	a, b := c.node("a"), c.node("b")
	ctx := ctxT(t)
	c.tr.Park(kindOf("muster_occupied_apply", "b", "span", "start", "group", g), kindOf("muster_vacant_batch", "b", "span", "complete", "source", "a"))
	done := make(chan error, 1)
	go func() { done <- a.Join(ctx, g, mustertest.NewMember()) }()
	if _, err := c.tr.WaitFor(ctx, kindOf("muster_occupied_apply", "b", "span", "start", "group", g)); err != nil {
		t.Fatal(err)
	}
	waitState(t, a, g, "occupied_pending")
	a.CrashShard(g)
	if err := <-done; !errors.Is(err, muster.ErrRestarted) {
		t.Fatalf("join = %v", err)
	}
	waitState(t, a, g, "vacant_queued")
	a.FlushAll()
	ins, err := c.tr.WaitFor(ctx, kindOf("muster_occupied_apply", "b", "span", "complete", "group", g))
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, a, g, "nil")
	if got := b.Occupancy(g); len(got) != 0 {
		t.Fatalf("late INSERT resurrected the row: %v", got)
	}
	del := c.tr.Filter(kindOf("muster_vacant_batch", "b", "span", "start", "source", "a"))
	if !ins.Get("seq").(muster.Seq).Less(del[0].Get("seq").(muster.Seq)) || ins.Get("changed") != false {
		t.Fatalf("INSERT %v must carry a lower seq than DELETE %v and change nothing", ins, del[0])
	}
}

// D:2495: the router dies while a claim is parked there: the join fails, the
// pid is not a member, the vacancy queued by the failure drains to nil once
// the group is self-routed.
func TestClaimFailsWhenRouterDies(t *testing.T) {
	c, g := twoNodes(t)
	a := c.node("a")
	until, release := releaser(c)
	defer release()
	c.tr.Park(kindOf("muster_occupied_apply", "b", "span", "start", "group", g), until)
	ctx := ctxT(t)
	done := make(chan error, 1)
	go func() { done <- a.Join(ctx, g, mustertest.NewMember()) }()
	if _, err := c.tr.WaitFor(ctx, kindOf("muster_occupied_apply", "b", "span", "start", "group", g)); err != nil {
		t.Fatal(err)
	}
	c.net.Kill("b")
	if err := <-done; !errors.Is(err, muster.ErrRPCFailed) {
		t.Fatalf("join = %v, want ErrRPCFailed", err)
	}
	c.node("a").ForceDown("b")
	eventually(t, 5*time.Second, "a alone ready", func() bool {
		return a.Status() == muster.Ready && slices.Equal(a.Members(), []string{"a"})
	})
	a.FlushAll()
	waitState(t, a, g, "nil")
	if len(a.LocalMembers(g)) != 0 || len(a.Occupancy(g)) != 0 {
		t.Fatalf("members %v rows %v", a.LocalMembers(g), a.Occupancy(g))
	}
	release()
	b := c.node("b")
	c.mu.Lock()
	delete(c.nodes, "b")
	c.mu.Unlock()
	_ = b.Close()
}

var _ = fmt.Sprint
