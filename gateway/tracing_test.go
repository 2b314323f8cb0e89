package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relaygw/relay/agent/httpagent"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	oteltrace "go.opentelemetry.io/otel/trace"
)

// spanLog records every ended span of the nodes sharing it (each node has
// its own provider, as separate processes would) and wakes waiters.
type spanLog struct {
	rec *tracetest.SpanRecorder
	ch  chan struct{} // signalled after each ended span
}

func newSpanLog() *spanLog {
	return &spanLog{rec: tracetest.NewSpanRecorder(), ch: make(chan struct{}, 1)}
}

// provider returns node name's tracer provider: spans carry
// service.instance.id=name and go to the shared recorder.
func (l *spanLog) provider(t *testing.T, name string) oteltrace.TracerProvider {
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSpanProcessor(l.rec), sdktrace.WithSpanProcessor(l),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.instance.id", name))))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp
}

func (l *spanLog) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (l *spanLog) OnEnd(sdktrace.ReadOnlySpan) {
	select {
	case l.ch <- struct{}{}:
	default:
	}
}
func (l *spanLog) Shutdown(context.Context) error   { return nil }
func (l *spanLog) ForceFlush(context.Context) error { return nil }

// waitFor waits until ok holds for the ended spans, and returns them.
func (l *spanLog) waitFor(ctx context.Context, t *testing.T, what string, ok func([]sdktrace.ReadOnlySpan) bool) []sdktrace.ReadOnlySpan {
	t.Helper()
	for {
		spans := l.rec.Ended()
		if ok(spans) {
			return spans
		}
		select {
		case <-l.ch:
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v; ended spans:\n%s", what, ctx.Err(), describeSpans(spans))
		}
	}
}

func nodeOf(s sdktrace.ReadOnlySpan) string {
	v, _ := s.Resource().Set().Value("service.instance.id")
	return v.AsString()
}

func describeSpans(spans []sdktrace.ReadOnlySpan) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "  %s on %s trace %s span %s parent %s\n", s.Name(), nodeOf(s), s.SpanContext().TraceID(), s.SpanContext().SpanID(), s.Parent().SpanID())
	}
	return b.String()
}

// TestTraceSpansForwardHop: an event POSTed on node a for a session node b
// owns makes one trace across both nodes: a's POST span, its forward span,
// b's serve span (a child of a's forward span, carried in the NATS
// request's headers), b's accept, the turn under it, the first delta and
// the end-of-turn write under the turn; and the HTTP agent's request
// carries the turn span's traceparent.
func TestTraceSpansForwardHop(t *testing.T) {
	var mu sync.Mutex
	parents := map[string]string{} // agent request turn → traceparent
	agentSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := httpagent.Verify("trace-secret", r.Header.Get(httpagent.HeaderTimestamp), r.Header.Get(httpagent.HeaderSignature), body, time.Now(), 0); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		var req httpagent.Request
		var data struct{ Text string }
		if err := json.Unmarshal(body, &req); err != nil || json.Unmarshal(req.Input.Data, &data) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		mu.Lock()
		parents[data.Text] = r.Header.Get("traceparent")
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		for _, e := range []string{`{"type":"delta","data":{"text":"hello "}}`, `{"type":"delta","data":{"text":"world"}}`, `{"type":"done"}`} {
			fmt.Fprintf(w, "data: %s\n\n", e)
			w.(http.Flusher).Flush()
		}
	}))
	defer agentSrv.Close()

	spans := newSpanLog()
	c := newTestCluster(t)
	c.tracing = func(name string) oteltrace.TracerProvider { return spans.provider(t, name) }
	useAgent := func(cfg *Config) { cfg.Agent, cfg.AgentURL, cfg.AgentSecret = "http", agentSrv.URL, "trace-secret" }
	c.addWith("a", nil, useAgent)
	c.addWith("b", nil, useAgent)
	c.waitReady()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // hang guard
	defer cancel()

	const id = "traced-1"
	post(t, c.srvs[1], id, "first") // b claims the lease
	if _, holder := c.nodes[0].owner(ctx, id); holder != c.nodes[1].Owner() {
		t.Fatalf("owner %q, want b", holder)
	}
	post(t, c.srvs[0], id, "second") // forwarded to b

	// The POST span on a is the root of the trace to follow.
	var root sdktrace.ReadOnlySpan
	spans.waitFor(ctx, t, "a's POST span", func(ss []sdktrace.ReadOnlySpan) bool {
		for _, s := range ss {
			if s.Name() == spanPostEvent && nodeOf(s) == "a" {
				root = s
				return true
			}
		}
		return false
	})
	traceID := root.SpanContext().TraceID()
	byName := func(ss []sdktrace.ReadOnlySpan, name, node string) sdktrace.ReadOnlySpan {
		var found sdktrace.ReadOnlySpan
		for _, s := range ss {
			if s.SpanContext().TraceID() == traceID && s.Name() == name && nodeOf(s) == node {
				if found != nil {
					t.Fatalf("two %s spans on %s in the trace:\n%s", name, node, describeSpans(ss))
				}
				found = s
			}
		}
		return found
	}
	ended := spans.waitFor(ctx, t, "the forwarded event's turn to end", func(ss []sdktrace.ReadOnlySpan) bool {
		return byName(ss, "session.turn", "b") != nil
	})
	fwd := byName(ended, "session.forward", "a")
	serve := byName(ended, "session.forward.serve", "b")
	accept := byName(ended, "session.accept", "b")
	turn := byName(ended, "session.turn", "b")
	first := byName(ended, "session.delta.first", "b")
	ckpt := byName(ended, "session.checkpoint", "b")
	if fwd == nil || serve == nil || accept == nil || first == nil || ckpt == nil {
		t.Fatalf("trace %s lacks a span:\n%s", traceID, describeSpans(ended))
	}
	for _, link := range []struct {
		child, parent sdktrace.ReadOnlySpan
		remote        bool
	}{{fwd, root, false}, {serve, fwd, true}, {accept, serve, false}, {turn, accept, false}, {first, turn, false}, {ckpt, turn, false}} {
		if link.child.Parent().SpanID() != link.parent.SpanContext().SpanID() || link.child.Parent().IsRemote() != link.remote {
			t.Errorf("%s on %s: parent %s (remote %v), want %s on %s (remote %v)", link.child.Name(), nodeOf(link.child),
				link.child.Parent().SpanID(), link.child.Parent().IsRemote(), link.parent.Name(), nodeOf(link.parent), link.remote)
		}
	}
	if fwd.SpanKind() != oteltrace.SpanKindClient || serve.SpanKind() != oteltrace.SpanKindServer {
		t.Errorf("forward span kinds %v → %v, want client → server", fwd.SpanKind(), serve.SpanKind())
	}
	if byName(ended, "session.turn", "a") != nil || byName(ended, "session.forward.serve", "a") != nil {
		t.Errorf("a ran part of the forwarded event:\n%s", describeSpans(ended))
	}

	mu.Lock()
	tp := parents["second"]
	mu.Unlock()
	want := fmt.Sprintf("00-%s-%s-01", traceID, turn.SpanContext().SpanID())
	if tp != want {
		t.Fatalf("agent request traceparent %q, want %q (the turn span of trace %s)", tp, want, traceID)
	}
}
