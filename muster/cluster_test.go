package muster_test

import (
	"slices"
	"testing"

	"github.com/relaygw/relay/internal/testkit/mustertest"
)

// D:222/268: nodes converge; a group held on one node is listed by its router
// after another node joins.
func TestClusterConvergesAndRouterListsHolder(t *testing.T) {
	c := newCluster(t, 1)
	c.add("a")
	c.add("b")
	c.waitReady("a", "b")
	ctx := ctxT(t)
	g := groupRoutedTo("g", []string{"a", "b"}, "a", nil, "")
	if err := c.node("b").Join(ctx, g, mustertest.NewMember()); err != nil {
		t.Fatal(err)
	}
	if got := c.node("a").Occupancy(g); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("router a lists %v", got)
	}
	c.add("c")
	c.waitReady("a", "b", "c")
	r := c.node("a").Router(g).Node
	eventually(t, 5e9, "new router lists b", func() bool {
		return slices.Equal(c.node(r).Occupancy(g), []string{"b"})
	})
	nodes, ok := c.node(r).Targets(g, c.node("b").ViewHash())
	if !ok || !slices.Equal(nodes, []string{"b"}) {
		t.Fatalf("Targets on %s = %v %v", r, nodes, ok)
	}
}

// D:3616: node death: survivors re-converge, rows naming the dead node go,
// groups it routed are re-announced to their new routers.
func TestNodeDeathReconverges(t *testing.T) {
	c := newCluster(t, 1)
	for _, n := range []string{"a", "b", "c"} {
		c.add(n)
	}
	c.waitReady("a", "b", "c")
	ctx := ctxT(t)
	all := []string{"a", "b", "c"}
	gA := groupRoutedTo("ga", all, "c", []string{"a", "b"}, "b") // held by a, routed c → b
	gC := groupRoutedTo("gc", all, "a", nil, "")                 // held by c (dies)
	if err := c.node("a").Join(ctx, gA, mustertest.NewMember()); err != nil {
		t.Fatal(err)
	}
	if err := c.node("c").Join(ctx, gC, mustertest.NewMember()); err != nil {
		t.Fatal(err)
	}
	c.stop("c")
	c.waitReady("a", "b")
	eventually(t, 5e9, "b lists a for gA", func() bool { return slices.Equal(c.node("b").Occupancy(gA), []string{"a"}) })
	if got := c.node("a").Occupancy(gC); len(got) != 0 {
		t.Fatalf("dead node's row survived: %v", got)
	}
	for _, s := range c.all() {
		for _, g := range []string{gA, gC} {
			if slices.Contains(s.Occupancy(g), "c") {
				t.Fatalf("%s still lists dead c for %s", s.Node(), g)
			}
		}
	}
}
