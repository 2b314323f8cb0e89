-- Session checkpoints, fenced by epoch: a write lands only when the stored
-- epoch is not ahead of the writer's (docs/OWNERSHIP.md "The fence").

-- +goose Up
CREATE TABLE agent_checkpoints (
    key        text        PRIMARY KEY,
    epoch      bigint      NOT NULL,
    data       jsonb       NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE agent_checkpoints;
