-- Session ownership: one row per session key (docs/OWNERSHIP.md "Storage").
-- owner_node is "node/incarnation"; every expiry is decided on the database
-- clock (now()) inside the claim statement.

-- +goose Up
CREATE TABLE agent_leases (
    agent_key  text        PRIMARY KEY,
    owner_node text        NOT NULL,
    epoch      bigint      NOT NULL,
    expires_at timestamptz NOT NULL
);

-- +goose Down
DROP TABLE agent_leases;
