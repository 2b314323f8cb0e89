package session_test

import (
	"testing"
	"time"

	"github.com/relaygw/relay/session"
	"github.com/relaygw/relay/session/storetest"
)

func TestMemoryLeaseStore(t *testing.T) {
	storetest.LeaseStoreSuite(t, func(t *testing.T) storetest.LeaseFixture {
		clock := session.NewManualClock(time.Unix(1000, 0))
		return storetest.LeaseFixture{
			Store:   session.NewMemoryLeaseStore(session.WithMemoryClock(clock.Now)),
			Advance: func(_ *testing.T, d time.Duration) { clock.Advance(d) },
		}
	})
}
