package gateway

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/relaygw/relay/internal/trace"
)

// POST /admin/nodes/{node}/drain answers the node's status after the drain
// started: "draining" (or "drained"), never "ready". An undrain sent right
// after it is refused with drain_running while the drain runs, or undrains
// a drain that ended; it never answers 200 while leaving the drain to start
// after it.
func TestAdminDrainAnswersDrainingAndOrdersUndrain(t *testing.T) {
	n, srv, tr := testNode(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // hang guard
	defer cancel()
	status, _, body := do(t, "POST", srv.URL+"/admin/nodes/"+n.name+"/drain", testAdmin, "", "")
	if status != http.StatusOK || (body["status"] != "draining" && body["status"] != "drained") {
		t.Fatalf("drain answered %d %v, want 200 with status draining or drained", status, body)
	}
	ustatus, _, ubody := do(t, "POST", srv.URL+"/admin/nodes/"+n.name+"/undrain", testAdmin, "", "")
	if ustatus != http.StatusOK && !(ustatus == http.StatusConflict && ubody["error"] == CodeDrainRunning) {
		t.Fatalf("undrain right after the drain: %d %v", ustatus, ubody)
	}
	if _, err := tr.WaitFor(ctx, trace.Kind("gateway.drained", "node", n.name)); err != nil {
		t.Fatal(err, tr.Dump())
	}
	if ustatus == http.StatusOK && n.Draining() {
		t.Fatalf("undrain answered 200 %v, yet the node drained after it", ubody)
	}
}

// Drain called while an admin drain runs (SIGTERM after POST /admin/drain)
// returns only once that drain has ended, so the process does not close
// the session manager and NATS under a drain that is handing sessions back.
func TestDrainWaitsForRunningAdminDrain(t *testing.T) {
	n, srv, tr := testNode(t, nil)
	defer tr.ReleaseAll()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // hang guard
	defer cancel()
	// The admin drain stays inside the session manager's drain until the
	// second Drain has begun to wait.
	tr.Park(trace.Kind("session.drain"), trace.Kind("gateway.drain_wait", "node", n.name))
	if status, _, body := do(t, "POST", srv.URL+"/admin/drain", testAdmin, "", ""); status != http.StatusAccepted {
		t.Fatalf("drain: %d %v", status, body)
	}
	if _, err := tr.WaitFor(ctx, trace.Kind("session.drain")); err != nil { // parked there now
		t.Fatal(err, tr.Dump())
	}
	if err := n.Drain(ctx); err != nil {
		t.Fatalf("Drain during the admin drain: %v", err)
	}
	if got := tr.Count(trace.Kind("gateway.drained", "node", n.name)); got != 1 {
		t.Fatalf("Drain returned with %d drains ended, want the running one ended", got)
	}
}
