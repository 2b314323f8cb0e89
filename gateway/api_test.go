package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/trace"
	"go.uber.org/zap/zaptest"
)

const (
	testSecret = "test-secret"
	testAPIKey = "test-key"
	testAdmin  = "admin-token"
)

// testNode starts an embedded node behind an httptest server.
func testNode(t *testing.T, mut func(*Config)) (*Node, *httptest.Server, *trace.Tracer) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.NodeName = "n1"
	cfg.JWTSecret = testSecret
	cfg.APIKeys = []string{testAPIKey}
	cfg.AdminToken = testAdmin
	cfg.EchoDelay = time.Millisecond
	cfg.MaxBodyBytes = 1024
	if mut != nil {
		mut(&cfg)
	}
	tr := trace.New()
	n, err := New(context.Background(), cfg, Options{Logger: zaptest.NewLogger(t), Tracer: tr})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(n.Handler())
	t.Cleanup(func() {
		srv.Close()
		n.Close()
	})
	return n, srv, tr
}

func do(t *testing.T, method, url, auth, ctype, body string) (int, http.Header, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("%s %s: non-JSON body %q", method, url, raw)
		}
	}
	return resp.StatusCode, resp.Header, m
}

func TestPostEventAccepted(t *testing.T) {
	_, srv, _ := testNode(t, nil)
	code, _, body := do(t, "POST", srv.URL+"/api/sessions/s1/events", testAPIKey, "application/json",
		`{"type":"message","data":{"text":"hello there"}}`)
	if code != http.StatusAccepted {
		t.Fatalf("status %d body %v", code, body)
	}
	if body["session"] != "s1" || body["epoch"] != float64(1) || body["seq"] != float64(1) || body["duplicate"] != false {
		t.Fatalf("accepted body = %v", body)
	}
	// The same idempotency key twice is accepted once.
	_, _, a := do(t, "POST", srv.URL+"/api/sessions/s1/events", testAPIKey, "", `{"data":{"text":"x"},"idempotency_key":"k1"}`)
	_, _, b := do(t, "POST", srv.URL+"/api/sessions/s1/events", testAPIKey, "", `{"data":{"text":"x"},"idempotency_key":"k1"}`)
	if a["seq"] != b["seq"] || b["duplicate"] != true {
		t.Fatalf("idempotent retry: first %v second %v", a, b)
	}
}

// TestPostEventBadInput: every kind of bad input gets its documented code and
// the node keeps serving.
func TestPostEventBadInput(t *testing.T) {
	n, srv, _ := testNode(t, nil)
	other, err := n.Auth().Mint("u", []string{"mine-*"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	url := srv.URL + "/api/sessions/s1/events"
	cases := []struct {
		name, url, auth, ctype, body string
		status                       int
		code                         string
	}{
		{"not json", url, testAPIKey, "", `hello`, 400, CodeInvalidBody},
		{"array", url, testAPIKey, "", `[1,2]`, 400, CodeInvalidBody},
		{"data not object", url, testAPIKey, "", `{"data":"x"}`, 400, CodeInvalidBody},
		{"data null", url, testAPIKey, "", `{"data":null}`, 400, CodeInvalidBody},
		{"data array", url, testAPIKey, "", `{"data":[]}`, 400, CodeInvalidBody},
		{"unknown field", url, testAPIKey, "", `{"dta":{}}`, 400, CodeInvalidBody},
		{"trailing garbage", url, testAPIKey, "", `{"data":{}} {}`, 400, CodeInvalidBody},
		{"empty", url, testAPIKey, "", ``, 400, CodeInvalidBody},
		{"oversize", url, testAPIKey, "", `{"data":{"text":"` + strings.Repeat("a", 2000) + `"}}`, 413, CodeBodyTooLarge},
		{"content type", url, testAPIKey, "text/plain", `{}`, 415, CodeUnsupportedMedia},
		{"invalid id", srv.URL + "/api/sessions/bad%20id!/events", testAPIKey, "", `{}`, 400, CodeInvalidSessionID},
		{"long id", srv.URL + "/api/sessions/" + strings.Repeat("a", 129) + "/events", testAPIKey, "", `{}`, 400, CodeInvalidSessionID},
		{"no auth", url, "", "", `{}`, 401, CodeUnauthorized},
		{"bad key", url, "nope", "", `{}`, 401, CodeUnauthorized},
		{"token without session", url, other, "", `{}`, 403, CodeForbidden},
		{"admin without token", srv.URL + "/admin/node", "", "", ``, 401, CodeUnauthorized},
		{"admin with api key", srv.URL + "/admin/node", testAPIKey, "", ``, 401, CodeUnauthorized},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			method := "POST"
			if strings.HasPrefix(c.url, srv.URL+"/admin") {
				method = "GET"
			}
			status, _, body := do(t, method, c.url, c.auth, c.ctype, c.body)
			if status != c.status || body["error"] != c.code || body["message"] == "" {
				t.Fatalf("got %d %v, want %d %s", status, body, c.status, c.code)
			}
		})
	}
	// Every refused event body is counted by its code (the eight refusals
	// above after authorization: eight invalid bodies, one oversize, one
	// content type); a refused session id or credential is not an event.
	if got := testutilCount(t, n, "relay_events_refused_total"); got != 10 {
		t.Fatalf("relay_events_refused_total = %v, want 10", got)
	}
	// Nothing was run by the refused requests, and the node still works.
	status, _, body := do(t, "POST", url, testAPIKey, "", `{"data":{"text":"ok"}}`)
	if status != 202 || body["seq"] != float64(1) {
		t.Fatalf("after bad input: %d %v", status, body)
	}
}

func TestGetSessionAndAdmin(t *testing.T) {
	_, srv, tr := testNode(t, nil)
	do(t, "POST", srv.URL+"/api/sessions/s2/events", testAPIKey, "", `{"data":{"text":"a b c"}}`)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The view follows the actor's state by the time an event is
	// published: once the reply message is out, it holds both messages.
	if _, err := tr.WaitFor(ctx, trace.Kind("session.emit", "session", "s2", "type", agent.TypeMessage)); err != nil {
		t.Fatal(err, tr.Dump())
	}
	status, _, body := do(t, "GET", srv.URL+"/api/sessions/s2", testAPIKey, "", "")
	hist, _ := body["history"].([]any)
	if status != 200 {
		t.Fatalf("GET: %d %v", status, body)
	}
	if len(hist) != 2 || body["owner"] == "" || body["node"] != "n1" {
		t.Fatalf("GET body = %v", body)
	}
	waitReadyz(t, srv.URL, http.StatusOK, "") // the readiness probes run once Muster is ready
	status, _, info := do(t, "GET", srv.URL+"/admin/node", testAdmin, "", "")
	if status != 200 || info["name"] != "n1" || info["mode"] != "embedded" || info["ready"] != true {
		t.Fatalf("admin node: %d %v", status, info)
	}
	if s, _, _ := do(t, "GET", srv.URL+"/readyz", "", "", ""); s != 200 {
		t.Fatalf("readyz = %d", s)
	}
}

func FuzzDecodeInput(f *testing.F) {
	for _, s := range []string{`{"type":"message","data":{"text":"hi"},"idempotency_key":"k"}`, `{}`, `{"data":null}`, `[]`, `{"data":"x"}`, `{"type":1}`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		in, err := DecodeInput(body)
		if err != nil {
			if ae, ok := err.(*apiError); !ok || (ae.Code != CodeInvalidBody && ae.Code != CodeInvalidInput) {
				t.Fatalf("error %v is not an invalid_body or invalid_input apiError", err)
			}
			return
		}
		if in.Type == "" || len(in.Data) == 0 || in.Data[0] != '{' {
			t.Fatalf("accepted input with type %q data %q", in.Type, in.Data)
		}
		if !json.Valid(in.Data) {
			t.Fatalf("accepted invalid data %q", in.Data)
		}
	})
}

// TestHibernateAndThaw: a session hibernates after its idle period and thaws
// from its checkpoint with its history intact on the next event.
func TestHibernateAndThaw(t *testing.T) {
	n, srv, tr := testNode(t, func(c *Config) { c.SessionIdle = 50 * time.Millisecond })
	do(t, "POST", srv.URL+"/api/sessions/h1/events", testAPIKey, "", `{"data":{"text":"remember me"}}`)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := tr.WaitFor(ctx, trace.Kind("session.hibernate", "session", "h1")); err != nil {
		t.Fatal(err, tr.Dump())
	}
	// The actor leaves the manager's table right after it hands the lease back.
	if _, err := tr.WaitFor(ctx, trace.Kind("session.exited", "session", "h1")); err != nil {
		t.Fatal(err, tr.Dump())
	}
	if s := n.manager.Sessions(); len(s) != 0 {
		t.Fatalf("sessions still live after hibernation: %+v", s)
	}
	_, _, view := do(t, "GET", srv.URL+"/api/sessions/h1", testAPIKey, "", "")
	if h, _ := view["history"].([]any); len(h) != 2 {
		t.Fatalf("history from the checkpoint = %v, want the user message and the reply", view["history"])
	}
	status, _, acc := do(t, "POST", srv.URL+"/api/sessions/h1/events", testAPIKey, "", `{"data":{"text":"again"}}`)
	if status != 202 || acc["seq"].(float64) <= view["seq"].(float64) {
		t.Fatalf("after thaw: %d %v (checkpoint seq %v)", status, acc, view["seq"])
	}
	if _, err := tr.WaitFor(ctx, trace.Kind("session.thaw", "session", "h1")); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.WaitForN(ctx, trace.Kind("session.checkpoint.ok", "session", "h1"), 2); err != nil {
		t.Fatal(err, tr.Dump())
	}
	// The view follows the actor's state by the time an event is
	// published: once the second reply message is out, it holds all four.
	if _, err := tr.WaitForN(ctx, trace.Kind("session.emit", "session", "h1", "type", agent.TypeMessage), 2); err != nil {
		t.Fatal(err, tr.Dump())
	}
	_, _, view = do(t, "GET", srv.URL+"/api/sessions/h1", testAPIKey, "", "")
	if h, _ := view["history"].([]any); len(h) != 4 {
		t.Fatalf("history after the second turn = %v, want 4 messages", view["history"])
	}
}
