package muster_test

import (
	"slices"
	"testing"
	"time"

	"github.com/relaygw/relay/muster"
)

// A group that moves away from its router and back while the router never
// judged the source's row stale (here: the router never adopted the view
// that moved the group away) must not keep a row for a group the source
// vacated in between: the source's shrink names the group as moved onto
// the router, and not holding it is a retraction.
func TestVacatedWhileRoutedAwayThenRoutedBack(t *testing.T) {
	c := newCluster(t, 1)
	c.mod = func(_ string, cfg *muster.Config) { cfg.Cooldown = time.Hour }
	tt := c.add("t")
	s := c.add("s")
	c.waitReady("t", "s")
	g := groupRoutedTo("g", []string{"s", "t"}, "s", []string{"d", "s", "t"}, "d")
	m := joinOK(t, tt, g)
	if got := s.Occupancy(g); !slices.Equal(got, []string{"t"}) {
		t.Fatalf("s lists %v for %s, want [t]", got, g)
	}
	// d reaches t but never s: t adopts {d,s,t} (g → d), s stays on {s,t}
	// (g → s) and so never judges (g, t).
	c.net.Block("d", "s")
	c.net.Block("s", "d")
	d := c.add("d")
	eventually(t, 10*time.Second, "t on {d,s,t}", func() bool {
		return slices.Equal(tt.Members(), []string{"d", "s", "t"}) && len(tt.Owed()) == 0
	})
	// t vacates g: the retraction goes to d, g's router under t's view.
	if err := tt.Leave(ctxT(t), g, m); err != nil {
		t.Fatal(err)
	}
	tt.ExpireCooldown(g)
	tt.FlushAll()
	waitState(t, tt, g, "nil")
	eventually(t, 5*time.Second, "d tombstoned (g, t)", func() bool { return len(d.Occupancy(g)) == 0 })
	// d goes: t shrinks back to {s,t}, g routes to s again.
	c.stop("d")
	c.waitReady("t", "s")
	waitOwedEmpty(t, tt)
	if _, err := c.tr.WaitFor(ctxT(t), kindOf("muster_moved_retracted", "s", "group", g, "source", "t")); err != nil {
		t.Fatal(err)
	}
	if got, ok := s.Targets(g, tt.ViewHash()); !ok || len(got) != 0 {
		t.Fatalf("s Targets(%s) = %v %v, want [] true", g, got, ok)
	}
}
