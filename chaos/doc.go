// Package chaos proves the cluster write path with real gateway processes
// on the real services: owners are killed (SIGKILL), paused past their
// lease (SIGSTOP/SIGCONT), drained (SIGTERM, POST /admin/drain) and
// restarted one by one under load, and every event a client posts must be
// accepted exactly once when the client follows the retry directives
// (docs/OWNERSHIP.md "Event (write)", "Takeover", "Drain",
// "Takeover and recovery").
//
// The package holds only tests and benchmarks. `go test ./chaos/` builds
// bin/gateway itself (with -race when the tests run with -race) into a
// temporary directory; Postgres, Redis and NATS must be running (see
// internal/testenv).
package chaos
