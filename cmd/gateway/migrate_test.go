package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/alecthomas/kong"
	"github.com/relaygw/relay/gateway"
	"github.com/relaygw/relay/internal/testkit/testenv"
	"github.com/relaygw/relay/migrations"
)

// runCLI parses args as the gateway's command line and runs the command,
// returning what it printed.
func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	c := cli{Serve: serveCmd{Config: gateway.DefaultConfig()}}
	p, err := kong.New(&c, kong.Name("gateway"), kong.Vars{"version": "test"}, kong.BindTo(&out, (*io.Writer)(nil)),
		kong.Exit(func(int) { t.Fatalf("gateway %v exited", args) }))
	if err != nil {
		t.Fatal(err)
	}
	kctx, err := p.Parse(args)
	if err != nil {
		return "", err
	}
	err = kctx.Run()
	return out.String(), err
}

// `gateway migrate status|up|down` on an isolated schema named by
// DATABASE_URL's search_path: status of a fresh schema changes nothing, up
// applies (all or up to --to), down rolls back one or down to --to, and up
// after a full roll-back restores every table.
func TestMigrateUpDownStatus(t *testing.T) {
	pool, schema := testenv.PostgresSchema(t)
	u, err := url.Parse(testenv.DatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	dsn := u.String()
	ctx := context.Background()
	all, err := migrations.Status(ctx, pool, schema)
	if err != nil {
		t.Fatal(err)
	}
	n := len(all)
	if n < 2 || migrations.Version(all) != 0 {
		t.Fatalf("fresh schema: %d migrations at version %d", n, migrations.Version(all))
	}
	schemaExists := func() bool {
		var ok bool
		if err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", schema).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	tables := func() int {
		var k int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM information_schema.tables WHERE table_schema = $1 AND table_name <> 'goose_db_version'", schema).Scan(&k); err != nil {
			t.Fatal(err)
		}
		return k
	}
	mustRun := func(want string, args ...string) string {
		t.Helper()
		out, err := runCLI(t, append(args, "--database-url", dsn)...)
		if err != nil {
			t.Fatalf("gateway %v: %v\n%s", args, err, out)
		}
		if !strings.Contains(out, want) {
			t.Fatalf("gateway %v printed %q, want %q", args, out, want)
		}
		return out
	}

	out := mustRun(fmt.Sprintf("schema %s: version 0 of %d", schema, n), "migrate", "status")
	if got := len(regexp.MustCompile(`(?m)^\d+ +\S+\.sql +pending$`).FindAllString(out, -1)); got != n {
		t.Fatalf("status of a fresh schema lists %d pending of %d:\n%s", got, n, out)
	}
	if schemaExists() {
		t.Fatal("status created the schema")
	}

	mustRun(fmt.Sprintf("schema %s: version %d (was 0)", schema, all[1].Version), "migrate", "up", "--to", fmt.Sprint(all[1].Version))
	out = mustRun(fmt.Sprintf("version %d of %d", all[1].Version, n), "migrate", "status")
	if got := len(regexp.MustCompile(`(?m) pending$`).FindAllString(out, -1)); got != n-2 {
		t.Fatalf("after up --to: %d pending, want %d:\n%s", got, n-2, out)
	}

	newest := all[n-1].Version
	mustRun(fmt.Sprintf("version %d (was %d)", newest, all[1].Version), "migrate", "up")
	full := tables()
	mustRun(fmt.Sprintf("version %d (was %d)", newest, newest), "migrate", "up") // nothing left to do

	mustRun(fmt.Sprintf("rolled back %d\nschema %s: version %d", newest, schema, all[n-2].Version), "migrate", "down")
	out = mustRun("schema "+schema+": version 0", "migrate", "down", "--to", "0")
	if got := strings.Count(out, "rolled back "); got != n-1 {
		t.Fatalf("down --to 0 rolled back %d, want %d:\n%s", got, n-1, out)
	}
	if k := tables(); k != 0 {
		t.Fatalf("%d tables left after down --to 0", k)
	}
	mustRun("schema "+schema+": version 0", "migrate", "down") // nothing to roll back

	mustRun(fmt.Sprintf("version %d (was 0)", newest), "migrate", "up")
	if k := tables(); k != full || full == 0 {
		t.Fatalf("up after a full roll-back made %d tables, want %d", k, full)
	}
}

// Bad settings are refused with an error naming them, and change nothing.
func TestMigrateRefusesBadSettings(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"migrate", "status"}, "DATABASE_URL (or --database-url) is required"},
		{[]string{"migrate", "up", "--database-url", "postgres://127.0.0.1:1/x", "--to=-3"}, "--to -3 must be a version"},
		{[]string{"migrate", "down", "--database-url", "postgres://127.0.0.1:1/x", "--to=-2"}, "--to -2 must be a version"},
		{[]string{"migrate", "up", "--database-url", "::not a url"}, "DATABASE_URL"},
		{[]string{"migrate", "sideways"}, "unexpected argument sideways"},
	} {
		_, err := runCLI(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("gateway %v: %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}
