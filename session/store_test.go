package session_test

import (
	"context"
	"testing"
	"time"

	"github.com/relaygw/relay/internal/testenv"
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

func TestPostgresSessionStore(t *testing.T) {
	storetest.SessionStoreSuite(t, func(t *testing.T) storetest.SessionFixture {
		pool := testenv.Postgres(t)
		return storetest.SessionFixture{
			Store: session.NewPostgresSessionStore(pool),
			Age: func(t *testing.T, key string, d time.Duration) {
				t.Helper()
				if _, err := pool.Exec(context.Background(), "UPDATE session_keys SET accepted_at = accepted_at - $2::interval WHERE key = $1", key, d); err != nil {
					t.Fatalf("age keys of %s by %v: %v", key, d, err)
				}
			},
		}
	})
}
