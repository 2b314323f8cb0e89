package session

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	oteltrace "go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/relaygw/relay/agent"
)

// Timing names a latency the Manager reports to Config.OnTiming.
type Timing uint8

// The latencies of Config.OnTiming.
const (
	// TimingClaim is one lease claim statement (LeaseStore.Claim), from
	// Accept, on the node that claims.
	TimingClaim Timing = iota + 1
	// TimingForward is one forward hop (Forwarder.Forward) on the sending
	// node, from the send to the owner's answer or the error.
	TimingForward
	// TimingCheckpoint is a turn's end-of-turn store write
	// (SessionStore.CompleteTurn), retries included, on the owner.
	TimingCheckpoint
	// TimingFirstDelta is the time from a turn's start on the owner (its
	// turn_started or turn_resumed event) to its first delta event
	// published.
	TimingFirstDelta
)

func (t Timing) String() string {
	switch t {
	case TimingClaim:
		return "claim"
	case TimingForward:
		return "forward"
	case TimingCheckpoint:
		return "checkpoint"
	case TimingFirstDelta:
		return "first_delta"
	}
	return "unknown"
}

// timing reports d to Config.OnTiming, when set.
func (m *Manager) timing(t Timing, d time.Duration) {
	if m.cfg.OnTiming != nil {
		m.cfg.OnTiming(t, d)
	}
}

// tracerName is the instrumentation scope of the session package's spans.
const tracerName = "github.com/relaygw/relay/session"

// Span names (docs/ARCHITECTURE.md "Tracing").
const (
	spanAccept     = "session.accept"      // Accept: claim, then the actor's durable accept
	spanClaim      = "session.lease.claim" // one LeaseStore.Claim
	spanForward    = "session.forward"     // one forward hop, on the sending node (client)
	spanServe      = "session.forward.serve"
	spanTurn       = "session.turn"        // a turn's run on the owner, start to written end
	spanFirstDelta = "session.delta.first" // the first delta's log append and publish
	spanCheckpoint = "session.checkpoint"  // the end-of-turn store write
)

// newTracer returns the Manager's OpenTelemetry tracer: nil (tracing
// off) without a TracerProvider.
func newTracer(tp oteltrace.TracerProvider) oteltrace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(tracerName)
}

// noSpan is every span while tracing is off: non-recording, invalid, and
// free to end.
var noSpan oteltrace.Span = noop.Span{}

// startSpan starts span name of kind under ctx for session id. With
// tracing off it returns ctx and noSpan, building nothing, so an
// untraced node allocates nothing for its spans; call sites add further
// attributes only while span.IsRecording().
func (m *Manager) startSpan(ctx context.Context, name string, kind oteltrace.SpanKind, id string) (context.Context, oteltrace.Span) {
	if m.otr == nil {
		return ctx, noSpan
	}
	return m.otr.Start(ctx, name, oteltrace.WithSpanKind(kind), oteltrace.WithAttributes(sessionAttr(id)))
}

// endSpan ends span, marking it failed with err when err is not nil.
func endSpan(span oteltrace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

func sessionAttr(id string) attribute.KeyValue { return attribute.String("relay.session", id) }

func posAttrs(p agent.Position) []attribute.KeyValue {
	return []attribute.KeyValue{attribute.Int64("relay.epoch", p.Epoch), attribute.Int64("relay.seq", p.Seq)}
}

// turnContext is the context a turn's span starts under: the span that
// accepted its input (p.trace), when that was recorded on this process.
func turnContext(ctx context.Context, p pendingInput) context.Context {
	if !p.trace.IsValid() {
		return ctx
	}
	return oteltrace.ContextWithSpanContext(ctx, p.trace)
}
