package gateway

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/testkit/phxtest"
)

// scrape GETs srv's /metrics as text.
func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	return string(b)
}

// sample returns the value of the series named series (with its labels, as
// exposed) in a /metrics text; it fails when the series is absent.
func sample(t *testing.T, text, series string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("/metrics lacks %s", series)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// After an event forwarded from a to its owner b, b's drain and a's
// takeover of the session, both nodes' /metrics hold the latency
// histograms (event accept, forward hop, lease claim, end-of-turn write,
// turn duration, time to first delta, sampled delivery) and the counters
// (takeovers, hand-backs, stand-downs, fenced writes, resumes, HTTP
// requests by route and code, build info) with the counts those steps make.
func TestClusterMetricsAfterForwardAndTakeover(t *testing.T) {
	c := newTestCluster(t, "a", "b")
	c.waitReady()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // hang guard
	defer cancel()
	const id = "metrics-1"
	ws := phxtest.DialT(t, phxtest.URL(c.srvs[0].URL, c.token()))
	ws.Join("session:"+id, map[string]any{})

	post(t, c.srvs[1], id, "owned by b")
	ws.EventsUntil(agent.TypeTurnCompleted)
	if body := post(t, c.srvs[0], id, "forwarded to b"); body["epoch"] != float64(1) {
		t.Fatalf("forwarded event at %v, want epoch 1", body)
	}
	ws.EventsUntil(agent.TypeTurnCompleted)

	dctx, dcancel := context.WithTimeout(ctx, 20*time.Second)
	defer dcancel()
	if err := c.nodes[1].Drain(dctx); err != nil {
		t.Fatalf("drain b: %v", err)
	}
	if body := post(t, c.srvs[0], id, "taken over by a"); body["epoch"] != float64(2) {
		t.Fatalf("event after b's drain at %v, want epoch 2 (a took over)", body)
	}
	ws.EventsUntil(agent.TypeTurnCompleted)

	a, b := scrape(t, c.srvs[0].URL), scrape(t, c.srvs[1].URL)
	const route = `route="/api/sessions/{id}/events"`
	for _, w := range []struct {
		text, series string
		want         float64
		atLeast      bool
	}{
		// a: two POSTs, one forwarded; one turn (after the takeover).
		{a, `relay_http_request_duration_seconds_count{code="202",method="POST",` + route + `}`, 2, false},
		{a, "relay_event_accept_duration_seconds_count", 2, false},
		{a, "relay_forward_duration_seconds_count", 1, false},
		{a, "relay_lease_claim_duration_seconds_count", 2, true},
		{a, "relay_checkpoint_duration_seconds_count", 1, false},
		{a, "relay_turn_first_delta_seconds_count", 1, false},
		{a, `relay_turn_duration_seconds_count{outcome="completed"}`, 1, false},
		{a, "relay_delivery_latency_seconds_count", 1, true},
		{a, "relay_session_takeovers_total", 1, false},
		{a, "relay_session_stand_downs_total", 0, false},
		{a, "relay_fenced_writes_total", 0, false},
		{a, "relay_turns_resumed_total", 0, false},
		// b: one POST, two turns, no forward, one hand-back.
		{b, `relay_http_request_duration_seconds_count{code="202",method="POST",` + route + `}`, 1, false},
		{b, "relay_forward_duration_seconds_count", 0, false},
		{b, "relay_lease_claim_duration_seconds_count", 2, true},
		{b, "relay_checkpoint_duration_seconds_count", 2, false},
		{b, "relay_turn_first_delta_seconds_count", 2, false},
		{b, `relay_turn_duration_seconds_count{outcome="completed"}`, 2, false},
		{b, "relay_session_handbacks_total", 1, false},
		{b, "relay_session_takeovers_total", 0, false},
	} {
		who := "a"
		if w.text == b {
			who = "b"
		}
		got := sample(t, w.text, w.series)
		if got != w.want && !(w.atLeast && got > w.want) {
			t.Errorf("%s: %s = %v, want %v", who, w.series, got, w.want)
		}
	}
	if !regexp.MustCompile(`(?m)^relay_build_info\{commit="[^"]+",goversion="go[^"]+",version="[^"]+"\} 1$`).MatchString(a) {
		t.Error("/metrics lacks relay_build_info{commit,goversion,version} 1")
	}
	if strings.Contains(a, id) {
		t.Error("a session id became a label")
	}
}
