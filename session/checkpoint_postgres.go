package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PostgresCheckpointStore is the cluster CheckpointStore: one row per
// session in agent_checkpoints (migrations/00002), written by a conditional
// upsert that lands only if the stored epoch is not ahead of the writer's
// (the seed's "The fence"). Data is stored as jsonb, so Load returns the
// document normalised (whitespace, key order). Safe for concurrent use.
type PostgresCheckpointStore struct {
	pool *pgxpool.Pool
}

var _ CheckpointStore = (*PostgresCheckpointStore)(nil)

// NewPostgresCheckpointStore returns a checkpoint store on pool. The pool's
// connections must resolve agent_checkpoints (search_path).
func NewPostgresCheckpointStore(pool *pgxpool.Pool) *PostgresCheckpointStore {
	return &PostgresCheckpointStore{pool: pool}
}

// saveSQL: $1 key, $2 epoch, $3 data. A stale epoch updates zero rows.
const saveSQL = `
INSERT INTO agent_checkpoints AS c (key, epoch, data, updated_at)
VALUES ($1, $2, $3, now())
ON CONFLICT (key) DO UPDATE SET
    epoch      = EXCLUDED.epoch,
    data       = EXCLUDED.data,
    updated_at = EXCLUDED.updated_at
WHERE c.epoch <= EXCLUDED.epoch`

const loadSQL = `SELECT epoch, data, updated_at FROM agent_checkpoints WHERE key = $1`

// Load implements CheckpointStore.
func (s *PostgresCheckpointStore) Load(ctx context.Context, key string) (Checkpoint, bool, error) {
	var c Checkpoint
	err := s.pool.QueryRow(ctx, loadSQL, key).Scan(&c.Epoch, &c.Data, &c.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Checkpoint{}, false, nil
	}
	if err != nil {
		return Checkpoint{}, false, fmt.Errorf("session: load checkpoint %q: %w", key, err)
	}
	return c, true, nil
}

// Save implements CheckpointStore. data must be a JSON document.
func (s *PostgresCheckpointStore) Save(ctx context.Context, key string, epoch int64, data []byte) error {
	if !json.Valid(data) {
		return fmt.Errorf("session: save checkpoint %q: data is not a JSON document", key)
	}
	tag, err := s.pool.Exec(ctx, saveSQL, key, epoch, data)
	if err != nil {
		return fmt.Errorf("session: save checkpoint %q: %w", key, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("session: save checkpoint %q epoch %d: %w", key, epoch, ErrFenced)
	}
	return nil
}
