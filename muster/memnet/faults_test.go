package memnet_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/relaygw/relay/internal/trace"
	"github.com/relaygw/relay/muster"
	"github.com/relaygw/relay/muster/memnet"
	"github.com/relaygw/relay/muster/memnet/transporttest"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// cluster starts nodes on a fresh network and returns their recorders.
func cluster(t *testing.T, seed int64, names ...string) (*memnet.Network, map[string]*memnet.Transport, map[string]*transporttest.Recorder) {
	t.Helper()
	n := memnet.New(seed)
	t.Cleanup(n.Close)
	ts := map[string]*memnet.Transport{}
	rs := map[string]*transporttest.Recorder{}
	for _, name := range names {
		rs[name] = transporttest.NewRecorder()
		ts[name] = n.Transport(name)
		ts[name].Register(rs[name])
		if err := ts[name].Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	return n, ts, rs
}

func datas(ms []transporttest.Msg) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Data
	}
	return out
}

func TestPartitionBlocksBothWaysAndHeals(t *testing.T) {
	n, ts, rs := cluster(t, 1, "a", "b", "c")
	ctx := ctxT(t)
	n.Partition([]string{"a"}, []string{"b"})
	_ = ts["a"].Send(ctx, "b", []byte("lost-ab"))
	_ = ts["b"].Send(ctx, "a", []byte("lost-ba"))
	if _, err := ts["a"].Call(ctx, "b", nil); !errors.Is(err, muster.ErrNoResponders) {
		t.Fatalf("call across partition = %v; want ErrNoResponders", err)
	}
	_ = ts["a"].Send(ctx, "c", []byte("ac"))
	if err := n.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	if len(rs["b"].Msgs()) != 0 || len(rs["a"].Msgs()) != 0 {
		t.Fatalf("messages crossed the partition: a=%v b=%v", rs["a"].Msgs(), rs["b"].Msgs())
	}
	if got := datas(rs["c"].Msgs()); !slices.Equal(got, []string{"ac"}) {
		t.Fatalf("c got %v", got)
	}
	if d := n.Dropped(); d != 3 {
		t.Fatalf("Dropped() = %d, want 3", d)
	}
	n.Heal()
	_ = ts["a"].Send(ctx, "b", []byte("healed"))
	if err := n.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	if got := datas(rs["b"].Msgs()); !slices.Equal(got, []string{"healed"}) {
		t.Fatalf("b got %v after heal", got)
	}
}

func TestBlockIsOneWay(t *testing.T) {
	n, ts, rs := cluster(t, 1, "a", "b")
	ctx := ctxT(t)
	n.Block("a", "b")
	_ = ts["a"].Send(ctx, "b", []byte("lost"))
	_ = ts["b"].Send(ctx, "a", []byte("ok"))
	// b → a still works for Calls, but the reply over the blocked a → b
	// link is lost, so the call times out although a's handler ran.
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := ts["b"].Call(cctx, "a", []byte("q")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("call with blocked reply = %v; want DeadlineExceeded", err)
	}
	if err := n.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	if len(rs["b"].Msgs()) != 0 {
		t.Fatalf("b got %v over a blocked link", rs["b"].Msgs())
	}
	if got := datas(rs["a"].Msgs()); !slices.Equal(got, []string{"ok"}) {
		t.Fatalf("a got %v", got)
	}
	n.Unblock("a", "b")
	if _, err := ts["b"].Call(ctx, "a", []byte("q")); err != nil {
		t.Fatalf("call after unblock: %v", err)
	}
}

func TestFreezeHoldsInboxUntilThaw(t *testing.T) {
	n, ts, rs := cluster(t, 1, "a", "b")
	tr := trace.New()
	n.SetTracer(tr)
	ctx := ctxT(t)
	n.Freeze("b")
	for i := range 5 {
		_ = ts["a"].Send(ctx, "b", []byte(strconv.Itoa(i)))
	}
	// Quiesce ignores a frozen node's held inbox.
	if err := n.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rs["b"].Msgs(); len(got) != 0 {
		t.Fatalf("frozen b handled %v", got)
	}
	// A Call into a frozen node waits; thawing lets it complete.
	type res struct {
		b   []byte
		err error
	}
	rc := make(chan res, 1)
	go func() {
		b, err := ts["a"].Call(ctx, "b", []byte("q"))
		rc <- res{b, err}
	}()
	if _, err := tr.WaitFor(ctx, trace.Kind("memnet.send", "kind", "call")); err != nil {
		t.Fatal(err)
	}
	n.Thaw("b")
	r := <-rc
	if r.err != nil || string(r.b) != "re:q" {
		t.Fatalf("call after thaw = %q, %v", r.b, r.err)
	}
	if err := n.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	if got := datas(rs["b"].Msgs()); !slices.Equal(got, []string{"0", "1", "2", "3", "4"}) {
		t.Fatalf("b got %v after thaw", got)
	}
}

func TestKill(t *testing.T) {
	n, ts, rs := cluster(t, 1, "a", "b")
	ctx := ctxT(t)
	n.Kill("b")
	if got := n.Nodes(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("Nodes() = %v after kill", got)
	}
	if _, err := ts["a"].Call(ctx, "b", nil); !errors.Is(err, muster.ErrNoResponders) {
		t.Fatalf("call to killed node = %v", err)
	}
	if err := ts["b"].Send(ctx, "a", []byte("x")); !errors.Is(err, muster.ErrTransportClosed) {
		t.Fatalf("send from killed node = %v", err)
	}
	if err := ts["b"].Close(); err != nil {
		t.Fatal(err)
	}
	// A restarted node under the same name is a fresh transport.
	b2 := n.Transport("b")
	if b2 == ts["b"] {
		t.Fatal("Transport after Kill returned the dead transport")
	}
	r2 := transporttest.NewRecorder()
	b2.Register(r2)
	if err := b2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	_ = ts["a"].Send(ctx, "b", []byte("again"))
	if err := n.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	if got := datas(r2.Msgs()); !slices.Equal(got, []string{"again"}) {
		t.Fatalf("restarted b got %v", got)
	}
	if len(rs["b"].Msgs()) != 0 {
		t.Fatal("killed b handled a message")
	}
}

func TestKillDuringCallDropsReply(t *testing.T) {
	n := memnet.New(1)
	t.Cleanup(n.Close)
	ctx := ctxT(t)
	a := n.Transport("a")
	a.Register(transporttest.NewRecorder())
	b := n.Transport("b")
	rb := transporttest.NewRecorder()
	entered := make(chan struct{})
	rb.OnCall = func(hctx context.Context, _ string, _ []byte) ([]byte, error) {
		close(entered)
		<-hctx.Done() // Kill cancels the handler's context.
		return []byte("too late"), nil
	}
	b.Register(rb)
	for _, tr := range []*memnet.Transport{a, b} {
		if err := tr.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := a.Call(cctx, "b", nil)
		errc <- err
	}()
	<-entered
	n.Kill("b")
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := n.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("call whose callee died = %v; want the caller's ctx error", err)
	}
}

func TestCounters(t *testing.T) {
	n, ts, _ := cluster(t, 1, "a", "b", "c", "d")
	ctx := ctxT(t)
	_ = ts["a"].Broadcast(ctx, []byte("x"))
	_ = ts["a"].Send(ctx, "b", []byte("y"))
	_, _ = ts["c"].Call(ctx, "b", []byte("z"))
	if err := n.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	want := map[[2]string]uint64{{"a", "b"}: 2, {"a", "c"}: 1, {"a", "d"}: 1, {"c", "b"}: 1, {"b", "a"}: 0}
	for l, w := range want {
		if got := n.Sent(l[0], l[1]); got != w {
			t.Errorf("Sent(%s,%s) = %d, want %d", l[0], l[1], got, w)
		}
	}
	if got := n.SentFrom("a"); got != 4 {
		t.Errorf("SentFrom(a) = %d, want 4", got)
	}
	if got := n.Total(); got != 5 {
		t.Errorf("Total() = %d, want 5", got)
	}
	n.ResetCounters()
	if n.Total() != 0 || n.Sent("a", "b") != 0 {
		t.Error("ResetCounters left counts")
	}
}

// run sends 300 messages a → b under faults and returns what b received.
func runFaulty(t *testing.T, seed int64, f memnet.LinkFaults) []string {
	n, ts, rs := cluster(t, seed, "a", "b")
	n.SetLink("a", "b", f)
	ctx := ctxT(t)
	for i := range 300 {
		_ = ts["a"].Send(ctx, "b", []byte(strconv.Itoa(i)))
	}
	if err := n.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	return datas(rs["b"].Msgs())
}

func TestDropIsSeededAndReplays(t *testing.T) {
	f := memnet.LinkFaults{Drop: 0.3}
	first := runFaulty(t, 42, f)
	second := runFaulty(t, 42, f)
	if !slices.Equal(first, second) {
		t.Fatal("same seed gave different drops")
	}
	if len(first) < 150 || len(first) > 270 {
		t.Fatalf("drop 0.3 delivered %d of 300", len(first))
	}
	if other := runFaulty(t, 43, f); slices.Equal(first, other) {
		t.Fatal("different seeds gave identical drops")
	}
	if !slices.IsSortedFunc(first, func(x, y string) int { a, _ := strconv.Atoi(x); b, _ := strconv.Atoi(y); return a - b }) {
		t.Fatal("drop reordered messages")
	}
}

func TestDelayKeepsOrder(t *testing.T) {
	got := runFaulty(t, 7, memnet.LinkFaults{Delay: time.Millisecond, Jitter: 2 * time.Millisecond})
	want := make([]string, 300)
	for i := range want {
		want[i] = strconv.Itoa(i)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("delayed link reordered or lost messages: %v", got)
	}
}

func TestDuplicate(t *testing.T) {
	got := runFaulty(t, 7, memnet.LinkFaults{Duplicate: 0.5})
	if len(got) <= 300 {
		t.Fatalf("duplicate 0.5 delivered %d of 300", len(got))
	}
	seen := map[string]int{}
	for _, d := range got {
		seen[d]++
	}
	if len(seen) != 300 {
		t.Fatalf("duplication lost messages: %d distinct", len(seen))
	}
}

func TestReorder(t *testing.T) {
	got := runFaulty(t, 7, memnet.LinkFaults{Reorder: 0.2, ReorderWindow: 2 * time.Millisecond})
	if len(got) != 300 {
		t.Fatalf("reorder lost messages: %d of 300", len(got))
	}
	sorted := slices.IsSortedFunc(got, func(x, y string) int { a, _ := strconv.Atoi(x); b, _ := strconv.Atoi(y); return a - b })
	if sorted {
		t.Fatal("reorder 0.2 delivered 300 messages in order")
	}
}

func TestDefaultLinkAndClearLink(t *testing.T) {
	n, ts, rs := cluster(t, 1, "a", "b", "c")
	ctx := ctxT(t)
	n.SetDefaultLink(memnet.LinkFaults{Drop: 1})
	n.SetLink("a", "c", memnet.LinkFaults{})
	_ = ts["a"].Send(ctx, "b", []byte("lost"))
	_ = ts["a"].Send(ctx, "c", []byte("kept"))
	n.ClearLink("a", "c")
	_ = ts["a"].Send(ctx, "c", []byte("lost too"))
	if err := n.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	if len(rs["b"].Msgs()) != 0 {
		t.Fatal("default drop 1 delivered")
	}
	if got := datas(rs["c"].Msgs()); !slices.Equal(got, []string{"kept"}) {
		t.Fatalf("c got %v", got)
	}
}

func TestNotStartedDrops(t *testing.T) {
	n := memnet.New(1)
	t.Cleanup(n.Close)
	ctx := ctxT(t)
	a := n.Transport("a")
	a.Register(transporttest.NewRecorder())
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	b := n.Transport("b")
	rb := transporttest.NewRecorder()
	b.Register(rb)
	_ = a.Send(ctx, "b", []byte("early"))
	if _, err := a.Call(ctx, "b", nil); !errors.Is(err, muster.ErrNoResponders) {
		t.Fatalf("call to unstarted node = %v", err)
	}
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctx); !errors.Is(err, memnet.ErrAlreadyStarted) {
		t.Fatalf("second start = %v", err)
	}
	_ = a.Send(ctx, "b", []byte("late"))
	if err := n.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	if got := datas(rb.Msgs()); !slices.Equal(got, []string{"late"}) {
		t.Fatalf("b got %v", got)
	}
	if err := n.Transport("c").Start(ctx); !errors.Is(err, memnet.ErrNoHandler) {
		t.Fatalf("start without handler = %v", err)
	}
}

// TestTracePointsAndParking parks b's delivery until c has handled its copy
// of the same broadcast: the sender is not held up and c handles first.
func TestTracePointsAndParking(t *testing.T) {
	n := memnet.New(1)
	t.Cleanup(n.Close)
	tr := trace.New()
	n.SetTracer(tr)
	ctx := ctxT(t)
	rs := map[string]*transporttest.Recorder{}
	ts := map[string]*memnet.Transport{}
	for _, name := range []string{"a", "b", "c"} {
		rs[name] = transporttest.NewRecorder()
		ts[name] = n.Transport(name)
		ts[name].Register(rs[name])
		if err := ts[name].Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Park b's delivery until the test has seen c handle its copy.
	tr.Park(trace.Kind("memnet.deliver", "to", "b"), trace.Kind("test.release"))
	if err := ts["a"].Broadcast(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.WaitFor(ctx, trace.Kind("memnet.deliver", "to", "b")); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.WaitFor(ctx, trace.Kind("memnet.handled", "to", "c")); err != nil {
		t.Fatal(err)
	}
	tr.Emit("test.release")
	if err := n.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	if f := tr.Failures(); len(f) != 0 {
		t.Fatalf("park failures: %v", f)
	}
	hb := tr.Filter(trace.Kind("memnet.handled", "to", "b"))
	hc := tr.Filter(trace.Kind("memnet.handled", "to", "c"))
	if len(hb) != 1 || len(hc) != 1 || hc[0].Seq > hb[0].Seq {
		t.Fatalf("forced order not kept:\n%s", tr.Dump())
	}
	if got := tr.Count(trace.Kind("memnet.send", "from", "a")); got != 2 {
		t.Fatalf("%d send events, want 2:\n%s", got, tr.Dump())
	}
}

func TestCloseNetworkWithPendingDelays(t *testing.T) {
	n, ts, _ := cluster(t, 1, "a", "b")
	n.SetLink("a", "b", memnet.LinkFaults{Delay: time.Hour})
	for i := range 10 {
		_ = ts["a"].Send(context.Background(), "b", []byte(fmt.Sprint(i)))
	}
	n.Close()
	ctx := ctxT(t)
	if err := n.Quiesce(ctx); err != nil {
		t.Fatalf("closed network not quiet: %v", err)
	}
}
