package session

import (
	"testing"
	"time"
)

// Retry directives are jittered: refusals issued together carry distinct
// delays, each within [base, base+RetryJitter), with the budget after it.
func TestRetryDirectiveJittered(t *testing.T) {
	seen := map[time.Duration]bool{}
	const n = 50
	for i := 0; i < n; i++ {
		for _, tc := range []struct{ remaining, base time.Duration }{{0, minRetryDelay}, {2 * time.Second, 2*time.Second + retrySlack}} {
			r := NewRetryDirective(tc.remaining, 15*time.Second)
			if r.After < tc.base || r.After >= tc.base+RetryJitter || r.Budget != r.After+16*time.Second {
				t.Fatalf("NewRetryDirective(%v) = %+v, want After in [%v, %v) and Budget After+16s", tc.remaining, r, tc.base, tc.base+RetryJitter)
			}
			if tc.remaining == 0 {
				seen[r.After.Truncate(time.Millisecond)] = true
			}
		}
	}
	// 50 draws over 1,000 millisecond values: a handful of equal pairs at
	// most (the chance of more than 10 is below 1e-9).
	if len(seen) < n-10 {
		t.Fatalf("%d distinct after_ms values among %d directives", len(seen), n)
	}
}
