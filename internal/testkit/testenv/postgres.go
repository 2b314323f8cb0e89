package testenv

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/relaygw/relay/migrations"
)

// DefaultDatabaseURL is used when TEST_DATABASE_URL is unset.
const DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// DatabaseURL returns TEST_DATABASE_URL or DefaultDatabaseURL: the server
// itself, without any test schema.
func DatabaseURL() string { return env("TEST_DATABASE_URL", DefaultDatabaseURL) }

// Postgres returns a pool whose connections all use a fresh schema with the
// migrations applied. The schema is dropped when the test ends.
func Postgres(t testing.TB) *pgxpool.Pool {
	t.Helper()
	SkipIfShort(t, "Postgres")
	pool, schema := PostgresSchema(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := migrations.Apply(ctx, pool, schema); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return pool
}

// PostgresSchema returns a pool whose connections use a fresh schema name
// as search_path, and that name. Neither the schema nor any table exists
// yet (see migrations.Apply). The schema, if created, is dropped when the
// test ends.
func PostgresSchema(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	SkipIfShort(t, "Postgres")
	schema := uniqueName("t_", t.Name())
	cfg, err := pgxpool.ParseConfig(DatabaseURL())
	if err != nil {
		t.Fatalf("testenv: TEST_DATABASE_URL: %v", err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		t.Fatalf("testenv: Postgres at %s is not reachable: %v (start it or set TEST_DATABASE_URL)", redact(DatabaseURL()), err)
	}
	t.Cleanup(func() {
		pool.Close()
		dropSchema(t, schema)
	})
	return pool, schema
}

// PostgresURL returns a DSN for a fresh schema with the migrations applied,
// for processes that connect on their own (a gateway under test). The DSN
// sets search_path, so unqualified table names resolve to the test schema.
// The schema is dropped when the test ends.
func PostgresURL(t testing.TB) string {
	t.Helper()
	SkipIfShort(t, "Postgres")
	pool := Postgres(t)
	schema := pool.Config().ConnConfig.RuntimeParams["search_path"]
	u, err := url.Parse(DatabaseURL())
	if err != nil {
		t.Fatalf("testenv: TEST_DATABASE_URL: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

func dropSchema(t testing.TB, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, DatabaseURL())
	if err != nil {
		t.Errorf("testenv: drop schema %s: %v", schema, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		t.Errorf("testenv: drop schema %s: %v", schema, err)
	}
}

// redact hides a URL's password for messages.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}
