package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
	"github.com/relaygw/relay/internal/testkit/phxtest"
	"github.com/relaygw/relay/internal/testkit/testenv"
	"github.com/relaygw/relay/internal/trace"
)

// The readiness state machine: one failing round does not turn a ready
// node unready, two do; after that it needs three good rounds in a row
// (reporting "recovering" until then), and a failure in between restarts
// the count.
func TestReadinessHysteresis(t *testing.T) {
	var r readiness
	fail := map[string]string{"nats": "connection reconnecting"}
	steps := []struct {
		failures map[string]string
		ready    bool
		reason   string
	}{
		{fail, false, "nats: connection reconnecting"}, // starting: not ready until a good round
		{nil, true, ""},
		{fail, true, ""},
		{nil, true, ""},
		{fail, true, ""},
		{fail, false, "nats: connection reconnecting"},
		{nil, false, "recovering: 1 of 3"},
		{nil, false, "recovering: 2 of 3"},
		{fail, false, "nats: connection reconnecting"},
		{nil, false, "recovering: 1 of 3"},
		{nil, false, "recovering: 2 of 3"},
		{nil, true, ""},
	}
	if ok, reasons := r.state(); ok || !strings.HasPrefix(reasons[0], "starting") {
		t.Fatalf("before any round: %v %v", ok, reasons)
	}
	for i, s := range steps {
		r.record(s.failures)
		ok, reasons := r.state()
		if ok != s.ready || (s.reason != "" && (len(reasons) != 1 || !strings.HasPrefix(reasons[0], s.reason))) {
			t.Fatalf("step %d: ready %v %v, want %v %q", i, ok, reasons, s.ready, s.reason)
		}
	}
}

// waitReadyz polls GET /readyz until it answers status with a message
// containing reason, and returns the message. The deadline is a hang
// guard only.
func waitReadyz(t *testing.T, base string, status int, reason string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var last string
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var body struct{ Error, Message, Status string }
			_ = json.Unmarshal(b, &body)
			last = fmt.Sprintf("%d %s", resp.StatusCode, b)
			if resp.StatusCode == status && strings.Contains(body.Message, reason) {
				return body.Message
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("/readyz never answered %d with %q; last: %s", status, reason, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func fastReady(c *Config) { c.ReadyInterval = 200 * time.Millisecond }

// NATS cut, then NATS stalled (through a TCP proxy): each time /readyz
// turns 503 naming nats, and 200 again once the proxy forwards again.
func TestReadyzFollowsNATS(t *testing.T) {
	hostport, err := testenv.HostPort(testenv.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.Proxy(t, hostport)
	c := newTestCluster(t)
	_, srv := c.addWith("a", nil, func(cfg *Config) {
		fastReady(cfg)
		cfg.NATSURL = proxy.URL(testenv.NATSURL())
	})
	waitReadyz(t, srv.URL, http.StatusOK, "")
	proxy.Cut()
	msg := waitReadyz(t, srv.URL, http.StatusServiceUnavailable, "nats:")
	t.Logf("with NATS cut: %s", msg)
	proxy.Restore()
	waitReadyz(t, srv.URL, http.StatusOK, "")
	proxy.Stall() // connected, but nothing answers
	msg = waitReadyz(t, srv.URL, http.StatusServiceUnavailable, "nats:")
	t.Logf("with NATS stalled: %s", msg)
	proxy.Resume()
	waitReadyz(t, srv.URL, http.StatusOK, "")
}

// The pubsub connection (PUBSUB_ROUTING=subjects or flood) stalled
// through a TCP proxy while the main NATS connection is fine: the probe
// round fails nats_pubsub, and the node's reasons name it, not
// "recovering" (which means every check passes).
func TestReadyReasonsNameNATSPubSub(t *testing.T) {
	hostport, err := testenv.HostPort(testenv.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.Proxy(t, hostport)
	nc, err := nats.Connect(testenv.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	bus, err := nats.Connect(proxy.URL(testenv.NATSURL()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bus.Close)
	p := &readyProbes{nc: nc, bus: bus}
	var r readiness
	ctx := context.Background()
	if f := p.round(ctx, 10*time.Second); len(f) != 0 {
		t.Fatalf("round with both connections up failed: %v", f)
	}
	r.record(nil)
	proxy.Stall()
	t.Cleanup(proxy.Resume)
	for range readyFailRounds {
		f := p.round(ctx, 500*time.Millisecond) // the stall makes the flush time out
		if _, ok := f["nats_pubsub"]; !ok || len(f) != 1 {
			t.Fatalf("round with the pubsub connection stalled: %v, want a nats_pubsub failure only", f)
		}
		r.record(f)
	}
	ok, reasons := r.state()
	if ok || len(reasons) != 1 || !strings.HasPrefix(reasons[0], "nats_pubsub: ") {
		t.Fatalf("state with nats_pubsub failing: ready %v, reasons %q; want one \"nats_pubsub: …\" reason", ok, reasons)
	}
	t.Logf("reasons: %q", reasons)
}

// Every failing check is reported by name, sorted, whatever its name:
// none is hidden behind "recovering".
func TestReadyReasonsNameUnlistedChecks(t *testing.T) {
	var r readiness
	r.record(map[string]string{"zz_new_check": "broken", "nats": "connection closed"})
	_, reasons := r.state()
	if want := []string{"nats: connection closed", "zz_new_check: broken"}; !slices.Equal(reasons, want) {
		t.Fatalf("reasons %q, want %q", reasons, want)
	}
}

// Lease writes denied (REVOKE UPDATE on the lease table from the node's
// database role): /readyz turns 503 naming lease_store, and 200 again
// after the GRANT.
func TestReadyzFollowsLeaseStorePermissions(t *testing.T) {
	dbURL := testenv.PostgresURL(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	schema := strings.Trim(u.Query().Get("search_path"), `"`)
	role := strings.ReplaceAll(schema, "-", "_") + "_node"
	exec := adminExec(t, dbURL)
	ident := pgx.Identifier{role}.Sanitize()
	schemaIdent := pgx.Identifier{schema}.Sanitize()
	exec("CREATE ROLE " + ident + " LOGIN")
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), testenv.DatabaseURL())
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		_, _ = c.Exec(context.Background(), "DROP OWNED BY "+ident)
		_, _ = c.Exec(context.Background(), "DROP ROLE "+ident)
	})
	// The node runs the (already applied) migrations at start, whose
	// CREATE SCHEMA IF NOT EXISTS needs CREATE on the database.
	exec("GRANT CREATE ON DATABASE " + pgx.Identifier{strings.TrimPrefix(u.Path, "/")}.Sanitize() + " TO " + ident)
	exec("GRANT USAGE ON SCHEMA " + schemaIdent + " TO " + ident)
	exec("GRANT ALL ON ALL TABLES IN SCHEMA " + schemaIdent + " TO " + ident)
	exec("GRANT ALL ON ALL SEQUENCES IN SCHEMA " + schemaIdent + " TO " + ident)
	nodeURL := *u
	nodeURL.User = url.User(role)
	_, srv := storeNode(t, "a", nodeURL.String(), testenv.NATSPrefix(t), nil, nil, fastReady)
	waitReadyz(t, srv.URL, http.StatusOK, "")
	exec("REVOKE UPDATE ON " + schemaIdent + ".agent_leases FROM " + ident)
	msg := waitReadyz(t, srv.URL, http.StatusServiceUnavailable, "lease_store:")
	t.Logf("with lease writes denied: %s", msg)
	exec("GRANT UPDATE ON " + schemaIdent + ".agent_leases TO " + ident)
	waitReadyz(t, srv.URL, http.StatusOK, "")
}

// Redis read-only (a Redis of the test's own, turned into a replica of a
// master that does not answer, so it refuses writes with READONLY):
// /readyz turns 503 naming replay_store, and 200 again after REPLICAOF NO
// ONE.
func TestReadyzFollowsRedisReadOnly(t *testing.T) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server not installed: this test runs a Redis of its own")
	}
	port := freePort(t)
	deadPort := freePort(t)
	cmd := exec.Command(bin, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	redisURL := fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	opt, _ := redis.ParseURL(redisURL)
	rc := redis.NewClient(opt)
	defer rc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // hang guard
	defer cancel()
	for rc.Ping(ctx).Err() != nil {
		if ctx.Err() != nil {
			t.Fatal("own redis-server did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	_, srv := storeNode(t, "a", testenv.PostgresURL(t), testenv.NATSPrefix(t), nil, nil, func(c *Config) {
		fastReady(c)
		c.RedisURL = redisURL
	})
	waitReadyz(t, srv.URL, http.StatusOK, "")
	if err := rc.ReplicaOf(ctx, "127.0.0.1", fmt.Sprint(deadPort)).Err(); err != nil {
		t.Fatal(err)
	}
	msg := waitReadyz(t, srv.URL, http.StatusServiceUnavailable, "replay_store:")
	t.Logf("with Redis read-only: %s", msg)
	if !strings.Contains(msg, "READONLY") {
		t.Fatalf("reason %q does not carry Redis's READONLY", msg)
	}
	if err := rc.ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	waitReadyz(t, srv.URL, http.StatusOK, "")
}

// freePort returns a TCP port nothing listens on right now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// upgrade sends a WebSocket upgrade request to the node at base with
// token and returns the HTTP status, headers and the JSON body of a
// refusal.
func upgrade(t *testing.T, base, token string) (int, http.Header, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+"/socket/websocket?vsn=2.0.0&token="+token, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	if resp.StatusCode != http.StatusSwitchingProtocols {
		b, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(b, &body); err != nil {
			t.Fatalf("upgrade answered %d with a body that is not JSON: %q", resp.StatusCode, b)
		}
	}
	return resp.StatusCode, resp.Header, body
}

// waitRefused sends upgrades to the node at base until one is refused and
// returns that answer: the node refuses new sockets from the round its
// checks' hysteresis turns it, which /readyz may show a round earlier. The
// deadline is a hang guard only.
func waitRefused(t *testing.T, base, token string) (int, http.Header, map[string]any) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		status, h, body := upgrade(t, base, token)
		if status != http.StatusSwitchingProtocols {
			return status, h, body
		}
		if time.Now().After(deadline) {
			t.Fatal("the node kept accepting new sockets")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkNotReadyRefusal checks a refusal of a new socket by a node that is
// not ready: not_ready, the failing checks, and a retry directive whose
// delay Retry-After carries in whole seconds.
func checkNotReadyRefusal(t *testing.T, what string, status int, h http.Header, body map[string]any, reason string) {
	t.Helper()
	reasons, _ := body["reasons"].([]any)
	if len(reasons) == 0 || !strings.Contains(fmt.Sprint(body["message"]), reason) {
		t.Fatalf("%s on a node that is not ready: %v; want reasons and a message naming %q", what, body, reason)
	}
	checkRetryRefusal(t, what, CodeNotReady, status, h, body)
}

// checkRetryRefusal checks a 503 refusal of a new socket with error code,
// a message, and a retry directive whose delay Retry-After carries in
// whole seconds.
func checkRetryRefusal(t *testing.T, what, code string, status int, h http.Header, body map[string]any) {
	t.Helper()
	retry, _ := body["retry"].(map[string]any)
	after, _ := retry["after_ms"].(float64)
	budget, _ := retry["budget_ms"].(float64)
	if msg, _ := body["message"].(string); status != http.StatusServiceUnavailable || body["error"] != code || msg == "" || after <= 0 || budget < after {
		t.Fatalf("%s: %d %v; want 503 %s with a message and a retry directive", what, status, body, code)
	}
	if ra := h.Get("Retry-After"); ra != fmt.Sprint(int64(math.Ceil(after/1000))) {
		t.Fatalf("%s: Retry-After %q for after_ms %v", what, ra, after)
	}
}

// newLongPoll asks the node at base for a new LongPoll session with token
// and returns the HTTP status, headers and JSON body.
func newLongPoll(t *testing.T, base, token string) (int, http.Header, map[string]any) {
	t.Helper()
	resp, err := http.Get(base + "/socket/longpoll?vsn=2.0.0&token=" + token)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var body map[string]any
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatalf("new LongPoll session answered %d with a body that is not JSON: %q", resp.StatusCode, b)
	}
	return resp.StatusCode, resp.Header, body
}

// A draining node refuses new sockets like a node that is not ready does:
// 503 draining with a message, Retry-After and a retry directive, on the
// WebSocket upgrade and on a new LongPoll session (which adds the
// transport's "status":500, so the client retries).
func TestDrainingRefusesNewSocketsWithRetry(t *testing.T) {
	n, srv, tr := testNode(t, nil)
	tok, err := n.Auth().Mint("u", []string{"*"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if status, _, body := upgrade(t, srv.URL, tok); status != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade before the drain: %d %v", status, body)
	}
	if status, _, body := do(t, "POST", srv.URL+"/admin/drain", testAdmin, "", ""); status != http.StatusAccepted {
		t.Fatalf("drain: %d %v", status, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // hang guard
	defer cancel()
	if _, err := tr.WaitFor(ctx, trace.Kind("gateway.drained", "node", n.name)); err != nil {
		t.Fatal(err, tr.Dump())
	}
	status, h, body := upgrade(t, srv.URL, tok)
	checkRetryRefusal(t, "WebSocket upgrade on a draining node", CodeDraining, status, h, body)
	status, h, body = newLongPoll(t, srv.URL, tok)
	checkRetryRefusal(t, "new LongPoll session on a draining node", CodeDraining, status, h, body)
	if body["status"] != float64(500) {
		t.Fatalf("LongPoll refusal %v lacks the transport's \"status\":500 (the client's retry)", body)
	}
}

// A lease write that fails for another reason than a permission, a
// read-only or dead database (a trigger of the test's own schema raises
// for one session's lease row): the event is refused, the node turns not
// ready naming lease_store and the failed write, and while it is not
// ready it refuses new sockets (WebSocket upgrade and new LongPoll session)
// with 503 not_ready and a retry directive. A socket opened before keeps
// working. Once the trigger is dropped the probe's trial of the failed
// write succeeds and the node is ready and accepts sockets again.
func TestLeaseWriteFailureRefusesNewSockets(t *testing.T) {
	dbURL := testenv.PostgresURL(t)
	exec := adminExec(t, dbURL)
	n, srv := storeNode(t, "a", dbURL, testenv.NATSPrefix(t), nil, nil, fastReady)
	waitReadyz(t, srv.URL, http.StatusOK, "")
	tok, err := n.Auth().Mint("u", []string{"*"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	old := phxtest.DialT(t, phxtest.URL(srv.URL, tok)) // open before the failure

	exec(`CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'lease row % refused by the test trigger', NEW.agent_key; END $$`)
	exec(`CREATE TRIGGER refuse_poison BEFORE INSERT OR UPDATE ON agent_leases
		FOR EACH ROW WHEN (NEW.agent_key LIKE 'poison-%') EXECUTE FUNCTION refuse_poison()`)
	status, _, body := do(t, "POST", srv.URL+"/api/sessions/poison-1/events", testAPIKey, "", `{"data":{"text":"hi"}}`)
	if status != http.StatusServiceUnavailable || body["error"] != CodeSessionMoving {
		t.Fatalf("POST whose lease write fails: %d %v, want 503 session_moving", status, body)
	}
	msg := waitReadyz(t, srv.URL, http.StatusServiceUnavailable, "lease_store:")
	t.Logf("with a lease write failing: %s", msg)
	if !strings.Contains(msg, "poison-1") || !strings.Contains(msg, "refused by the test trigger") {
		t.Fatalf("reason %q does not name the failed write and its error", msg)
	}

	status, h, body := waitRefused(t, srv.URL, tok)
	checkNotReadyRefusal(t, "WebSocket upgrade", status, h, body, "lease_store:")
	status, h, body = newLongPoll(t, srv.URL, tok)
	checkNotReadyRefusal(t, "new LongPoll session", status, h, body, "lease_store:")
	if body["status"] != float64(500) {
		t.Fatalf("LongPoll refusal %v lacks the transport's \"status\":500 (the client's retry)", body)
	}
	// The socket opened before still answers.
	f, _ := old.Until(old.Send("", "phoenix", "heartbeat", map[string]any{}))
	if r, err := f.Reply(); err != nil || r.Status != "ok" {
		t.Fatalf("the socket opened before: heartbeat reply %+v %v", r, err)
	}

	exec(`DROP TRIGGER refuse_poison ON agent_leases`)
	waitReadyz(t, srv.URL, http.StatusOK, "")
	if status, _, body := upgrade(t, srv.URL, tok); status != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade on the ready node: %d %v", status, body)
	}
	post(t, srv, "poison-1", "hi again")
}

// adminExec connects to dbURL (search_path: the test's own schema) for the
// test's lifetime and returns a function that runs one statement on that
// connection, failing the test when it errs.
func adminExec(t *testing.T, dbURL string) func(sql string) {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) })
	return func(sql string) {
		t.Helper()
		if _, err := admin.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}
