// Package proctest runs real gateway processes for tests that kill, pause,
// drain and restart them: it builds cmd/gateway, starts nodes on free
// loopback ports with a shared cluster environment, waits for readiness
// (GET /readyz), sends SIGKILL/SIGSTOP/SIGCONT/SIGTERM, captures every log
// line (printed through t.Log when the test fails) and makes sure no
// process outlives its test: cleanup resumes and kills whatever still runs,
// and on Linux a child also gets SIGKILL when the test binary dies.
//
// It also carries an HTTP client for the event API that can follow retry
// directives (Client.Deliver). The Phoenix socket client is
// internal/testkit/phxtest.
package proctest
