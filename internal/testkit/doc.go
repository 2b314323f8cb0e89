// Package testkit holds no code; its subdirectories are the test kits:
// proctest (real gateway processes), phxtest (a Phoenix socket client) and
// testenv (isolated Postgres, Redis and NATS for one test).
//
// The rule for the kits: a package under internal/testkit is imported only
// by _test.go files and by other kits, never by production code. And a
// package's own tests import only packages below it, never one that
// imports it. Two kinds of package are exempt from the second rule: the kits,
// which may import anything, and a package's own subpackages, which
// implement its interfaces (session/pgstore for session, muster/memnet for
// muster) and serve its tests.
// TestKitsAreImportedOnlyByTests and TestTestsImportDownward check both
// with go list.
package testkit
