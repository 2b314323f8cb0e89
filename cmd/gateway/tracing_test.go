package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/gateway"
	"github.com/relaygw/relay/internal/testkit/phxtest"
	"github.com/relaygw/relay/internal/testkit/proctest"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// The real binary with OTEL_EXPORTER_OTLP_ENDPOINT set exports, to a local
// OTLP/HTTP receiver, the spans of an event POSTed with a caller's
// traceparent: the POST span continues the caller's trace, and the turn,
// its first delta and its end-of-turn write are in the same trace. The
// spans still batched at SIGTERM are flushed before the process exits.
func TestBinaryExportsTraces(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the gateway binary")
	}
	var mu sync.Mutex
	var spans []*tracepb.Span
	var services []string
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		req := &coltracepb.ExportTraceServiceRequest{}
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(b, req) != nil {
			http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, kv := range rs.Resource.GetAttributes() {
				if kv.Key == "service.name" {
					services = append(services, kv.Value.GetStringValue())
				}
			}
			for _, ss := range rs.ScopeSpans {
				spans = append(spans, ss.Spans...)
			}
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()

	bin := filepath.Join(t.TempDir(), "gateway")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := proctest.Build(ctx, bin, false); err != nil {
		t.Fatal(err)
	}
	addr, err := proctest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	const secret, key = "trace-test-secret", "trace-test-key"
	p := proctest.NewProc("traced", addr, bin, []string{"ADDR=" + addr, "NODE_NAME=traced", "NATS_URL=", "DATABASE_URL=", "REDIS_URL=",
		"JWT_SECRET=" + secret, "API_KEYS=" + key, "ECHO_DELAY=1ms", "DRAIN_WINDOW=10s",
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + collector.URL, "OTEL_SERVICE_NAME=relay-trace-test", "OTEL_TRACES_EXPORTER=", "OTEL_SDK_DISABLED="})
	t.Cleanup(p.Stop)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitReady(ctx); err != nil {
		t.Fatalf("not ready: %v\n%v", err, p.Logs().Lines())
	}
	if p.Logs().Count(0, proctest.Msg("tracing on")) != 1 {
		t.Fatalf("no `tracing on` line:\n%v", p.Logs().Lines())
	}
	tok, err := gateway.NewAuthenticator(secret, nil, "").Mint("u", []string{"*"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ws := phxtest.DialT(t, phxtest.URL(p.URL(), tok))
	ws.Join("session:traced-1", map[string]any{})

	const traceID, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, p.URL()+"/api/sessions/traced-1/events", strings.NewReader(`{"data":{"text":"hello traced world"}}`))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", fmt.Sprintf("00-%s-%s-01", traceID, callerSpan))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST: %d", resp.StatusCode)
	}
	ws.EventsUntil(agent.TypeTurnCompleted)

	if err := p.Terminate(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(ctx); err != nil {
		t.Fatalf("the node did not exit: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	byName := map[string]*tracepb.Span{}
	for _, s := range spans {
		if fmt.Sprintf("%x", s.TraceId) == traceID {
			byName[s.Name] = s
		}
	}
	for _, name := range []string{"POST /api/sessions/{id}/events", "session.accept", "session.lease.claim", "session.turn", "session.delta.first", "session.checkpoint"} {
		if byName[name] == nil {
			t.Errorf("no %s span in trace %s (exported: %d spans)", name, traceID, len(spans))
		}
	}
	if post := byName["POST /api/sessions/{id}/events"]; post != nil && fmt.Sprintf("%x", post.ParentSpanId) != callerSpan {
		t.Errorf("POST span's parent %x, want the caller's %s", post.ParentSpanId, callerSpan)
	}
	if len(services) == 0 || services[0] != "relay-trace-test" {
		t.Errorf("service.name %v, want relay-trace-test", services)
	}
}
