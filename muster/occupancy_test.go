package muster

import (
	"slices"

	"github.com/cespare/xxhash/v2"
	"testing"
	"time"
)

func seq(n uint64) Seq { return Seq{Inc: 1, N: n} }

// U:462-588: the router-side entry points as a last-writer-wins-by-seq
// register.
func TestOccupancyVersioning(t *testing.T) {
	now := time.Now()
	t.Run("insert and vacate touch only their source", func(t *testing.T) {
		o := newOccTable()
		o.upsert("g", "a", seq(1), false, now)
		o.upsert("g", "b", seq(1), false, now)
		o.upsert("g", "a", seq(2), true, now)
		if got := o.sources("g"); !slices.Equal(got, []string{"b"}) {
			t.Fatalf("sources %v", got)
		}
	})
	t.Run("stale DELETE", func(t *testing.T) {
		o := newOccTable()
		o.upsert("g", "a", seq(10), false, now)
		o.upsert("g", "a", seq(5), true, now)
		if len(o.sources("g")) != 1 {
			t.Fatal("lower-seq vacancy removed a newer row")
		}
		o.upsert("g", "a", seq(10), true, now)
		if len(o.sources("g")) != 0 {
			t.Fatal("equal-seq vacancy must apply")
		}
	})
	t.Run("late INSERT after a tombstone", func(t *testing.T) {
		o := newOccTable()
		o.upsert("g", "a", seq(5), false, now)
		o.upsert("g", "a", seq(10), true, now)
		o.upsert("g", "a", seq(7), false, now)
		if len(o.sources("g")) != 0 {
			t.Fatal("stale INSERT resurrected a tombstoned row")
		}
		o.upsert("g", "a", seq(10), false, now)
		if len(o.sources("g")) != 0 {
			t.Fatal("equal-seq INSERT beat the tombstone")
		}
		o.upsert("g", "a", seq(11), false, now)
		if len(o.sources("g")) != 1 {
			t.Fatal("newer INSERT lost")
		}
	})
	t.Run("full snapshot replaces, delta adds", func(t *testing.T) {
		o := newOccTable()
		o.upsert("stale", "a", seq(1), false, now)
		o.applyRound("a", []string{"fa", "fb"}, seq(2), true, now)
		if len(o.sources("stale")) != 0 || len(o.sources("fa")) != 1 || len(o.sources("fb")) != 1 {
			t.Fatal("full snapshot did not replace")
		}
		o.applyRound("a", []string{"mc"}, seq(3), false, now)
		for _, g := range []string{"fa", "fb", "mc"} {
			if len(o.sources(g)) != 1 {
				t.Fatalf("delta dropped %s", g)
			}
		}
	})
	t.Run("a write never lowers a newer row", func(t *testing.T) {
		o := newOccTable()
		o.upsert("g", "a", seq(100), false, now)
		o.applyRound("a", []string{"g"}, seq(50), true, now)
		if r, _ := o.row("g", "a"); r.Seq != seq(100) || r.Tomb {
			t.Fatalf("row %+v", r)
		}
		o.applyRound("a", []string{"h"}, seq(200), true, now)
		o.upsert("h", "a", seq(150), false, now)
		if r, _ := o.row("h", "a"); r.Seq != seq(200) {
			t.Fatalf("row %+v", r)
		}
		// The snapshot at 200 tombstoned g (not in it, older).
		if len(o.sources("g")) != 0 {
			t.Fatal("full snapshot kept an older row it does not list")
		}
	})
	t.Run("departure deletes only the departed incarnation", func(t *testing.T) {
		o := newOccTable()
		o.upsert("old", "a", Seq{1, 5}, false, now)
		o.upsert("new", "a", Seq{2, 1}, false, now)
		if n := o.departed("a", 1); n != 1 {
			t.Fatalf("removed %d rows", n)
		}
		if len(o.sources("new")) != 1 || len(o.sources("old")) != 0 {
			t.Fatal("departure touched the fresher incarnation")
		}
		if _, a := o.upsert("late", "a", Seq{1, 9}, false, now); a != admitStale && a != admitDeparted {
			t.Fatalf("late write from departed incarnation admitted: %v", a)
		}
		if _, a := o.upsert("x", "b", Seq{7, 1}, false, now); a != admitOK {
			t.Fatalf("unrelated source: %v", a)
		}
		o.departed("b", 7)
		if _, a := o.upsert("y", "b", Seq{7, 2}, false, now); a != admitDeparted {
			t.Fatalf("write from departed incarnation: %v", a)
		}
	})
	t.Run("exact-seq delete", func(t *testing.T) {
		o := newOccTable()
		o.upsert("g", "a", seq(3), false, now)
		o.upsert("g", "a", seq(4), false, now) // concurrent re-claim
		if o.deleteExact("g", "a", seq(3)) {
			t.Fatal("delete of a judged seq removed a raised row")
		}
		if !o.deleteExact("g", "a", seq(4)) || len(o.sources("g")) != 0 {
			t.Fatal("exact delete failed")
		}
	})
	t.Run("tombstone reaping", func(t *testing.T) {
		o := newOccTable()
		o.upsert("g", "a", seq(1), false, now)
		o.upsert("g", "a", seq(2), true, now)
		if n := o.reap(now.Add(-time.Minute)); n != 0 {
			t.Fatal("reaped a young tombstone")
		}
		o.upsert("g", "a", seq(1), false, now)
		if len(o.sources("g")) != 0 {
			t.Fatal("stale insert won against the kept tombstone")
		}
		if n := o.reap(now.Add(time.Minute)); n != 1 {
			t.Fatalf("reaped %d", n)
		}
		if _, ok := o.row("g", "a"); ok {
			t.Fatal("row survived the reap")
		}
	})
}

func TestSeqOrderAcrossIncarnations(t *testing.T) {
	if !(Seq{1, 100}).Less(Seq{2, 1}) || (Seq{2, 1}).Less(Seq{1, 100}) || !(Seq{2, 1}).LessEq(Seq{2, 1}) {
		t.Fatal("Seq order is not (incarnation, counter)")
	}
}

func TestViewHashFrozen(t *testing.T) {
	a := ViewHash([]NodeID{{"b", 2}, {"a", 1}})
	b := ViewHash([]NodeID{{"a", 1}, {"b", 2}, {"a", 1}})
	if a != b {
		t.Fatal("order or duplicates changed the hash")
	}
	if ViewHash([]NodeID{{"a", 1}, {"b", 3}}) == a {
		t.Fatal("incarnation not part of the hash")
	}
	// The documented definition, and the value recorded when it was frozen.
	got := ViewHash([]NodeID{{"node-b", 2}, {"node-a", 1}})
	if want := xxhash.Sum64String("node-a\x001\nnode-b\x002\n"); got != want || got != 2351960706235137116 {
		t.Fatalf("ViewHash changed: %d", got)
	}
}
