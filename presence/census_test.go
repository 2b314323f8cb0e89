package presence_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/relaygw/relay/internal/trace"
	"github.com/relaygw/relay/muster/memnet"
	"github.com/relaygw/relay/presence"
)

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// fixture is a memnet cluster of Censuses whose timers never fire during a
// test: every broadcast, hello and expiry is driven by the test.
type fixture struct {
	t   *testing.T
	net *memnet.Network
	tr  *trace.Tracer
	cs  map[string]*presence.Census
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{t: t, net: memnet.New(1), tr: trace.New(), cs: map[string]*presence.Census{}}
	f.net.SetTracer(f.tr)
	t.Cleanup(func() {
		for _, c := range f.cs {
			c.Stop()
		}
		f.net.Close()
	})
	return f
}

func (f *fixture) start(name string, inc uint64) *presence.Census {
	f.t.Helper()
	return f.startWith(name, inc, nil)
}

// startWith starts a Census whose CensusConfig.LocalCounts is local.
func (f *fixture) startWith(name string, inc uint64, local func() map[string]int) *presence.Census {
	f.t.Helper()
	c := presence.NewCensus(presence.CensusConfig{
		LocalCounts:       local,
		Transport:         f.net.Transport(name),
		Incarnation:       inc,
		BroadcastInterval: time.Hour,
		DiscoverInterval:  time.Hour,
		PeerTimeout:       time.Minute,
		Tracer:            f.tr,
	})
	if err := c.Start(ctxT(f.t)); err != nil {
		f.t.Fatal(err)
	}
	f.cs[name] = c
	return c
}

func (f *fixture) quiesce() {
	f.t.Helper()
	if err := f.net.Quiesce(ctxT(f.t)); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) syncAll() {
	f.t.Helper()
	for _, c := range f.cs {
		c.SyncNow()
	}
	f.quiesce()
}

func wantCounts(t *testing.T, c *presence.Census, name string, want map[string]int) {
	t.Helper()
	if got := c.Counts(); !maps.Equal(got, want) {
		t.Fatalf("%s Counts() = %v, want %v", name, got, want)
	}
	for g, n := range want {
		if got := c.Count(g); got != n {
			t.Fatalf("%s Count(%s) = %d, want %d", name, g, got, n)
		}
	}
}

func TestCensusAggregatesRegisteredPeers(t *testing.T) {
	f := newFixture(t)
	a, b, c := f.start("a", 1), f.start("b", 1), f.start("c", 1)
	f.quiesce()
	for name, cs := range f.cs {
		if got := len(cs.Peers()); got != 2 {
			t.Fatalf("%s registered %d peers, want 2:\n%s", name, got, f.tr.Dump())
		}
	}
	a.Inc("g1")
	a.Inc("g1")
	b.Inc("g1")
	c.Inc("g2")
	if got := a.Local("g1"); got != 2 {
		t.Fatalf("a Local(g1) = %d", got)
	}
	// Nothing is on the wire until the next broadcast.
	if got := b.Count("g1"); got != 1 {
		t.Fatalf("b Count(g1) before sync = %d, want its local 1", got)
	}
	f.syncAll()
	want := map[string]int{"g1": 3, "g2": 1}
	for name, cs := range f.cs {
		wantCounts(t, cs, name, want)
	}
	// Leaves show after the next broadcast too.
	a.Dec("g1")
	a.Dec("g1")
	a.Dec("g1") // below zero is ignored
	f.syncAll()
	for name, cs := range f.cs {
		wantCounts(t, cs, name, map[string]int{"g1": 1, "g2": 1})
	}
}

// TestCensusLocalCountsSource: counts reported by CensusConfig.LocalCounts
// are added to the tracked ones, read fresh on this node, and reach peers
// with the next broadcast.
func TestCensusLocalCountsSource(t *testing.T) {
	f := newFixture(t)
	var mu sync.Mutex
	src := map[string]int{"g1": 2, "empty": 0}
	a := f.startWith("a", 1, func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(src)
	})
	b := f.start("b", 1)
	f.quiesce()
	a.Inc("g1")
	b.Inc("g2")
	if got := a.LocalCounts(); !maps.Equal(got, map[string]int{"g1": 3}) {
		t.Fatalf("a LocalCounts() = %v, want g1:3 (zero counts left out)", got)
	}
	f.syncAll()
	want := map[string]int{"g1": 3, "g2": 1}
	wantCounts(t, a, "a", want)
	wantCounts(t, b, "b", want)

	mu.Lock()
	src["g1"] = 5
	mu.Unlock()
	// The source is read at once here, and by peers after the next broadcast.
	if got := a.Count("g1"); got != 6 {
		t.Fatalf("a Count(g1) = %d, want 6", got)
	}
	if got := b.Count("g1"); got != 3 {
		t.Fatalf("b Count(g1) before the broadcast = %d, want 3", got)
	}
	f.syncAll()
	wantCounts(t, b, "b", map[string]int{"g1": 6, "g2": 1})
}

func TestCensusTrack(t *testing.T) {
	f := newFixture(t)
	a := f.start("a", 1)
	ctx, cancel := context.WithCancel(context.Background())
	untrack1 := a.Track(ctx, "g")
	untrack2 := a.Track(context.Background(), "g")
	if a.Local("g") != 2 {
		t.Fatalf("Local = %d, want 2", a.Local("g"))
	}
	untrack2()
	untrack2()
	if a.Local("g") != 1 {
		t.Fatalf("Local after untrack twice = %d, want 1", a.Local("g"))
	}
	cancel() // AfterFunc runs the decrement on its own goroutine.
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	// The first removal was untrack2's.
	if _, err := f.tr.WaitForN(wctx, trace.Kind("census.untracked", "node", "a", "group", "g"), 2); err != nil {
		t.Fatal(err)
	}
	if a.Local("g") != 0 {
		t.Fatal("member not removed when its ctx ended")
	}
	untrack1()
	if a.Local("g") != 0 {
		t.Fatal("untrack after ctx end removed another member")
	}
}

func TestCensusByeDropsCounts(t *testing.T) {
	f := newFixture(t)
	a, b := f.start("a", 1), f.start("b", 1)
	f.quiesce()
	b.Inc("g")
	f.syncAll()
	wantCounts(t, a, "a", map[string]int{"g": 1})
	b.Stop()
	delete(f.cs, "b")
	f.quiesce()
	wantCounts(t, a, "a", map[string]int{})
	if len(a.Peers()) != 0 {
		t.Fatalf("a still has peers %v", a.Peers())
	}
	if f.tr.Count(trace.Kind("census.peer.departed", "node", "a", "peer", "b", "reason", "bye")) != 1 {
		t.Fatalf("no bye departure:\n%s", f.tr.Dump())
	}
}

func TestCensusSilentPeerTimesOut(t *testing.T) {
	f := newFixture(t)
	a, b := f.start("a", 1), f.start("b", 1)
	f.quiesce()
	b.Inc("g")
	f.syncAll()
	f.net.Kill("b") // no bye
	a.ExpireAt(time.Now().Add(2 * time.Minute))
	wantCounts(t, a, "a", map[string]int{})
	if f.tr.Count(trace.Kind("census.peer.departed", "node", "a", "peer", "b", "reason", "timeout")) != 1 {
		t.Fatalf("no timeout departure:\n%s", f.tr.Dump())
	}
	// A live peer is not expired.
	c := f.start("c", 1)
	f.quiesce()
	c.SyncNow()
	f.quiesce()
	a.ExpireAt(time.Now())
	if _, ok := a.Peers()["c"]; !ok {
		t.Fatal("live peer c expired")
	}
}

// TestCensusLateCountsAfterDepartureAreIgnored (docs/MUSTER.md "History",
// correction 7): a peer's counts that reach a node after it has processed
// the peer's departure must not come back as ghost counts.
func TestCensusLateCountsAfterDepartureAreIgnored(t *testing.T) {
	f := newFixture(t)
	a, b := f.start("a", 1), f.start("b", 1)
	f.quiesce()
	b.Inc("g")
	// b's counts reach a's inbox but a is frozen; meanwhile a decides b
	// has departed, and b dies.
	f.net.Freeze("a")
	b.SyncNow()
	f.quiesce()
	a.ExpireAt(time.Now().Add(2 * time.Minute))
	f.net.Kill("b")
	f.net.Thaw("a")
	f.quiesce()
	if _, err := f.tr.WaitFor(ctxT(t), trace.Kind("census.counts.ignored", "node", "a", "from", "b", "reason", "dead")); err != nil {
		t.Fatalf("late counts not ignored: %v\n%s", err, f.tr.Dump())
	}
	wantCounts(t, a, "a", map[string]int{})
	// a told b it was expelled; b is dead, so it stays unregistered.
	if len(a.Peers()) != 0 {
		t.Fatalf("a registered %v", a.Peers())
	}
}

// TestCensusUnregisteredLivePeerIsRepaired: counts from a live peer whose
// registration was missed lead to a hello, whose ack registers the peer; its
// next counts are accepted.
func TestCensusUnregisteredLivePeerIsRepaired(t *testing.T) {
	f := newFixture(t)
	a := f.start("a", 1)
	f.net.Block("b", "a") // a misses b's hello
	b := f.start("b", 1)
	f.quiesce()
	f.net.Heal()
	if _, ok := a.Peers()["b"]; ok {
		t.Fatal("a registered b through a blocked link")
	}
	b.Inc("g")
	b.SyncNow()
	f.quiesce()
	if f.tr.Count(trace.Kind("census.counts.ignored", "node", "a", "from", "b", "reason", "unregistered")) != 1 {
		t.Fatalf("counts from unregistered b not ignored:\n%s", f.tr.Dump())
	}
	if _, ok := a.Peers()["b"]; !ok {
		t.Fatalf("hello/ack did not register b:\n%s", f.tr.Dump())
	}
	b.SyncNow()
	f.quiesce()
	wantCounts(t, a, "a", map[string]int{"g": 1})
}

// TestCensusRediscover: the periodic hello registers a peer whose first
// hello was lost, without any counts traffic.
func TestCensusRediscover(t *testing.T) {
	f := newFixture(t)
	a := f.start("a", 1)
	f.net.Partition([]string{"a"}, []string{"b"})
	b := f.start("b", 1)
	f.quiesce()
	f.net.Heal()
	if len(a.Peers())+len(b.Peers()) != 0 {
		t.Fatal("registered across a partition")
	}
	b.HelloNow()
	f.quiesce()
	if a.Peers()["b"] != 1 || b.Peers()["a"] != 1 {
		t.Fatalf("after re-discover a=%v b=%v", a.Peers(), b.Peers())
	}
}

// TestCensusRestartedPeer: a new incarnation replaces the old one, and the
// old incarnation's counts, arriving late, are dropped.
func TestCensusRestartedPeer(t *testing.T) {
	f := newFixture(t)
	a, b := f.start("a", 1), f.start("b", 1)
	f.quiesce()
	b.Inc("old")
	f.syncAll()
	wantCounts(t, a, "a", map[string]int{"old": 1})

	f.net.Kill("b")
	b.Stop() // its bye cannot be sent: the transport is dead
	delete(f.cs, "b")
	b2 := f.start("b", 2)
	f.quiesce()
	if a.Peers()["b"] != 2 {
		t.Fatalf("a's peers %v, want b at incarnation 2", a.Peers())
	}
	if f.tr.Count(trace.Kind("census.peer.departed", "node", "a", "peer", "b", "reason", "restarted")) != 1 {
		t.Fatalf("restart not seen as departure:\n%s", f.tr.Dump())
	}
	wantCounts(t, a, "a", map[string]int{})

	// A late counts message of incarnation 1 is ignored, and so is its
	// late bye.
	a.Deliver("b", presence.Encode("counts", 1, 9, map[string]int{"old": 1}))
	a.Deliver("b", presence.Encode("bye", 1, 0, nil))
	if f.tr.Count(trace.Kind("census.counts.ignored", "node", "a", "from", "b", "reason", "incarnation")) != 1 {
		t.Fatalf("old incarnation's counts not ignored:\n%s", f.tr.Dump())
	}
	b2.Inc("new")
	f.syncAll()
	wantCounts(t, a, "a", map[string]int{"new": 1})
	if a.Peers()["b"] != 2 {
		t.Fatalf("late bye of incarnation 1 removed incarnation 2: %v", a.Peers())
	}
	// Stale (reordered) counts of the current incarnation are dropped.
	a.Deliver("b", presence.Encode("counts", 2, 1, map[string]int{"stale": 5}))
	wantCounts(t, a, "a", map[string]int{"new": 1})
}

func TestCensusStartErrors(t *testing.T) {
	if err := presence.NewCensus(presence.CensusConfig{}).Start(context.Background()); err == nil {
		t.Fatal("Start without transport succeeded")
	}
	f := newFixture(t)
	a := f.start("a", 1)
	if err := a.Start(context.Background()); err == nil {
		t.Fatal("second Start succeeded")
	}
}

func FuzzCensusDecode(f *testing.F) {
	f.Add(presence.Encode("counts", 1, 2, map[string]int{"g": 3}))
	f.Add(presence.Encode("hello", 1, 0, nil))
	f.Add([]byte(`{"k":"counts","inc":1,"c":{"g":-1}}`))
	f.Add([]byte(`{"k":"x"}`))
	f.Add([]byte(`[`))
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = presence.Decode(b)
	})
}

// TestCensusDeadIncarnationStaysDead: a peer declared dead (silent past the
// peer timeout) whose hello and counts, sent before it died, arrive late is
// not registered again: its viewers are not counted a second time next to
// those of its restarted incarnation.
func TestCensusDeadIncarnationStaysDead(t *testing.T) {
	f := newFixture(t)
	a, b := f.start("a", 1), f.start("b", 1)
	f.quiesce()
	for range 4 {
		b.Inc("session:s")
	}
	f.syncAll()
	wantCounts(t, a, "a", map[string]int{"session:s": 4})

	// b's re-discover hello and its counts reach a's inbox while a is
	// frozen; meanwhile a declares b dead, and b dies.
	f.net.Freeze("a")
	b.HelloNow()
	b.SyncNow()
	f.quiesce()
	a.ExpireAt(time.Now().Add(2 * time.Minute))
	f.net.Kill("b")
	f.net.Thaw("a")
	f.quiesce()
	for _, k := range []trace.Matcher{
		trace.Kind("census.peer.departed", "node", "a", "peer", "b", "inc", uint64(1), "reason", "timeout"),
		trace.Kind("census.hello.ignored", "node", "a", "from", "b", "inc", uint64(1)),
		trace.Kind("census.counts.ignored", "node", "a", "from", "b", "reason", "dead"),
	} {
		if _, err := f.tr.WaitFor(ctxT(t), k); err != nil {
			t.Fatalf("waiting for %v: %v\n%s", k, err, f.tr.Dump())
		}
	}
	if len(a.Peers()) != 0 {
		t.Fatalf("a registered the dead incarnation again: %v\n%s", a.Peers(), f.tr.Dump())
	}
	wantCounts(t, a, "a", map[string]int{})

	// b restarts with 2 viewers: a counts those, not 4 + 2.
	b.Stop()
	b2 := f.start("b", 2)
	b2.Inc("session:s")
	b2.Inc("session:s")
	f.syncAll()
	wantCounts(t, a, "a", map[string]int{"session:s": 2})
	// A late hello of incarnation 1, after the restart, changes nothing.
	a.Deliver("b", presence.Encode("hello", 1, 0, nil))
	a.Deliver("b", presence.Encode("counts", 1, 9, map[string]int{"session:s": 4}))
	if a.Peers()["b"] != 2 {
		t.Fatalf("a's peers %v, want b at incarnation 2", a.Peers())
	}
	wantCounts(t, a, "a", map[string]int{"session:s": 2})
}

// TestCensusExpelledPeerTakesNewIncarnation: a peer declared dead that is
// in fact alive (it was only silent) is told so when it speaks again,
// takes a new incarnation and is registered and counted under it.
func TestCensusExpelledPeerTakesNewIncarnation(t *testing.T) {
	f := newFixture(t)
	a, b := f.start("a", 1), f.start("b", 1)
	f.quiesce()
	b.Inc("session:s")
	f.syncAll()
	a.ExpireAt(time.Now().Add(2 * time.Minute)) // b was silent, as a sees it
	wantCounts(t, a, "a", map[string]int{})
	b.SyncNow()
	f.quiesce()
	if _, err := f.tr.WaitFor(ctxT(t), trace.Kind("census.expelled", "node", "b", "inc", uint64(1))); err != nil {
		t.Fatalf("b was not told it was expelled: %v\n%s", err, f.tr.Dump())
	}
	inc := b.Incarnation()
	if inc <= 1 {
		t.Fatalf("b's incarnation after expulsion = %d, want above 1", inc)
	}
	if got := a.Peers()["b"]; got != inc {
		t.Fatalf("a's peers %v, want b at incarnation %d\n%s", a.Peers(), inc, f.tr.Dump())
	}
	wantCounts(t, a, "a", map[string]int{"session:s": 1})
	// b still counts a (a's incarnation was never declared dead).
	wantCounts(t, b, "b", map[string]int{"session:s": 1})
}

// TestCensusOnPeer: OnPeer hears every registration and departure of a
// peer incarnation (a restart is the old one's departure, then the new
// one's registration; a timeout and a bye are departures), in order.
func TestCensusOnPeer(t *testing.T) {
	f := newFixture(t)
	var mu sync.Mutex
	var got []string
	c := presence.NewCensus(presence.CensusConfig{
		Transport:         f.net.Transport("a"),
		Incarnation:       1,
		BroadcastInterval: time.Hour,
		DiscoverInterval:  time.Hour,
		PeerTimeout:       time.Minute,
		OnPeer: func(peer string, inc uint64, up bool) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, fmt.Sprintf("%s/%d/%v", peer, inc, up))
		},
	})
	if err := c.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	f.cs["a"] = c
	b := f.start("b", 10)
	f.quiesce()
	c.Deliver("b", presence.Encode("hello", 11, 0, nil)) // b restarted
	f.quiesce()
	c.ExpireAt(time.Now().Add(2 * time.Minute)) // b silent past the timeout
	_ = b
	mu.Lock()
	defer mu.Unlock()
	want := []string{"b/10/true", "b/10/false", "b/11/true", "b/11/false"}
	if !slices.Equal(got, want) {
		t.Fatalf("OnPeer calls %v, want %v", got, want)
	}
}
