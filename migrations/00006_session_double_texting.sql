-- A session's double-texting mode (docs/OWNERSHIP.md "Turn control"): what an
-- event without its own "multitask" does while a turn runs. Set once, by the
-- session's first event when that event names a mode; '' means the gateway's
-- DOUBLE_TEXTING.

-- +goose Up
ALTER TABLE session_state ADD COLUMN double_texting text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE session_state DROP COLUMN double_texting;
