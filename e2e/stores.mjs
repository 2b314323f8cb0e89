// Real-service settings for gateways that use durable stores: each call gets a fresh
// Postgres schema (the gateway's migrations create it) and a fresh CLUSTER name, which
// prefixes the gateway's Redis keys and NATS subjects. dropSchemas() removes the
// schemas afterwards (best effort, with psql); Redis keys expire by REPLAY_TTL.
import { execFileSync } from "node:child_process";
import { uniqueId } from "./gateway.mjs";

export const PG = process.env.E2E_POSTGRES || "postgres://postgres@127.0.0.1:5432/test";
export const REDIS = process.env.E2E_REDIS || "redis://127.0.0.1:6379/0";
export const NATS = process.env.E2E_NATS || "nats://127.0.0.1:4222";

const schemas = [];

/**
 * Env for gateways sharing one fresh schema, Redis prefix and (with nats) NATS prefix.
 * @param {{nats?: boolean} & Record<string, string>} [opts] extra env entries
 */
export function storeEnv({ nats = false, ...extra } = {}) {
  const schema = uniqueId("e2e_");
  schemas.push(schema);
  return {
    DATABASE_URL: `${PG}?sslmode=disable&search_path=${schema}`,
    REDIS_URL: REDIS,
    ...(nats ? { NATS_URL: NATS } : {}),
    CLUSTER: uniqueId("e2e-"),
    REPLAY_TTL: "10m",
    ...extra,
  };
}

/** Drops every schema storeEnv handed out; failures leave a schema behind. */
export function dropSchemas() {
  for (const s of schemas.splice(0)) {
    try {
      execFileSync("psql", [PG, "-qAtc", `DROP SCHEMA IF EXISTS "${s}" CASCADE`], { stdio: "ignore" });
    } catch {
      // psql missing or the database gone
    }
  }
}
