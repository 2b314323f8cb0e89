package testenv

import (
	"strings"
	"testing"
)

// Under -short every service helper skips its test before it dials, with a
// message naming the service; without -short the helpers run (the other
// tests of this package use them).
func TestHelpersSkipUnderShort(t *testing.T) {
	if !testing.Short() {
		t.Skip("checks the -short tier; run with go test -short")
	}
	helpers := map[string]func(t *testing.T){
		"Postgres":       func(t *testing.T) { Postgres(t) },
		"PostgresSchema": func(t *testing.T) { PostgresSchema(t) },
		"PostgresURL":    func(t *testing.T) { PostgresURL(t) },
		"Redis":          func(t *testing.T) { Redis(t) },
		"NATS":           func(t *testing.T) { NATS(t) },
	}
	for name, helper := range helpers {
		t.Run(name, func(t *testing.T) {
			var skipped bool
			var msg string
			t.Run("inner", func(t *testing.T) {
				defer func() { skipped = t.Skipped() }()
				helper(t)
				msg = "the helper returned"
			})
			if !skipped || msg != "" {
				t.Fatalf("%s did not skip under -short (%s)", name, msg)
			}
		})
	}
	if !strings.Contains(skipMessage("Redis"), "needs Redis (skipped under -short") {
		t.Fatalf("skip message %q", skipMessage("Redis"))
	}
}
