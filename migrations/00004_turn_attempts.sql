-- Attempts of an inbox entry's turn (docs/OWNERSHIP.md "Turn journal and
-- resume"): SessionStore.StartTurn raises it, fenced, before an attempt's
-- first event, so a new owner counts a turn's attempts even when the replay
-- log lost them, and gives the turn up after MAX_TURN_ATTEMPTS.

-- +goose Up
ALTER TABLE session_inbox ADD COLUMN attempts integer NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE session_inbox DROP COLUMN attempts;
