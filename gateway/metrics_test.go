package gateway

import (
	"context"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/trace"
)

// relay_build_info is 1 with the build's labels.
func TestBuildInfoGauge(t *testing.T) {
	m := newMetrics()
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "relay_build_info" {
			continue
		}
		got := map[string]string{}
		for _, l := range mf.GetMetric()[0].GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		if mf.GetMetric()[0].GetGauge().GetValue() != 1 || got["goversion"] != runtime.Version() || got["version"] == "" || got["commit"] == "" {
			t.Fatalf("relay_build_info %v = %v", got, mf.GetMetric()[0].GetGauge().GetValue())
		}
		return
	}
	t.Fatal("relay_build_info not registered")
}

// After one event and its echo turn, /metrics has the event's POST in the
// HTTP histogram under its route pattern and 202, one accept latency, one
// completed turn duration; a 404 is counted under "unmatched", never its path.
func TestLatencyHistograms(t *testing.T) {
	_, srv, tr := testNode(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // hang guard
	defer cancel()
	if status, _, body := do(t, "POST", srv.URL+"/api/sessions/h1/events", testAPIKey, "", `{"data":{"text":"hi there"}}`); status != http.StatusAccepted {
		t.Fatalf("post: %d %v", status, body)
	}
	if _, err := tr.WaitFor(ctx, trace.Kind("session.emit", "session", "h1", "type", agent.TypeTurnCompleted)); err != nil {
		t.Fatal(err)
	}
	if status, _, _ := do(t, "GET", srv.URL+"/no/such/route-x1", "", "", ""); status != http.StatusNotFound {
		t.Fatalf("unknown route: %d", status)
	}
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(b)
	for _, want := range []string{
		`relay_http_request_duration_seconds_count{code="202",method="POST",route="/api/sessions/{id}/events"} 1`,
		`relay_http_request_duration_seconds_count{code="404",method="GET",route="unmatched"} 1`,
		"relay_event_accept_duration_seconds_count 1",
		`relay_turn_duration_seconds_count{outcome="completed"} 1`,
		"relay_session_takeovers_total 0",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(text, "route-x1") {
		t.Error("a raw path became a label")
	}
}
