package gateway

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/relaygw/relay/internal/testkit/phxtest"
)

// TestSocketEndpointRefusals: a wrong method on the socket endpoints gets
// 405 method_not_allowed, and a refused WebSocket upgrade (bad vsn, bad or
// missing token) gets 403 with the documented {error,message} body; the
// endpoints still serve a good socket afterwards.
func TestSocketEndpointRefusals(t *testing.T) {
	n, srv, _ := testNode(t, nil)
	tok, err := n.Auth().Mint("u", []string{"*"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, method, path string
		status             int
		code               string
	}{
		{"PUT longpoll", http.MethodPut, "/socket/longpoll?vsn=2.0.0", 405, "method_not_allowed"},
		{"DELETE longpoll", http.MethodDelete, "/socket/longpoll?vsn=2.0.0", 405, "method_not_allowed"},
		{"POST websocket", http.MethodPost, "/socket/websocket?vsn=2.0.0", 405, "method_not_allowed"},
		{"PUT websocket", http.MethodPut, "/socket/websocket?vsn=2.0.0", 405, "method_not_allowed"},
		{"bad vsn", http.MethodGet, "/socket/websocket?vsn=3.0.0&token=" + tok, 403, CodeForbidden},
		{"bad token", http.MethodGet, "/socket/websocket?vsn=2.0.0&token=nope", 403, CodeForbidden},
		{"no token", http.MethodGet, "/socket/websocket?vsn=2.0.0", 403, CodeForbidden},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, h, body := do(t, c.method, srv.URL+c.path, "", "", "")
			if msg, _ := body["message"].(string); status != c.status || body["error"] != c.code || msg == "" {
				t.Fatalf("%s %s: %d %v, want %d %s with a message", c.method, c.path, status, body, c.status, c.code)
			}
			if ct := h.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Fatalf("Content-Type %q", ct)
			}
		})
	}
	ws := phxtest.DialT(t, phxtest.URL(srv.URL, tok))
	if reply := ws.Join("session:refusals", nil); reply["node"] == nil {
		t.Fatalf("join after refusals: %v", reply)
	}
}
