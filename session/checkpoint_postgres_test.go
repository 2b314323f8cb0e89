package session_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/relaygw/relay/internal/testenv"
	"github.com/relaygw/relay/session"
	"github.com/relaygw/relay/session/storetest"
)

func TestPostgresCheckpointStore(t *testing.T) {
	storetest.CheckpointStoreSuite(t, func(t *testing.T) session.CheckpointStore {
		return session.NewPostgresCheckpointStore(testenv.Postgres(t))
	})
}

func BenchmarkPostgresCheckpointSave(b *testing.B) {
	s := session.NewPostgresCheckpointStore(testenv.Postgres(b))
	ctx := context.Background()
	// About 1 KiB: a short conversation.
	doc := fmt.Appendf(nil, `{"seq":42,"history":[{"role":"user","content":%q},{"role":"assistant","content":%q}]}`,
		strings.Repeat("question ", 50), strings.Repeat("answer ", 70))
	b.SetBytes(int64(len(doc)))
	for b.Loop() {
		if err := s.Save(ctx, "k", 1, doc); err != nil {
			b.Fatal(err)
		}
	}
}
