package session_test

import (
	"testing"

	"github.com/relaygw/relay/session"
	"github.com/relaygw/relay/session/storetest"
)

func TestMemoryCheckpointStore(t *testing.T) {
	storetest.CheckpointStoreSuite(t, func(*testing.T) session.CheckpointStore {
		return session.NewMemoryCheckpointStore()
	})
}
