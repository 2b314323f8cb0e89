package migrations

import (
	"context"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pressly/goose/v3"
)

// State is one migration's state in a schema (Status).
type State struct {
	// Version is the migration's number, from its file name.
	Version int64
	// Name is the file name, e.g. "00001_agent_leases.sql".
	Name string
	// Applied reports whether the schema has it; AppliedAt is when it
	// was applied (database clock), zero when pending.
	Applied   bool
	AppliedAt time.Time
}

// SchemaOf returns the schema a pool's connections use: the first entry of
// the search_path run-time parameter (DATABASE_URL's ?search_path=…), ""
// when none is set (the server's default search_path). It is the schema the
// gateway applies its migrations to at start.
func SchemaOf(pool *pgxpool.Pool) string {
	s, _, _ := strings.Cut(pool.Config().ConnConfig.RuntimeParams["search_path"], ",")
	return strings.Trim(strings.TrimSpace(s), `"`)
}

// Status lists every embedded migration, oldest first, with whether schema
// has it. It changes nothing: a schema that does not exist, or has no
// goose version table, reports every migration pending.
func Status(ctx context.Context, pool *pgxpool.Pool, schema string) ([]State, error) {
	exists, err := versioned(ctx, pool, schema)
	if err != nil {
		return nil, fmt.Errorf("migrations: status of schema %q: %w", schema, err)
	}
	if !exists {
		return pending()
	}
	var out []State
	err = run(ctx, pool, schema, func(ctx context.Context, p *goose.Provider) error {
		st, err := p.Status(ctx)
		if err != nil {
			return err
		}
		for _, s := range st {
			out = append(out, State{Version: s.Source.Version, Name: baseName(s.Source.Path),
				Applied: s.State == goose.StateApplied, AppliedAt: s.AppliedAt})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("migrations: status of schema %q: %w", schema, err)
	}
	return out, nil
}

// versioned reports whether schema has goose's version table.
func versioned(ctx context.Context, pool *pgxpool.Pool, schema string) (bool, error) {
	table := "goose_db_version"
	if schema != "" {
		table = pgx.Identifier{schema, table}.Sanitize()
	}
	var exists bool
	err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists)
	return exists, err
}

// pending lists the embedded migrations, all pending.
func pending() ([]State, error) {
	names, err := fs.Glob(files, "*.sql")
	if err != nil {
		return nil, err
	}
	out := make([]State, 0, len(names))
	for _, n := range names {
		num, _, _ := strings.Cut(n, "_")
		v, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("migrations: file %q has no version number: %w", n, err)
		}
		out = append(out, State{Version: v, Name: n})
	}
	return out, nil
}

func baseName(path string) string {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		return path[i+1:]
	}
	return path
}

// Version returns the newest applied version of the states (0: none).
func Version(states []State) int64 {
	var v int64
	for _, s := range states {
		if s.Applied && s.Version > v {
			v = s.Version
		}
	}
	return v
}

// RollBack rolls schema back, under the same advisory lock as Apply: with
// to < 0 the newest applied migration only, else every applied migration
// above version to (0: all of them; goose's version table stays). It
// returns the versions rolled back, newest first (none when nothing was
// applied above to).
func RollBack(ctx context.Context, pool *pgxpool.Pool, schema string, to int64) ([]int64, error) {
	var done []int64
	if exists, err := versioned(ctx, pool, schema); err != nil || !exists {
		if err != nil {
			return nil, fmt.Errorf("migrations: roll back schema %q: %w", schema, err)
		}
		return nil, nil
	}
	err := run(ctx, pool, schema, func(ctx context.Context, p *goose.Provider) error {
		cur, err := p.GetDBVersion(ctx)
		if err != nil || cur == 0 {
			return err
		}
		if to < 0 {
			r, err := p.Down(ctx)
			if r != nil && r.Error == nil && r.Source != nil {
				done = append(done, r.Source.Version)
			}
			return err
		}
		rs, err := p.DownTo(ctx, to)
		for _, r := range rs {
			if r.Error == nil && r.Source != nil {
				done = append(done, r.Source.Version)
			}
		}
		return err
	})
	if err != nil {
		return done, fmt.Errorf("migrations: roll back schema %q: %w", schema, err)
	}
	return done, nil
}
