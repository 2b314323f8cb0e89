package chaos

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/relaygw/relay/internal/testkit/proctest"
)

// BenchmarkForwardedVsLocal measures one event POST, answered at
// acceptance, on two real gateway processes: "local" posts to the node
// that owns the session, "forwarded" posts to the other node, which
// forwards over NATS request/reply to the owner. It reports the latency
// percentiles p50 and p99 (µs) beside ns/op. Sessions rotate over 16 ids
// per sub-benchmark, all owned by the first node; events carry no idempotency key.
func BenchmarkForwardedVsLocal(b *testing.B) {
	c := proctest.NewCluster(b, gatewayBin, map[string]string{"ECHO_DELAY": "0s", "LEASE_TTL": "15s", "LEASE_RENEW": "5s", "LOG_LEVEL": "warn"})
	owner, other := c.Start("owner", nil), c.Start("other", nil)
	client := c.Client()
	const sessions = 16
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		node *proctest.Proc
	}{{"local", owner}, {"forwarded", other}} {
		b.Run(bc.name, func(b *testing.B) {
			// Fresh sessions per sub-benchmark, claimed by the owner, so
			// both start from the same history length.
			id := func(i int) string { return fmt.Sprintf("bench-%s-%02d", bc.name, i%sessions) }
			for i := range sessions {
				if r, err := client.PostEvent(ctx, owner.URL(), id(i), proctest.Event{Text: "warm"}); err != nil || r.Accepted == nil {
					b.Fatalf("claim %s on the owner: %v %v", id(i), r, err)
				}
			}
			lat := make([]time.Duration, 0, b.N)
			for i := 0; b.Loop(); i++ {
				start := time.Now()
				r, err := client.PostEvent(ctx, bc.node.URL(), id(i), proctest.Event{Text: "x"})
				lat = append(lat, time.Since(start))
				if err != nil || r.Accepted == nil {
					b.Fatalf("post: %v %v", r, err)
				}
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(percentile(lat, 50).Microseconds()), "p50-µs")
			b.ReportMetric(float64(percentile(lat, 99).Microseconds()), "p99-µs")
		})
	}
}

// percentile returns the p-th percentile of sorted durations.
func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, len(sorted)*p/100)]
}
