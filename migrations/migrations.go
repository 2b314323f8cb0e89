// Package migrations holds the gateway's SQL schema as goose migrations,
// embedded in the binary, and applies them at start.
//
// Several nodes may start at once: Apply serialises them on a Postgres
// advisory lock keyed by the target schema, so exactly one runs the pending
// migrations and the others find nothing left to do.
package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
)

//go:embed *.sql
var files embed.FS

// lockClass is the first half of the advisory lock key (the second half is
// hashtext(schema)), so unrelated users of advisory locks do not collide.
const lockClass = 0x72656c79 // "rely"

// Files returns the embedded migration files (goose format, one file per
// version, "-- +goose Up" / "-- +goose Down" sections).
func Files() fs.FS { return files }

// Apply brings schema up to the newest migration, creating the schema if it
// does not exist. schema "" means the connection's default search_path. It
// connects with pool's configuration (its own short-lived connections, not
// the pool's) and holds the schema's advisory lock for the whole run.
func Apply(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	err := run(ctx, pool, schema, func(ctx context.Context, p *goose.Provider) error {
		_, err := p.Up(ctx)
		return err
	})
	if err != nil {
		return fmt.Errorf("migrations: apply to schema %q: %w", schema, err)
	}
	return nil
}

// UpTo brings schema up to version (and no further), like Apply. Meant
// for tests of a migration's data conversion.
func UpTo(ctx context.Context, pool *pgxpool.Pool, schema string, version int64) error {
	err := run(ctx, pool, schema, func(ctx context.Context, p *goose.Provider) error {
		_, err := p.UpTo(ctx, version)
		return err
	})
	if err != nil {
		return fmt.Errorf("migrations: apply to schema %q up to %d: %w", schema, version, err)
	}
	return nil
}

// Down rolls schema back to version 0, dropping every table the migrations
// created (goose's own version table stays). Meant for tests.
func Down(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	err := run(ctx, pool, schema, func(ctx context.Context, p *goose.Provider) error {
		_, err := p.DownTo(ctx, 0)
		return err
	})
	if err != nil {
		return fmt.Errorf("migrations: roll back schema %q: %w", schema, err)
	}
	return nil
}

func run(ctx context.Context, pool *pgxpool.Pool, schema string, fn func(context.Context, *goose.Provider) error) (err error) {
	cfg := pool.Config().ConnConfig.Copy()
	if schema != "" {
		cfg.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
	}
	db := stdlib.OpenDB(*cfg)
	defer func() { err = errors.Join(err, db.Close()) }()

	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer func() { err = errors.Join(err, conn.Close()) }()
	if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock($1, hashtext($2))", lockClass, schema); err != nil {
		return fmt.Errorf("advisory lock: %w", err)
	}
	defer func() {
		_, uerr := conn.ExecContext(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1, hashtext($2))", lockClass, schema)
		if uerr != nil {
			err = errors.Join(err, fmt.Errorf("advisory unlock: %w", uerr))
		}
	}()
	if schema != "" {
		if _, err := conn.ExecContext(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schema}.Sanitize()); err != nil {
			return fmt.Errorf("create schema: %w", err)
		}
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, files, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return fmt.Errorf("goose: %w", err)
	}
	return fn(ctx, p)
}
