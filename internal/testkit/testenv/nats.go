package testenv

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// DefaultNATSURL is used when TEST_NATS_URL is unset.
const DefaultNATSURL = "nats://127.0.0.1:4222"

// NATSURL returns TEST_NATS_URL or DefaultNATSURL.
func NATSURL() string { return env("TEST_NATS_URL", DefaultNATSURL) }

// NATS returns a connection to the test NATS server and a subject prefix
// unique to this test ("t<random hex>_<name>", one subject token of
// [a-z0-9_]). The connection is closed when the test ends. A server that
// cannot be reached fails the test.
func NATS(t testing.TB) (*nats.Conn, string) {
	t.Helper()
	return NATSConn(t), NATSPrefix(t)
}

// NATSConn returns a further connection to the test NATS server, closed
// when the test ends. Use one per simulated node.
func NATSConn(t testing.TB, opts ...nats.Option) *nats.Conn {
	t.Helper()
	SkipIfShort(t, "NATS")
	opts = append([]nats.Option{nats.Name(t.Name()), nats.Timeout(5 * time.Second)}, opts...)
	nc, err := nats.Connect(NATSURL(), opts...)
	if err != nil {
		t.Fatalf("testenv: NATS at %s is not reachable: %v (start it or set TEST_NATS_URL)", NATSURL(), err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// NATSPrefix returns a subject prefix unique to this test.
func NATSPrefix(t testing.TB) string { return uniqueName("t", t.Name()) }
