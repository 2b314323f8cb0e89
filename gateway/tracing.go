package gateway

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	oteltrace "go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// tracerName is the instrumentation scope of the gateway's own spans.
const tracerName = "github.com/relaygw/relay/gateway"

// spanPostEvent is the server span of POST /api/sessions/{id}/events: its
// children are session.accept (the event ran here) or session.forward (it
// went to the owner node, whose session.forward.serve joins the trace).
const spanPostEvent = "POST /api/sessions/{id}/events"

// httpPropagator reads a caller's W3C trace context (traceparent,
// tracestate) from request headers.
var httpPropagator = propagation.TraceContext{}

// tracerOf returns tp's tracer for the gateway's spans (nil: tracing off,
// for a nil tp).
func tracerOf(tp oteltrace.TracerProvider) oteltrace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(tracerName)
}

// startHTTPSpan starts the server span name for r, under the trace
// context r's headers carry (if any). With tracing off it returns r's
// context and a no-op span, building nothing.
func (n *Node) startHTTPSpan(r *http.Request, name string) (context.Context, oteltrace.Span) {
	ctx := r.Context()
	if n.otr == nil {
		return ctx, noop.Span{}
	}
	if r.Header.Get("traceparent") != "" {
		ctx = httpPropagator.Extract(ctx, propagation.HeaderCarrier(r.Header))
	}
	return n.otr.Start(ctx, name, oteltrace.WithSpanKind(oteltrace.SpanKindServer),
		oteltrace.WithAttributes(attribute.String("http.request.method", r.Method), attribute.String("http.route", "/api/sessions/{id}/events")))
}
