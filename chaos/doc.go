// Package chaos proves the cluster write path with real gateway processes
// on the real services: owners are killed (SIGKILL), paused past their
// lease (SIGSTOP/SIGCONT), drained (SIGTERM, POST /admin/drain) and
// restarted one by one under load, and every event a client posts must be
// accepted exactly once when the client follows the retry directives
// (docs/OWNERSHIP.md "Event (write)", "Takeover", "Drain",
// "Takeover and recovery").
//
// TestAcceptedEventChecker is the accepted-event checker: writers that
// follow the answers, observers on every node and a seeded fault schedule
// (kill -9, SIGSTOP past the lease TTL, SIGTERM drain, NATS and Postgres
// cuts of one node through its TCP proxies) over a 3-node cluster, then
// four properties checked on the quiet cluster (README "Quickstart",
// `make chaos`). Its pieces are small: schedule (schedule_test.go), writer
// (writer_test.go), observer (observer_test.go) and the checker
// (verify_test.go), whose judgement is tested on hand-made runs.
//
// The package holds only tests and benchmarks. `go test ./chaos/` builds
// bin/gateway itself (with -race when the tests run with -race) into a
// temporary directory; Postgres, Redis and NATS must be running (see
// internal/testkit/testenv).
package chaos
