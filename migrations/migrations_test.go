package migrations_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/relaygw/relay/internal/testkit/testenv"
	"github.com/relaygw/relay/migrations"
)

func tables(t *testing.T, pool *pgxpool.Pool, schema string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(),
		"SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY table_name", schema)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// appliedVersions lists goose's applied versions in order of application.
func appliedVersions(t *testing.T, pool *pgxpool.Pool) []int64 {
	t.Helper()
	rows, err := pool.Query(context.Background(), "SELECT version_id FROM goose_db_version WHERE is_applied ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestConcurrentApplyOnFreshSchema(t *testing.T) {
	pool, schema := testenv.PostgresSchema(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	const nodes = 5
	var wg sync.WaitGroup
	errs := make([]error, nodes)
	for i := range nodes {
		wg.Go(func() { errs[i] = migrations.Apply(ctx, pool, schema) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("apply %d: %v", i, err)
		}
	}
	want := []string{"agent_checkpoints", "agent_leases", "goose_db_version", "session_history", "session_inbox", "session_keys", "session_state"}
	if got := tables(t, pool, schema); !slices.Equal(got, want) {
		t.Fatalf("tables = %v, want %v", got, want)
	}
	if got := appliedVersions(t, pool); !slices.Equal(got, []int64{0, 1, 2, 3, 4, 5, 6}) {
		t.Fatalf("applied versions = %v, want each of 0, 1, 2, 3, 4, 5, 6 once", got)
	}
}

func TestDownThenUp(t *testing.T) {
	pool, schema := testenv.PostgresSchema(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := migrations.Apply(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO agent_leases VALUES ('k', 'n/1', 1, now())"); err != nil {
		t.Fatal(err)
	}
	if err := migrations.Down(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	if got := tables(t, pool, schema); !slices.Equal(got, []string{"goose_db_version"}) {
		t.Fatalf("tables after down = %v, want only goose_db_version", got)
	}
	if err := migrations.Apply(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM agent_leases").Scan(&n); err != nil || n != 0 {
		t.Fatalf("agent_leases after down+up: %d rows, %v; want an empty table", n, err)
	}
	// Applying again is a no-op.
	if err := migrations.Apply(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	if got := tables(t, pool, schema); len(got) != 7 {
		t.Fatalf("tables after re-apply = %v", got)
	}
}

// Checkpoint documents written before 00003 are carried over into the
// session store tables: the fence row, the history, the pending inputs and
// the idempotency keys (with an unknown body hash).
func TestCheckpointDocumentsCarriedOver(t *testing.T) {
	pool, schema := testenv.PostgresSchema(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := migrations.UpTo(ctx, pool, schema, 2); err != nil {
		t.Fatal(err)
	}
	doc := `{"v":1,"seq":7,"history":[{"role":"user","content":"hi"},{"role":"assistant","content":"hi"}],
		"keys":[{"key":"k1","epoch":2,"seq":5}],
		"pending":[{"input":{"type":"message","data":{"text":"next"},"idempotency_key":"k2"},"epoch":2,"seq":7}]}`
	if _, err := pool.Exec(ctx, "INSERT INTO agent_checkpoints (key, epoch, data) VALUES ('s1', 2, $1)", doc); err != nil {
		t.Fatal(err)
	}
	if err := migrations.Apply(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	var epoch, seq, historyN int64
	if err := pool.QueryRow(ctx, "SELECT epoch, seq, history_n FROM session_state WHERE key = 's1'").Scan(&epoch, &seq, &historyN); err != nil ||
		epoch != 2 || seq != 7 || historyN != 2 {
		t.Fatalf("session_state = %d %d %d (%v), want 2 7 2", epoch, seq, historyN, err)
	}
	var contents string
	if err := pool.QueryRow(ctx, "SELECT string_agg(role || ':' || convert_from(content, 'UTF8'), ',' ORDER BY n) FROM session_history WHERE key = 's1'").Scan(&contents); err != nil ||
		contents != "user:hi,assistant:hi" {
		t.Fatalf("session_history = %q (%v)", contents, err)
	}
	var typ, data, key string
	if err := pool.QueryRow(ctx, "SELECT convert_from(input_type, 'UTF8'), convert_from(input_data, 'UTF8'), idem_key FROM session_inbox WHERE key = 's1' AND epoch = 2 AND seq = 7").Scan(&typ, &data, &key); err != nil ||
		typ != "message" || !strings.Contains(data, `"next"`) || key != "k2" {
		t.Fatalf("session_inbox entry = %q %q %q (%v), want message, the data and k2", typ, data, key, err)
	}
	var keys int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM session_keys WHERE key = 's1' AND idem_key = 'k1' AND seq = 5 AND body_hash = ''").Scan(&keys); err != nil || keys != 1 {
		t.Fatalf("session_keys: %d rows (%v), want k1 at seq 5 with an unknown hash", keys, err)
	}
}
