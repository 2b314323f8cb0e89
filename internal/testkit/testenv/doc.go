// Package testenv gives tests real, isolated services: a fresh Postgres
// schema with the migrations applied, a Redis key prefix, and a TCP proxy
// that can cut a service off without stopping the shared server.
//
// Services are found through TEST_DATABASE_URL (default
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable) and
// TEST_REDIS_URL (default redis://127.0.0.1:6379/0). A service that cannot
// be reached fails the test with a message naming the address and the
// variable; it never skips, except under -short: go test -short is the
// services-free tier, where every helper that needs a service skips its
// test (see SkipIfShort). Everything a helper creates is removed in
// t.Cleanup.
package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"unicode"
)

// SkipIfShort skips t under go test -short, the tier that runs without
// Postgres, Redis or NATS: "testenv: needs <service> (skipped under
// -short; run without -short with the services up, see make services)".
// Every helper here that reaches a service calls it first; a test that
// needs a service without going through a helper (a gateway process given
// a service URL) calls it itself.
func SkipIfShort(t testing.TB, service string) {
	t.Helper()
	if testing.Short() {
		t.Skip(skipMessage(service))
	}
}

func skipMessage(service string) string {
	return "testenv: needs " + service + " (skipped under -short; run without -short with the services up, see make services)"
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// uniqueName returns "<prefix><random hex>_<test name>", lower case, limited
// to [a-z0-9_] and to 63 bytes (a Postgres identifier).
func uniqueName(prefix, testName string) string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	var s strings.Builder
	s.WriteString(prefix)
	s.WriteString(hex.EncodeToString(b[:]))
	s.WriteByte('_')
	for _, r := range strings.ToLower(testName) {
		if s.Len() >= 63 {
			break
		}
		if r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r)) {
			s.WriteRune(r)
		} else {
			s.WriteByte('_')
		}
	}
	return s.String()
}
