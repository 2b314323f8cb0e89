-- A stopped turn's reply (docs/OWNERSHIP.md "Turn control"): a client
-- stopped the turn mid-stream; the history keeps the partial reply, marked
-- stopped, so readers and the agent's context tell it from a whole reply.

-- +goose Up
ALTER TABLE session_history ADD COLUMN stopped boolean NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE session_history DROP COLUMN stopped;
