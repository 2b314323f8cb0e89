package session_test

import (
	"testing"
	"time"

	"github.com/relaygw/relay/session"
	"github.com/relaygw/relay/session/storetest"
)

func TestMemorySessionStore(t *testing.T) {
	storetest.SessionStoreSuite(t, func(*testing.T) storetest.SessionFixture {
		clk := session.NewManualClock(time.Unix(1_700_000_000, 0))
		return storetest.SessionFixture{
			Store: session.NewMemorySessionStore(session.WithMemoryClock(clk.Now)),
			Age:   func(_ *testing.T, _ string, d time.Duration) { clk.Advance(d) },
		}
	})
}
