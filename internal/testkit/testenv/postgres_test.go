package testenv

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

func schemaExists(t *testing.T, schema string) bool {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, DatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", schema).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

func TestPostgresIsolatedSchemaDroppedAtCleanup(t *testing.T) {
	SkipIfShort(t, "Postgres")
	var schema string
	t.Run("inner", func(t *testing.T) {
		pool := Postgres(t)
		ctx := context.Background()
		if err := pool.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
			t.Fatal(err)
		}
		if !schemaExists(t, schema) {
			t.Fatalf("schema %s does not exist", schema)
		}
		// Every connection of the pool, not only the first, sees the schema.
		c1, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c1.Release()
		c2, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c2.Release()
		for _, c := range []interface {
			QueryRow(context.Context, string, ...any) pgx.Row
		}{c1, c2} {
			var n int
			if err := c.QueryRow(ctx, "SELECT count(*) FROM agent_leases").Scan(&n); err != nil {
				t.Fatalf("agent_leases on a pooled connection: %v", err)
			}
			if err := c.QueryRow(ctx, "SELECT count(*) FROM agent_checkpoints").Scan(&n); err != nil {
				t.Fatalf("agent_checkpoints on a pooled connection: %v", err)
			}
		}
	})
	if schema == "" {
		t.Fatal("no schema seen")
	}
	if schemaExists(t, schema) {
		t.Fatalf("schema %s survived the test's cleanup", schema)
	}
}

func TestPostgresURLUsesTheTestSchema(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var schema string
	if err := conn.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		t.Fatal(err)
	}
	if len(schema) < 2 || schema[:2] != "t_" {
		t.Fatalf("current_schema() = %q, want a test schema", schema)
	}
}
