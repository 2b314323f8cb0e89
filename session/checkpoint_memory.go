package session

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
)

// MemoryCheckpointStore is a CheckpointStore kept in process memory, for the
// embedded single-node mode and for tests. Its fence is the Postgres store's:
// a save lands only if the stored epoch is not ahead of the writer's. Data is
// copied in and out, so callers may reuse their buffers. Safe for concurrent
// use.
type MemoryCheckpointStore struct {
	opts memoryOptions
	mu   sync.Mutex
	rows map[string]Checkpoint
}

var _ CheckpointStore = (*MemoryCheckpointStore)(nil)

// NewMemoryCheckpointStore returns an empty in-memory checkpoint store.
// UpdatedAt is read from the store's clock (WithMemoryClock).
func NewMemoryCheckpointStore(opts ...MemoryOption) *MemoryCheckpointStore {
	return &MemoryCheckpointStore{opts: newMemoryOptions(opts), rows: make(map[string]Checkpoint)}
}

// Load implements CheckpointStore.
func (s *MemoryCheckpointStore) Load(ctx context.Context, key string) (Checkpoint, bool, error) {
	if err := ctx.Err(); err != nil {
		return Checkpoint{}, false, fmt.Errorf("session: load checkpoint %q: %w", key, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.rows[key]
	if !ok {
		return Checkpoint{}, false, nil
	}
	c.Data = append([]byte(nil), c.Data...)
	return c, true, nil
}

// Save implements CheckpointStore. data must be a JSON document (as the
// Postgres store's jsonb column demands). A save whose epoch is below the
// stored one changes nothing and returns an error wrapping ErrFenced.
func (s *MemoryCheckpointStore) Save(ctx context.Context, key string, epoch int64, data []byte) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("session: save checkpoint %q: %w", key, err)
	}
	if !json.Valid(data) {
		return fmt.Errorf("session: save checkpoint %q: data is not a JSON document", key)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.rows[key]; ok && c.Epoch > epoch {
		return fmt.Errorf("session: save checkpoint %q epoch %d (stored %d): %w", key, epoch, c.Epoch, ErrFenced)
	}
	s.rows[key] = Checkpoint{Epoch: epoch, Data: append([]byte(nil), data...), UpdatedAt: s.opts.now()}
	return nil
}
