package gateway

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/relaygw/relay/internal/testkit/testenv"
)

// TestForwardWhileNATSDisconnected: a node that has lost its NATS link does
// not forward. nats.go buffers publishes while it reconnects, so the forward
// used to wait out its timeout (504 forward_timeout) and the buffered request
// reached the owner seconds later, after the caller had been told the event
// may or may not have run. Now the node refuses at once with a retry
// directive and nothing reaches the owner.
func TestForwardWhileNATSDisconnected(t *testing.T) {
	c := newTestCluster(t)
	c.add("a", nil)
	proxy := testenv.Proxy(t, strings.TrimPrefix(testenv.NATSURL(), "nats://"))
	b, srvB := c.addWith("b", nil, func(cfg *Config) { cfg.NATSURL = "nats://" + proxy.Addr() })
	c.waitReady()
	srvA := c.srvs[0]
	first := post(t, srvA, "fw1", "owned by a")

	proxy.Cut()
	waitUntil(t, "b's NATS link to drop", func() bool { return !b.nc.IsConnected() })
	status, hdr, body := do(t, "POST", srvB.URL+"/api/sessions/fw1/events", testAPIKey, "", `{"data":{"text":"while cut"}}`)
	if status != http.StatusServiceUnavailable || body["error"] != CodeSessionMoving || body["retry"] == nil || hdr.Get("Retry-After") == "" {
		t.Fatalf("post to a node without NATS = %d %v, want 503 session_moving with a retry directive", status, body)
	}

	proxy.Restore()
	waitUntil(t, "b's NATS link to come back", b.nc.IsConnected)
	later := post(t, srvB, "fw1", "after restore")
	if later["epoch"] != first["epoch"] {
		t.Fatalf("accepted at %v after %v: the session moved", later, first)
	}
	// The refused event never ran: only the two accepted inputs are in the
	// history once the later turn has completed.
	waitUntil(t, "the later turn to complete", func() bool {
		_, _, view := do(t, "GET", srvA.URL+"/api/sessions/fw1", testAPIKey, "", "")
		h, _ := view["history"].([]any)
		return len(h) >= 4
	})
	_, _, view := do(t, "GET", srvA.URL+"/api/sessions/fw1", testAPIKey, "", "")
	for _, m := range view["history"].([]any) {
		if strings.Contains(m.(map[string]any)["content"].(string), "while cut") {
			t.Fatalf("the refused event ran: history %v", view["history"])
		}
	}
}

// waitUntil polls cond until it holds (an eventual condition with no trace
// point), failing the test after a generous deadline.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
