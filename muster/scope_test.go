package muster_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/relaygw/relay/internal/testkit/mustertest"
	"github.com/relaygw/relay/muster"
)

func TestNewRejectsBadConfig(t *testing.T) {
	c := newCluster(t, 1)
	cases := map[string]func(*muster.Config){
		"Transport":     func(c *muster.Config) { c.Transport = nil },
		"Node":          func(c *muster.Config) { c.Node = "" },
		"differs":       func(c *muster.Config) { c.Node = "other" },
		"Cooldown":      func(c *muster.Config) { c.Cooldown = -5 },
		"PeerDownAfter": func(c *muster.Config) { c.PeerDownAfter = c.PingInterval },
		"VacantFlush":   func(c *muster.Config) { c.VacantFlush = -1 },
	}
	for name, mod := range cases {
		cfg := c.config("a")
		mod(&cfg)
		if _, err := muster.New(cfg); !errors.Is(err, muster.ErrInvalidConfig) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: New = %v, want muster.ErrInvalidConfig naming it", name, err)
		}
	}
	d := muster.DefaultConfig()
	if d.Cooldown != 30*time.Second || d.VacantFlush != 5*time.Second || d.ViewHeartbeat != 10*time.Second ||
		d.VirtualNodes != 128 || d.TombstoneWindow != 5*d.RPCTimeout || d.GatherTimeout != 15*time.Second ||
		d.SingletonPromotion != 30*time.Second {
		t.Fatalf("defaults differ from the spec: %+v", d)
	}
}

func TestSingleNodeStartsConvergingThenPromotes(t *testing.T) {
	c := newCluster(t, 1)
	c.mod = func(_ string, cfg *muster.Config) { cfg.SingletonPromotion = time.Hour }
	s := c.add("a")
	if s.Status() != muster.Converging {
		t.Fatalf("fresh scope status %s, want converging", s.Status())
	}
	if r := s.Router("g"); r.Status != muster.RouteOK || r.Node != "a" {
		t.Fatalf("Router = %+v", r)
	}
	if _, ok := s.Targets("g", s.ViewHash()); ok {
		t.Fatal("Targets decided before promotion")
	}
	s.Promote()
	if _, err := c.tr.WaitFor(ctxT(t), kindOf("muster_singleton_promoted", "a")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "ready", func() bool { return s.Status() == muster.Ready })
	if got := s.Members(); len(got) != 1 || got[0] != "a" {
		t.Fatalf("Members = %v", got)
	}
}

// U:669/678/686: a join on the local router writes the self row with zero RPCs.
func TestJoinLocalRouterWritesSelfRowNoRPC(t *testing.T) {
	c := newCluster(t, 1)
	s := c.add("a")
	eventually(t, 5*time.Second, "ready", func() bool { return s.Status() == muster.Ready })
	m1, m2 := mustertest.NewMember(), mustertest.NewMember()
	ctx := ctxT(t)
	if err := s.Join(ctx, "g", m1); err != nil {
		t.Fatal(err)
	}
	if err := s.Join(ctx, "g", m2); err != nil {
		t.Fatal(err)
	}
	if err := s.Join(ctx, "g", m2); err != nil {
		t.Fatal(err)
	}
	if got := s.LocalMembers("g"); len(got) != 2 {
		t.Fatalf("members %v, want 2", got)
	}
	nodes, ok := s.Targets("g", s.ViewHash())
	if !ok || len(nodes) != 1 || nodes[0] != "a" {
		t.Fatalf("Targets = %v %v", nodes, ok)
	}
	if n := c.tr.Count(kindOf("muster_occupied_dispatch", "a")); n != 0 {
		t.Fatalf("%d claim RPCs for a self-routed group", n)
	}
	if s.GroupState("g") != "occupied" {
		t.Fatalf("state %s", s.GroupState("g"))
	}
}

// S: leaving one of two stays occupied; the last leave cools down; a
// re-join during cooldown goes straight back to occupied; after the cooldown
// the vacancy is queued and a flush retracts the self row.
func TestLeaveCooldownQueueFlushSelfRouted(t *testing.T) {
	c := newCluster(t, 1)
	c.mod = func(_ string, cfg *muster.Config) { cfg.Cooldown = time.Hour }
	s := c.add("a")
	ctx := ctxT(t)
	m1, m2 := mustertest.NewMember(), mustertest.NewMember()
	_ = s.Join(ctx, "g", m1)
	_ = s.Join(ctx, "g", m2)
	if err := s.Leave(ctx, "g", m1); err != nil {
		t.Fatal(err)
	}
	if s.GroupState("g") != "occupied" {
		t.Fatalf("after one leave: %s", s.GroupState("g"))
	}
	_ = s.Leave(ctx, "g", m2)
	_ = s.Leave(ctx, "g", m2)
	if s.GroupState("g") != "cooldown" {
		t.Fatalf("after last leave: %s", s.GroupState("g"))
	}
	if err := s.Join(ctx, "g", m1); err != nil {
		t.Fatal(err)
	}
	if s.GroupState("g") != "occupied" || len(s.LocalMembers("g")) != 1 {
		t.Fatalf("re-join in cooldown: %s %v", s.GroupState("g"), s.LocalMembers("g"))
	}
	// Expire the cooldown by hand and flush.
	_ = s.Leave(ctx, "g", m1)
	s.ExpireCooldown("g")
	waitState(t, s, "g", "vacant_queued")
	if got := s.Occupancy("g"); len(got) != 1 {
		t.Fatalf("self row gone before the flush: %v", got)
	}
	s.FlushAll()
	waitState(t, s, "g", "nil")
	if got := s.Occupancy("g"); len(got) != 0 {
		t.Fatalf("self row not retracted: %v", got)
	}
	if _, tomb, ok := s.Row("g", "a"); !ok || !tomb {
		t.Fatalf("retraction must be a tombstone, got tomb=%v ok=%v", tomb, ok)
	}
}

// U:714: joining an already-dead member ends in retraction, not a phantom.
func TestJoinDeadMemberLocalRouterRetracts(t *testing.T) {
	c := newCluster(t, 1)
	s := c.add("a")
	m := mustertest.NewMember()
	m.Kill()
	if err := s.Join(ctxT(t), "g", m); err != nil {
		t.Fatal(err)
	}
	waitState(t, s, "g", "vacant_queued")
	if len(s.LocalMembers("g")) != 0 {
		t.Fatal("dead member still registered")
	}
	s.FlushAll()
	waitState(t, s, "g", "nil")
	if got := s.Occupancy("g"); len(got) != 0 {
		t.Fatalf("orphan self row: %v", got)
	}
}

func TestMemberDeathRemovesIt(t *testing.T) {
	c := newCluster(t, 1)
	c.mod = func(_ string, cfg *muster.Config) { cfg.Cooldown = time.Hour }
	s := c.add("a")
	m := mustertest.NewMember()
	_ = s.Join(ctxT(t), "g", m)
	m.Kill()
	waitState(t, s, "g", "cooldown")
	if len(s.LocalMembers("g")) != 0 {
		t.Fatal("dead member still registered")
	}
}

func TestDumpTextAndJSON(t *testing.T) {
	c := newCluster(t, 1)
	c.mod = func(_ string, cfg *muster.Config) { cfg.Cooldown = time.Hour }
	s := c.add("a")
	empty := s.Dump().String()
	if !strings.Contains(empty, "(none)") || !strings.Contains(empty, "(empty)") {
		t.Fatalf("empty dump:\n%s", empty)
	}
	ctx := ctxT(t)
	m1, m2 := mustertest.NewMember(), mustertest.NewMember()
	_ = s.Join(ctx, "room:1", m1)
	_ = s.Join(ctx, "room:2", m2)
	_ = s.Leave(ctx, "room:2", m2)
	d := s.Dump()
	txt := d.String()
	for _, want := range []string{"Muster test @ a", "occupied (1)", "cooldown (1)", `"room:1" => [a]`} {
		if !strings.Contains(txt, want) {
			t.Errorf("dump lacks %q:\n%s", want, txt)
		}
	}
	sum := s.Summary()
	if sum.Groups != 2 || sum.GroupStates["occupied"] != 1 || sum.GroupStates["cooldown"] != 1 || sum.PresentRows != 2 || sum.Members != 1 {
		t.Fatalf("summary %+v", sum)
	}
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(b, &back); err != nil || back["node"] != "a" {
		t.Fatalf("json dump: %s (%v)", b, err)
	}
}

func TestJoinAfterCloseAndBeforeStart(t *testing.T) {
	c := newCluster(t, 1)
	cfg := c.config("a")
	s, err := muster.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Join(context.Background(), "g", mustertest.NewMember()); !errors.Is(err, muster.ErrNotStarted) {
		t.Fatalf("before start: %v", err)
	}
	_ = s.Close()
	if err := s.Join(context.Background(), "g", mustertest.NewMember()); !errors.Is(err, muster.ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
}
