package gateway

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/testkit/phxtest"
	"github.com/relaygw/relay/internal/testkit/testenv"
	"github.com/relaygw/relay/internal/trace"
	"go.uber.org/zap/zaptest"
)

// holdAgent emits one delta, then blocks until released (or its turn is
// cancelled), then optionally emits a late delta before finishing.
type holdAgent struct {
	started chan struct{}
	release chan struct{}
	late    string
}

func newHoldAgent(late string) *holdAgent {
	return &holdAgent{started: make(chan struct{}, 8), release: make(chan struct{}), late: late}
}

func (a *holdAgent) Run(ctx context.Context, _ agent.Turn, emit agent.Emit) (agent.Message, error) {
	if err := emit(ctx, agent.TypeDelta, map[string]string{"text": "thinking "}); err != nil {
		return agent.Message{}, err
	}
	a.started <- struct{}{}
	select {
	case <-a.release:
	case <-ctx.Done():
		return agent.Message{}, ctx.Err()
	}
	if a.late != "" {
		if err := emit(ctx, agent.TypeDelta, map[string]string{"text": a.late}); err != nil {
			return agent.Message{}, err
		}
	}
	return agent.Message{Role: "assistant", Content: "done"}, nil
}

// storeNode starts a node on shared Postgres and Redis (no NATS).
func storeNode(t *testing.T, name, dbURL, cluster string, tr *trace.Tracer, agent agent.Agent, mut func(*Config)) (*Node, *httptest.Server) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.NodeName = name
	cfg.JWTSecret = testSecret
	cfg.APIKeys = []string{testAPIKey}
	cfg.AdminToken = testAdmin
	cfg.EchoDelay = time.Millisecond
	cfg.DatabaseURL = dbURL
	cfg.RedisURL = testenv.RedisServerURL()
	cfg.Cluster = cluster
	// The renewer must not re-claim during the test's forced orderings.
	cfg.LeaseTTL = time.Hour
	cfg.LeaseRenew = 20 * time.Minute
	if mut != nil {
		mut(&cfg)
	}
	n, err := New(context.Background(), cfg, Options{Logger: zaptest.NewLogger(t).Named(name), Tracer: tr, Agent: agent})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(n.Handler())
	t.Cleanup(func() {
		srv.Close()
		n.Close()
	})
	return n, srv
}

// TestFenceCanaryTwoNodes: node A runs a turn and stalls; its lease lapses on
// the database clock; node B takes the session over (epoch 2). When A's turn
// resumes, its next write (a late delta to the shared replay log, or the
// checkpoint) is fenced, the turn halts, and nothing more from A's turn
// reaches the socket subscribed on A.
func TestFenceCanaryTwoNodes(t *testing.T) {
	for _, late := range []string{"", "late "} {
		name := "checkpoint"
		if late != "" {
			name = "append"
		}
		t.Run(name, func(t *testing.T) { testFenceCanary(t, late) })
	}
}

func testFenceCanary(t *testing.T, late string) {
	dbURL := testenv.PostgresURL(t)
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	_, prefix := testenv.Redis(t)
	cluster := strings.TrimSuffix(prefix, ":")
	tr := trace.New()
	agA := newHoldAgent(late)
	a, srvA := storeNode(t, "a", dbURL, cluster, tr, agA, nil)
	b, srvB := storeNode(t, "b", dbURL, cluster, tr, nil, nil)

	tok, _ := a.Auth().Mint("u", []string{"*"}, time.Hour)
	ws := phxtest.DialT(t, phxtest.URL(srvA.URL, tok))
	ws.Join("session:s1", map[string]any{})

	status, _, acc := do(t, "POST", srvA.URL+"/api/sessions/s1/events", testAPIKey, "", `{"data":{"text":"first"}}`)
	if status != 202 || acc["epoch"] != float64(1) {
		t.Fatalf("POST to A: %d %v", status, acc)
	}
	<-agA.started

	// The lease lapses on the database clock; A notices nothing.
	if _, err := pool.Exec(context.Background(), `UPDATE agent_leases SET expires_at = now() - interval '1 second' WHERE agent_key = 's1'`); err != nil {
		t.Fatal(err)
	}
	status, _, acc = do(t, "POST", srvB.URL+"/api/sessions/s1/events", testAPIKey, "", `{"data":{"text":"second"}}`)
	if status != 202 || acc["epoch"] != float64(2) {
		t.Fatalf("POST to B after expiry: %d %v, want epoch 2", status, acc)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := tr.WaitFor(ctx, trace.Kind("session.emit", "owner", b.Owner(), "type", agent.TypeTurnCompleted)); err != nil {
		t.Fatal(err, tr.Dump())
	}

	before := ws.Barrier()
	close(agA.release)
	if _, err := tr.WaitFor(ctx, trace.Kind("session.fenced", "owner", a.Owner())); err != nil {
		t.Fatal(err, tr.Dump())
	}
	if _, err := tr.WaitFor(ctx, trace.Kind("session.standdown", "owner", a.Owner())); err != nil {
		t.Fatal(err, tr.Dump())
	}
	after := ws.Barrier()

	var epoch1 []string
	for _, ev := range append(before, after...) {
		if ev.Epoch == 1 {
			epoch1 = append(epoch1, ev.Type)
		}
	}
	want := "user_event turn_started delta"
	if got := strings.Join(epoch1, " "); got != want {
		t.Fatalf("socket on A saw epoch-1 events %q, want only %q (nothing after the fence)", got, want)
	}
	for _, ev := range after {
		if ev.Epoch == 1 {
			t.Fatalf("epoch-1 event %+v reached the socket after the fence", ev)
		}
	}
	if n := len(a.manager.Sessions()); n != 0 {
		t.Fatalf("A still runs %d sessions after standing down", n)
	}
	// The checkpoint belongs to epoch 2.
	var epoch int64
	if err := pool.QueryRow(context.Background(), `SELECT epoch FROM session_state WHERE key = 's1'`).Scan(&epoch); err != nil || epoch != 2 {
		t.Fatalf("checkpoint epoch = %d (%v), want 2", epoch, err)
	}
}
