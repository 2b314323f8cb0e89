package gateway

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestStalledEventBodyIsCutOff: a body that stops arriving is refused with
// invalid_body once the body deadline passes. The server has no read timeout
// (WebSockets live long), so before the deadline such a request held its
// connection and goroutine forever, and a few thousand of them exhausted the
// node's file descriptors.
func TestStalledEventBodyIsCutOff(t *testing.T) {
	n, srv, _ := testNode(t, nil)
	n.bodyTimeout = 50 * time.Millisecond
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Only a guard against hanging the suite: the answer is expected long before.
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(conn, "POST /api/sessions/s1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"data\":", testAPIKey)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	defer resp.Body.Close()
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusBadRequest || body["error"] != CodeInvalidBody {
		t.Fatalf("stalled body answered %d %v, want 400 invalid_body", resp.StatusCode, body)
	}
	// Nothing was accepted, and a normal post still works.
	if status, _, b := do(t, "POST", srv.URL+"/api/sessions/s1/events", testAPIKey, "", `{"data":{"text":"ok"}}`); status != 202 || b["seq"] != float64(1) {
		t.Fatalf("after a stalled body: %d %v", status, b)
	}
}
