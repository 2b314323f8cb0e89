package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/relaygw/relay/internal/testkit/testenv"
	"github.com/relaygw/relay/session/pgstore"
	"github.com/relaygw/relay/session/storetest"
)

func TestPostgresSessionStore(t *testing.T) {
	storetest.SessionStoreSuite(t, func(t *testing.T) storetest.SessionFixture {
		pool := testenv.Postgres(t)
		return storetest.SessionFixture{
			Store: pgstore.NewSessionStore(pool),
			Age: func(t *testing.T, key string, d time.Duration) {
				t.Helper()
				if _, err := pool.Exec(context.Background(), "UPDATE session_keys SET accepted_at = accepted_at - $2::interval WHERE key = $1", key, d); err != nil {
					t.Fatalf("age keys of %s by %v: %v", key, d, err)
				}
			},
		}
	})
}
