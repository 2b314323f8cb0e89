package telemetry

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// clearEnv unsets the variables Setup reads, for the test's duration.
func clearEnv(t *testing.T) {
	for _, k := range []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
		"OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG"} {
		t.Setenv(k, "")
	}
}

func TestSetupOffByDefault(t *testing.T) {
	clearEnv(t)
	tr, err := Setup(context.Background(), "test")
	if err != nil {
		t.Fatal(err)
	}
	if tr.Exporter != ExporterNone {
		t.Fatalf("exporter %q, want none", tr.Exporter)
	}
	_, span := tr.Provider.Tracer("t").Start(context.Background(), "s")
	defer span.End()
	if span.IsRecording() || span.SpanContext().IsValid() {
		t.Fatal("tracing off must make non-recording spans without a trace id")
	}
}

func TestSetupRefusesUnknownSettings(t *testing.T) {
	for _, c := range []struct{ key, val, want string }{
		{"OTEL_TRACES_EXPORTER", "zipkin", "OTEL_TRACES_EXPORTER"},
		{"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "http/protobuf"},
	} {
		t.Run(c.val, func(t *testing.T) {
			clearEnv(t)
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
			t.Setenv(c.key, c.val)
			_, err := Setup(context.Background(), "test")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want one naming %s", err, c.want)
			}
		})
	}
}

func TestSetupDisabledWins(t *testing.T) {
	clearEnv(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
	t.Setenv("OTEL_SDK_DISABLED", "true")
	tr, err := Setup(context.Background(), "test")
	if err != nil || tr.Exporter != ExporterNone {
		t.Fatalf("exporter %q err %v, want none", tr.Exporter, err)
	}
}

// TestSetupExportsOTLP sends spans to a local OTLP/HTTP receiver named by
// OTEL_EXPORTER_OTLP_ENDPOINT and decodes what arrives.
func TestSetupExportsOTLP(t *testing.T) {
	clearEnv(t)
	var mu sync.Mutex
	var got []*coltracepb.ExportTraceServiceRequest
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		req := &coltracepb.ExportTraceServiceRequest{}
		if err := proto.Unmarshal(b, req); err != nil {
			t.Errorf("undecodable export: %v", err)
		}
		mu.Lock()
		got, paths = append(got, req), append(paths, r.URL.Path)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_SERVICE_NAME", "relay-test")
	tr, err := Setup(context.Background(), "v9.9.9")
	if err != nil {
		t.Fatal(err)
	}
	if tr.Exporter != ExporterOTLP || tr.Endpoint != srv.URL {
		t.Fatalf("exporter %q endpoint %q", tr.Exporter, tr.Endpoint)
	}
	_, span := tr.Provider.Tracer("t").Start(context.Background(), "exported-span")
	span.End()
	if err := tr.Shutdown(context.Background()); err != nil { // flushes
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || paths[0] != "/v1/traces" {
		t.Fatalf("%d exports at %v, want 1 at /v1/traces", len(got), paths)
	}
	rs := got[0].ResourceSpans
	if len(rs) != 1 || len(rs[0].ScopeSpans) != 1 || len(rs[0].ScopeSpans[0].Spans) != 1 {
		t.Fatalf("export holds %v, want one span", rs)
	}
	if name := rs[0].ScopeSpans[0].Spans[0].Name; name != "exported-span" {
		t.Fatalf("span %q", name)
	}
	attrs := map[string]string{}
	for _, kv := range rs[0].Resource.Attributes {
		attrs[kv.Key] = kv.Value.GetStringValue()
	}
	if attrs["service.name"] != "relay-test" || attrs["service.version"] != "v9.9.9" {
		t.Fatalf("resource %v: want service.name from OTEL_SERVICE_NAME and the build's version", attrs)
	}
}
