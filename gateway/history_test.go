package gateway

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/relaygw/relay/internal/trace"
)

// GET /api/sessions/{id} pages history: the newest page by default, older
// pages through next_before, each message numbered in the whole history.
func TestGetSessionPagesHistory(t *testing.T) {
	_, srv, tr := testNode(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 1; i <= 3; i++ {
		if status, _, body := do(t, "POST", srv.URL+"/api/sessions/p1/events", testAPIKey, "", fmt.Sprintf(`{"data":{"text":"m%d"}}`, i)); status != http.StatusAccepted {
			t.Fatalf("post %d: %d %v", i, status, body)
		}
		if _, err := tr.WaitForN(ctx, trace.Kind("session.emit", "session", "p1", "type", "turn_completed"), i); err != nil {
			t.Fatal(err, tr.Dump())
		}
	}
	page := func(query string) ([]float64, float64, map[string]any) {
		t.Helper()
		status, _, body := do(t, "GET", srv.URL+"/api/sessions/p1"+query, testAPIKey, "", "")
		if status != http.StatusOK {
			t.Fatalf("GET %s: %d %v", query, status, body)
		}
		hist, _ := body["history"].([]any)
		ns := make([]float64, len(hist))
		for i, h := range hist {
			ns[i], _ = h.(map[string]any)["n"].(float64)
		}
		next, _ := body["next_before"].(float64)
		return ns, next, body
	}
	ns, next, body := page("")
	if fmt.Sprint(ns) != "[1 2 3 4 5 6]" || next != 0 || body["total"] != float64(6) || body["running"] != false {
		t.Fatalf("default page: n %v next %v body %v", ns, next, body)
	}
	last := body["history"].([]any)[5].(map[string]any)
	if last["role"] != "assistant" || last["content"] != "m3" {
		t.Fatalf("newest message %v", last)
	}
	for _, tc := range []struct {
		query, want string
		next        float64
	}{
		{"?limit=2", "[5 6]", 5},
		{"?before=5&limit=2", "[3 4]", 3},
		{"?before=3&limit=10", "[1 2]", 0},
		{"?before=1", "[]", 0},
	} {
		if ns, next, _ := page(tc.query); fmt.Sprint(ns) != tc.want || next != tc.next {
			t.Errorf("GET %s: n %v next_before %v, want %s and %v", tc.query, ns, next, tc.want, tc.next)
		}
	}
	for _, q := range []string{"?limit=0", "?limit=1001", "?limit=x", "?before=0", "?before=-3"} {
		if status, _, body := do(t, "GET", srv.URL+"/api/sessions/p1"+q, testAPIKey, "", ""); status != http.StatusBadRequest || body["error"] != CodeInvalidQuery {
			t.Errorf("GET %s = %d %v, want 400 %s", q, status, body, CodeInvalidQuery)
		}
	}
}

// A key reused with another body is refused with 422
// idempotency_key_reused; the same body is 202 duplicate:true with the
// original position.
func TestKeyReusedWithAnotherBody(t *testing.T) {
	_, srv, _ := testNode(t, nil)
	url := srv.URL + "/api/sessions/k1/events"
	status, _, first := do(t, "POST", url, testAPIKey, "", `{"data":{"text":"pay 10"},"idempotency_key":"order-7"}`)
	if status != http.StatusAccepted {
		t.Fatalf("first: %d %v", status, first)
	}
	status, _, body := do(t, "POST", url, testAPIKey, "", `{"data":{"text":"pay 99"},"idempotency_key":"order-7"}`)
	if status != http.StatusUnprocessableEntity || body["error"] != CodeKeyReused {
		t.Fatalf("reuse with another body = %d %v, want 422 %s", status, body, CodeKeyReused)
	}
	status, _, dup := do(t, "POST", url, testAPIKey, "", `{"data": {"text": "pay 10"}, "idempotency_key": "order-7"}`)
	if status != http.StatusAccepted || dup["duplicate"] != true || dup["seq"] != first["seq"] || dup["epoch"] != first["epoch"] {
		t.Fatalf("same body = %d %v, want 202 duplicate of %v", status, dup, first)
	}
}
