package trace

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestNilTracerIsNoop(t *testing.T) {
	var tr *Tracer
	tr.Emit("x", "k", 1)
	if tr.Enabled() || tr.Events() != nil {
		t.Fatal("nil tracer recorded something")
	}
}

func TestWaitForPastAndFuture(t *testing.T) {
	tr := New()
	tr.Emit("a", "n", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if e, err := tr.WaitFor(ctx, Kind("a", "n", 1)); err != nil || e.Seq != 1 {
		t.Fatalf("past event: %v %v", e, err)
	}
	go tr.Emit("b", "n", 2)
	e, err := tr.WaitFor(ctx, Kind("b"))
	if err != nil || e.Get("n") != 2 {
		t.Fatalf("future event: %v %v", e, err)
	}
	short, cancel2 := context.WithCancel(ctx)
	cancel2()
	if _, err := tr.WaitFor(short, Kind("never")); err == nil {
		t.Fatal("WaitFor on a cancelled context returned no error")
	}
}

// TestParkForcesOrdering parks goroutine A at "a.step" until B has emitted
// "b.done", so the trace must show b.done before a.after whatever the scheduler does.
func TestParkForcesOrdering(t *testing.T) {
	tr := New()
	tr.Park(Kind("a.step"), Kind("b.done"))
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		tr.Emit("a.step")
		tr.Emit("a.after")
	}()
	go func() {
		defer wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := tr.WaitFor(ctx, Kind("a.step")); err != nil {
			t.Error(err)
		}
		tr.Emit("b.done")
	}()
	wg.Wait()
	var order []string
	for _, e := range tr.Events() {
		order = append(order, e.Kind)
	}
	want := []string{"a.step", "b.done", "a.after"}
	if len(order) != 3 || order[0] != want[0] || order[1] != want[1] || order[2] != want[2] {
		t.Fatalf("order = %v, want %v", order, want)
	}
	if f := tr.Failures(); len(f) != 0 {
		t.Fatalf("failures: %v", f)
	}
}

func TestParkLimitReportsFailure(t *testing.T) {
	tr := New()
	tr.SetParkLimit(10 * time.Millisecond)
	tr.Park(Kind("x"), Kind("never"))
	tr.Emit("x")
	if len(tr.Failures()) != 1 {
		t.Fatalf("want one failure, got %v", tr.Failures())
	}
}

// TestKindComparesSlicesByContent: a field holding a slice must neither panic
// (== on slices does) nor leave the tracer locked.
func TestKindComparesSlicesByContent(t *testing.T) {
	tr := New()
	tr.Park(Kind("never", "list", []string{"a"}), Kind("never"))
	tr.Emit("x", "list", []string{"a", "b"})
	if n := tr.Count(Kind("x", "list", []string{"a", "b"})); n != 1 {
		t.Fatalf("slice field matched %d times, want 1", n)
	}
	if n := tr.Count(Kind("x", "list", []string{"a"})); n != 0 {
		t.Fatalf("different slice matched %d times", n)
	}
}
