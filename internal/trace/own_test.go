package trace

import (
	"reflect"
	"strconv"
	"testing"
	"time"
)

type seqLike struct{ Inc, N uint64 }

// emitMixed is a trace point with four fields of mixed types whose values are
// not constants, as production trace points are.
func emitMixed(t *Tracer, topic string, n int, seq seqLike, d time.Duration) {
	t.Emit("mixed", "topic", topic, "n", n, "seq", seq, "wait", d)
}

// TestEmitOffAllocatesNothing: with a nil Tracer a trace point allocates
// nothing, neither the variadic slice nor the boxed values, including through
// Pending.Add.
func TestEmitOffAllocatesNothing(t *testing.T) {
	var tr *Tracer
	topic := strconv.Itoa(12345) // not a constant
	n, seq, d := 70000, seqLike{Inc: 1 << 40, N: 9}, 3*time.Second
	if a := testing.AllocsPerRun(1000, func() { emitMixed(tr, topic, n, seq, d) }); a != 0 {
		t.Fatalf("disabled Emit with 4 fields: %v allocs per call, want 0", a)
	}
	var p Pending
	if a := testing.AllocsPerRun(1000, func() { p.Add(tr, "mixed", "topic", topic, "n", n, "seq", seq, "wait", d) }); a != 0 {
		t.Fatalf("disabled Pending.Add with 4 fields: %v allocs per call, want 0", a)
	}
}

// TestEmitRecordsCopies: the recorded values keep their dynamic types (so
// Kind matches them as before) and do not change when the caller's do.
func TestEmitRecordsCopies(t *testing.T) {
	type reason string
	tr := New()
	list := []string{"a", "b"}
	hash := uint64(7)
	var nilHash *uint64
	seq := seqLike{Inc: 2, N: 3}
	tr.Emit("x", "list", list, "hash", &hash, "none", nilHash, "seq", seq, "reason", reason("left"), "d", time.Second, "ok", true, "f", 1.5)
	list[0], hash, seq.N = "changed", 8, 4
	e := tr.Events()[0]
	want := []any{"list", []string{"a", "b"}, "hash", ptr(uint64(7)), "none", (*uint64)(nil), "seq", seqLike{Inc: 2, N: 3}, "reason", reason("left"), "d", time.Second, "ok", true, "f", 1.5}
	if !reflect.DeepEqual(e.Fields, want) {
		t.Fatalf("recorded %#v\nwant     %#v", e.Fields, want)
	}
	if tr.Count(Kind("x", "reason", reason("left"), "d", time.Second)) != 1 {
		t.Fatal("Kind does not match the recorded typed values")
	}
}

func ptr[T any](v T) *T { return &v }

// TestPendingEmitsInOrder: Pending holds copies until Emit, then emits them
// in order, once.
func TestPendingEmitsInOrder(t *testing.T) {
	tr := New()
	var p Pending
	n := 1
	p.Add(tr, "a", "n", n)
	n = 2
	p.Add(tr, "b", "n", n)
	if len(tr.Events()) != 0 {
		t.Fatal("Pending emitted before Emit")
	}
	p.Emit(tr)
	p.Emit(tr)
	ev := tr.Events()
	if len(ev) != 2 || ev[0].Kind != "a" || ev[0].Get("n") != 1 || ev[1].Kind != "b" || ev[1].Get("n") != 2 {
		t.Fatalf("events %v", ev)
	}
}

// TestEmitRefusesUncopyableValues: a map (or a struct with unexported
// fields) cannot be copied and is refused loudly while tracing.
func TestEmitRefusesUncopyableValues(t *testing.T) {
	for name, v := range map[string]any{"map": map[string]int{"a": 1}, "unexported": struct{ a int }{1}, "chan": make(chan int)} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatalf("Emit of %T did not panic", v)
				}
			}()
			New().Emit("x", "v", v)
		})
	}
	var off *Tracer
	off.Emit("x", "v", map[string]int{}) // disabled: nothing is inspected
}

// BenchmarkTraceOff is a disabled trace point with four fields of mixed
// types: it must report 0 allocs/op.
func BenchmarkTraceOff(b *testing.B) {
	var tr *Tracer
	topic := strconv.Itoa(12345)
	seq := seqLike{Inc: 1 << 40, N: 9}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		emitMixed(tr, topic, i, seq, time.Duration(i))
	}
}

// BenchmarkTraceOn is the same trace point recorded by a Tracer, for
// comparison (tests only pay this).
func BenchmarkTraceOn(b *testing.B) {
	tr := New()
	topic := strconv.Itoa(12345)
	seq := seqLike{Inc: 1 << 40, N: 9}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		emitMixed(tr, topic, i, seq, time.Duration(i))
		if i%4096 == 0 {
			tr.mu.Lock()
			tr.events = tr.events[:0]
			tr.mu.Unlock()
		}
	}
}
