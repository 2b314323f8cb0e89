package session

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	oteltrace "go.opentelemetry.io/otel/trace"
)

// With tracing off (no TracerProvider) a span costs no allocation and its
// context is the caller's; with a provider it is recorded under the
// caller's span, with the session attribute.
func TestStartSpanOffAllocatesNothing(t *testing.T) {
	off := NewManager(Config{Owner: "a/1", Leases: NewMemoryLeaseStore(), Store: NewMemorySessionStore()})
	defer off.Close()
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		sctx, span := off.startSpan(ctx, spanAccept, oteltrace.SpanKindInternal, "s1")
		if sctx != ctx || span.IsRecording() || span.SpanContext().IsValid() {
			t.Fatal("tracing off made a recording span or a new context")
		}
		endSpan(span, nil)
	})
	if allocs != 0 {
		t.Fatalf("a span with tracing off allocates %v times", allocs)
	}

	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	on := NewManager(Config{Owner: "a/1", Leases: NewMemoryLeaseStore(), Store: NewMemorySessionStore(), TracerProvider: tp})
	defer on.Close()
	pctx, parent := tp.Tracer("t").Start(ctx, "parent")
	_, span := on.startSpan(pctx, spanForward, oteltrace.SpanKindClient, "s1")
	endSpan(span, ErrForwardFailed)
	parent.End()
	ended := rec.Ended()
	if len(ended) != 2 {
		t.Fatalf("%d spans ended, want 2", len(ended))
	}
	s := ended[0]
	if s.Name() != spanForward || s.SpanKind() != oteltrace.SpanKindClient || s.Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Fatalf("span %s kind %v parent %s", s.Name(), s.SpanKind(), s.Parent().SpanID())
	}
	if v, ok := attrOf(s, "relay.session"); !ok || v != "s1" || s.Status().Description == "" {
		t.Fatalf("span attributes %v status %v: want relay.session=s1 and the error", s.Attributes(), s.Status())
	}
}

func attrOf(s sdktrace.ReadOnlySpan, key string) (string, bool) {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.AsString(), true
		}
	}
	return "", false
}
