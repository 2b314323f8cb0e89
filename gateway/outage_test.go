package gateway

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/relaygw/relay/internal/testkit/testenv"
	"github.com/relaygw/relay/internal/trace"
)

// TestPostgresOutageRefusesWithRetryDirective: with the lease store
// unreachable an event POST gets the retry directive and nothing runs; once
// the store is back the same POST (same idempotency key) is accepted once.
func TestPostgresOutageRefusesWithRetryDirective(t *testing.T) {
	dbURL := testenv.PostgresURL(t)
	hostport, err := testenv.HostPort(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.Proxy(t, hostport)
	_, prefix := testenv.Redis(t)
	tr := trace.New()
	_, srv := storeNode(t, "a", proxy.URL(dbURL), strings.TrimSuffix(prefix, ":"), tr, nil, func(c *Config) {
		c.LeaseTTL = 15 * time.Second
		c.LeaseRenew = 5 * time.Second
	})

	proxy.Cut()
	body := `{"data":{"text":"during the outage"},"idempotency_key":"k-outage"}`
	status, hdr, resp := do(t, "POST", srv.URL+"/api/sessions/s1/events", testAPIKey, "", body)
	retry, _ := resp["retry"].(map[string]any)
	if status != 503 || resp["error"] != CodeSessionMoving || retry == nil || hdr.Get("Retry-After") == "" {
		t.Fatalf("POST during outage: %d %v (Retry-After %q), want 503 session_moving with a retry directive", status, resp, hdr.Get("Retry-After"))
	}
	if retry["after_ms"].(float64) <= 0 || retry["budget_ms"].(float64) < retry["after_ms"].(float64) {
		t.Fatalf("retry directive %v", retry)
	}
	if n := tr.Count(trace.Kind("session.accepted")); n != 0 {
		t.Fatalf("%d events were accepted while the lease store was unreachable", n)
	}

	proxy.Restore()
	// The database pool may still hold idle connections the cut broke; a
	// claim that takes one finds it dead and is refused with the retry
	// directive (nothing accepted), and the client re-sends (README "Retry
	// directive"), here at once. The pool holds a bounded number of them.
	status, _, resp = do(t, "POST", srv.URL+"/api/sessions/s1/events", testAPIKey, "", body)
	for resent := 0; status == 503 && resp["error"] == CodeSessionMoving && resent < 10; resent++ {
		status, _, resp = do(t, "POST", srv.URL+"/api/sessions/s1/events", testAPIKey, "", body)
	}
	if status != 202 || resp["epoch"] != float64(1) || resp["duplicate"] != false {
		t.Fatalf("POST after restore: %d %v", status, resp)
	}
	status, _, resp = do(t, "POST", srv.URL+"/api/sessions/s1/events", testAPIKey, "", body)
	if status != 202 || resp["duplicate"] != true {
		t.Fatalf("repeat POST: %d %v, want the duplicate answer", status, resp)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := tr.WaitFor(ctx, trace.Kind("session.checkpoint.ok")); err != nil {
		t.Fatal(err)
	}
	if n := tr.Count(trace.Kind("session.accepted")); n != 1 {
		t.Fatalf("accepted %d times, want once", n)
	}
}
