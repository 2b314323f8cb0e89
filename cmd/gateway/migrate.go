package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/relaygw/relay/migrations"
)

// migrateCmd manages the Postgres schema the gateway's stores use: the
// schema DATABASE_URL's search_path names (else the server's default).
// Nodes apply pending migrations at start; the command lets an operator do
// it ahead of a deploy, see where a database stands, or roll back.
type migrateCmd struct {
	Up     migrateUpCmd     `cmd:"" help:"Apply the pending migrations (all, or up to --to)."`
	Down   migrateDownCmd   `cmd:"" help:"Roll back the newest applied migration, or every one above --to (0: all)."`
	Status migrateStatusCmd `cmd:"" help:"List the migrations, each applied (with when) or pending."`
}

// migrateDB is the database setting every migrate command takes.
type migrateDB struct {
	DatabaseURL string        `name:"database-url" env:"DATABASE_URL" help:"Postgres URL; ?search_path=<schema> picks the schema (as for gateway serve)."`
	Timeout     time.Duration `name:"timeout" default:"1m" help:"Give up after this long (connecting, waiting for another node's migration lock, running)."`
}

// connect opens a pool on DatabaseURL and returns it with its schema.
func (d migrateDB) connect(ctx context.Context) (*pgxpool.Pool, string, error) {
	if d.DatabaseURL == "" {
		return nil, "", errors.New("migrate: DATABASE_URL (or --database-url) is required")
	}
	if d.Timeout <= 0 {
		return nil, "", fmt.Errorf("migrate: --timeout %v must be positive", d.Timeout)
	}
	pool, err := pgxpool.New(ctx, d.DatabaseURL)
	if err != nil {
		return nil, "", fmt.Errorf("migrate: DATABASE_URL: %w", err)
	}
	return pool, migrations.SchemaOf(pool), nil
}

// do runs f with a pool on the database, bounded by Timeout.
func (d migrateDB) do(f func(ctx context.Context, pool *pgxpool.Pool, schema string) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), d.Timeout)
	defer cancel()
	pool, schema, err := d.connect(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	return f(ctx, pool, schema)
}

type migrateUpCmd struct {
	migrateDB `embed:""`
	To        int64 `name:"to" help:"Apply up to this version only (0: all pending)."`
}

// Run applies the pending migrations and prints the schema's version.
func (c *migrateUpCmd) Run(out io.Writer) error {
	if c.To < 0 {
		return fmt.Errorf("migrate up: --to %d must be a version (0: all)", c.To)
	}
	return c.do(func(ctx context.Context, pool *pgxpool.Pool, schema string) error {
		before, err := migrations.Status(ctx, pool, schema)
		if err != nil {
			return err
		}
		if c.To == 0 {
			err = migrations.Apply(ctx, pool, schema)
		} else {
			err = migrations.UpTo(ctx, pool, schema, c.To)
		}
		if err != nil {
			return err
		}
		after, err := migrations.Status(ctx, pool, schema)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(out, "schema %s: version %d (was %d)\n", schemaName(schema), migrations.Version(after), migrations.Version(before))
		return err
	})
}

type migrateDownCmd struct {
	migrateDB `embed:""`
	To        int64 `name:"to" default:"-1" help:"Roll back every applied migration above this version (0: all). Default: the newest applied one only."`
}

// Run rolls back and prints the versions rolled back.
func (c *migrateDownCmd) Run(out io.Writer) error {
	if c.To < -1 {
		return fmt.Errorf("migrate down: --to %d must be a version (0: all)", c.To)
	}
	return c.do(func(ctx context.Context, pool *pgxpool.Pool, schema string) error {
		done, err := migrations.RollBack(ctx, pool, schema, c.To)
		for _, v := range done {
			fmt.Fprintf(out, "rolled back %d\n", v)
		}
		if err != nil {
			return err
		}
		st, err := migrations.Status(ctx, pool, schema)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(out, "schema %s: version %d\n", schemaName(schema), migrations.Version(st))
		return err
	})
}

type migrateStatusCmd struct {
	migrateDB `embed:""`
}

// Run prints one line per migration: version, file, applied-at or
// "pending"; then the schema's version.
func (c *migrateStatusCmd) Run(out io.Writer) error {
	return c.do(func(ctx context.Context, pool *pgxpool.Pool, schema string) error {
		st, err := migrations.Status(ctx, pool, schema)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "VERSION\tFILE\tAPPLIED")
		for _, s := range st {
			at := "pending"
			if s.Applied {
				at = s.AppliedAt.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\n", s.Version, s.Name, at)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		_, err = fmt.Fprintf(out, "schema %s: version %d of %d\n", schemaName(schema), migrations.Version(st), len(st))
		return err
	})
}

func schemaName(s string) string {
	if s == "" {
		return "(default search_path)"
	}
	return s
}
