-- The session store (docs/OWNERSHIP.md "Durable inbox and history"): a fence
-- row per session, the inbox of accepted inputs whose turn has not completed,
-- append-only history and the idempotency keys within their retention. Every
-- write is one statement that first raises session_state.epoch only if the
-- stored epoch is not ahead of the writer's; a fenced write changes nothing.
-- Inputs and message contents are stored as bytes (an input's type and its
-- data's JSON, never parsed by the store; content: UTF-8 text), so any
-- accepted input is storable and loadable whatever jsonb, text or a JSON
-- decoder would refuse.
--
-- Existing agent_checkpoints documents are carried over; the table itself is
-- left in place (no longer written) so a rollback keeps it.

-- +goose Up
CREATE TABLE session_state (
    key        text        PRIMARY KEY,
    epoch      bigint      NOT NULL,
    seq        bigint      NOT NULL DEFAULT 0,
    history_n  bigint      NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE session_inbox (
    key         text        NOT NULL,
    epoch       bigint      NOT NULL,
    seq         bigint      NOT NULL,
    idem_key    text        NOT NULL DEFAULT '',
    body_hash   bytea       NOT NULL,
    input_type  bytea       NOT NULL,
    input_data  bytea       NOT NULL,
    accepted_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (key, epoch, seq)
);

CREATE TABLE session_history (
    key        text   NOT NULL,
    n          bigint NOT NULL,
    turn_epoch bigint NOT NULL,
    turn_seq   bigint NOT NULL,
    role       text   NOT NULL,
    content    bytea  NOT NULL,
    PRIMARY KEY (key, n)
);

CREATE TABLE session_keys (
    key         text        NOT NULL,
    idem_key    text        NOT NULL,
    epoch       bigint      NOT NULL,
    seq         bigint      NOT NULL,
    body_hash   bytea       NOT NULL,
    accepted_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (key, idem_key)
);
CREATE INDEX session_keys_by_age ON session_keys (key, accepted_at);

INSERT INTO session_state (key, epoch, seq, history_n, updated_at)
SELECT key, epoch, COALESCE((data->>'seq')::bigint, 0),
       CASE WHEN jsonb_typeof(data->'history') = 'array' THEN jsonb_array_length(data->'history') ELSE 0 END,
       updated_at
FROM agent_checkpoints;

INSERT INTO session_history (key, n, turn_epoch, turn_seq, role, content)
SELECT c.key, h.n, 0, 0, COALESCE(h.m->>'role', ''), convert_to(COALESCE(h.m->>'content', ''), 'UTF8')
FROM agent_checkpoints c, jsonb_array_elements(c.data->'history') WITH ORDINALITY AS h(m, n)
WHERE jsonb_typeof(c.data->'history') = 'array';

-- An empty body_hash is unknown: a re-sent key is answered as a duplicate.
INSERT INTO session_inbox (key, epoch, seq, idem_key, body_hash, input_type, input_data, accepted_at)
SELECT c.key, (p.v->>'epoch')::bigint, (p.v->>'seq')::bigint, COALESCE(p.v->'input'->>'idempotency_key', ''),
       '', convert_to(COALESCE(p.v->'input'->>'type', ''), 'UTF8'),
       convert_to(COALESCE(p.v->'input'->'data', 'null'::jsonb)::text, 'UTF8'), c.updated_at
FROM agent_checkpoints c, jsonb_array_elements(c.data->'pending') AS p(v)
WHERE jsonb_typeof(c.data->'pending') = 'array';

INSERT INTO session_keys (key, idem_key, epoch, seq, body_hash, accepted_at)
SELECT c.key, k.v->>'key', (k.v->>'epoch')::bigint, (k.v->>'seq')::bigint, '', c.updated_at
FROM agent_checkpoints c, jsonb_array_elements(c.data->'keys') AS k(v)
WHERE jsonb_typeof(c.data->'keys') = 'array'
ON CONFLICT DO NOTHING;

-- +goose Down
DROP TABLE session_keys;
DROP TABLE session_history;
DROP TABLE session_inbox;
DROP TABLE session_state;
