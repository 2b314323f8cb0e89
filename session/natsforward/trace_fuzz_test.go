package natsforward

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	oteltrace "go.opentelemetry.io/otel/trace"
)

// FuzzTraceHeaders feeds arbitrary traceparent and tracestate headers, as a
// forward request from another node may carry, to the extraction Serve
// runs. Nothing panics; a context it accepts is injected into a new
// request's headers and extracted again unchanged (what the owner's spans
// continue is what it would send on).
func FuzzTraceHeaders(f *testing.F) {
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "")
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", "vendor=a,other=b")
	f.Add("00-00000000000000000000000000000000-00f067aa0ba902b7-01", "")
	f.Add("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "x")
	f.Add("", "")
	f.Fuzz(func(t *testing.T, traceparent, tracestate string) {
		h := nats.Header{}
		h.Set("traceparent", traceparent)
		h.Set("tracestate", tracestate)
		sc := oteltrace.SpanContextFromContext(propagator.Extract(context.Background(), headerCarrier(h)))
		if !sc.IsValid() {
			return
		}
		out := nats.Header{}
		propagator.Inject(oteltrace.ContextWithSpanContext(context.Background(), sc), headerCarrier(out))
		again := oteltrace.SpanContextFromContext(propagator.Extract(context.Background(), headerCarrier(out)))
		if !again.Equal(sc) {
			t.Fatalf("traceparent %q tracestate %q: extracted %v, re-sent and extracted %v", traceparent, tracestate, sc, again)
		}
	})
}
