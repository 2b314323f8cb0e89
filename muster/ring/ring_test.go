package ring

import (
	"fmt"
	"math/rand"
	"testing"
)

func TestFindIsOrderIndependent(t *testing.T) {
	a := New([]string{"n1", "n2", "n3"}, 0)
	b := New([]string{"n3", "n1", "n2", "n1"}, 0)
	for i := 0; i < 1000; i++ {
		k := fmt.Sprintf("g%d", i)
		if a.Find(k) != b.Find(k) {
			t.Fatalf("key %q: %q vs %q", k, a.Find(k), b.Find(k))
		}
	}
}

func TestEmptyAndSingle(t *testing.T) {
	if got := New(nil, 0).Find("x"); got != "" {
		t.Fatalf("empty ring found %q", got)
	}
	var nilRing *Ring
	if nilRing.Find("x") != "" || nilRing.Has("x") {
		t.Fatal("nil ring must be empty")
	}
	r := New([]string{"only"}, 0)
	for i := 0; i < 100; i++ {
		if got := r.Find(fmt.Sprint(i)); got != "only" {
			t.Fatalf("single ring found %q", got)
		}
	}
	if !r.Has("only") || r.Has("other") {
		t.Fatal("Has is wrong")
	}
}

// Adding a 4th node to 3 moves about a quarter of the keys, all of them onto
// the new node (consistent hashing).
func TestAddMovesAboutOneQuarterOntoNewNode(t *testing.T) {
	old := New([]string{"a", "b", "c"}, 0)
	cur := New([]string{"a", "b", "c", "d"}, 0)
	const n = 20000
	moved := 0
	for i := 0; i < n; i++ {
		k := fmt.Sprintf("session:%d", i)
		o, c := old.Find(k), cur.Find(k)
		if o != c {
			moved++
			if c != "d" {
				t.Fatalf("key %q moved %s -> %s, not onto the new node", k, o, c)
			}
		}
	}
	frac := float64(moved) / n
	if frac < 0.18 || frac > 0.32 {
		t.Fatalf("moved fraction %.3f, want about 0.25", frac)
	}
}

func TestBalance(t *testing.T) {
	r := New([]string{"a", "b", "c", "d"}, 0)
	counts := map[string]int{}
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 40000; i++ {
		counts[r.Find(fmt.Sprint(rng.Int63()))]++
	}
	for m, c := range counts {
		if c < 6000 || c > 14000 {
			t.Fatalf("member %s got %d of 40000 keys", m, c)
		}
	}
}

// The hash is frozen: these routers must never change.
func TestFrozenAnswers(t *testing.T) {
	r := New([]string{"node-a", "node-b", "node-c"}, 0)
	got := []string{r.Find("session:1"), r.Find("session:2"), r.Find("room:lobby"), r.Find("")}
	// Recorded when the hash was frozen.
	want := []string{"node-a", "node-c", "node-b", "node-a"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("answer %d = %q, want %q (ring hash changed?)", i, got[i], want[i])
		}
	}
}

func BenchmarkFind(b *testing.B) {
	r := New([]string{"a", "b", "c", "d"}, 0)
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("session:%d", i)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_ = r.Find(keys[i&1023])
	}
}

func FuzzFind(f *testing.F) {
	f.Add("a,b", "key")
	f.Fuzz(func(t *testing.T, m1, key string) {
		r := New([]string{m1, "fixed"}, 8)
		got := r.Find(key)
		if !r.Has(got) {
			t.Fatalf("Find returned non-member %q", got)
		}
	})
}
