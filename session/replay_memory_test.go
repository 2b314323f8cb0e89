package session_test

import (
	"testing"
	"time"

	"github.com/relaygw/relay/session"
	"github.com/relaygw/relay/session/storetest"
)

func TestMemoryReplayLog(t *testing.T) {
	storetest.ReplayLogSuite(t, func(_ *testing.T, maxLen int64, ttl time.Duration) storetest.ReplayFixture {
		clock := session.NewManualClock(time.Unix(1000, 0))
		return storetest.ReplayFixture{
			Log:     session.NewMemoryReplayLog(int(maxLen), ttl, session.WithMemoryClock(clock.Now)),
			Advance: func(_ *testing.T, d time.Duration) { clock.Advance(d) },
		}
	})
}
