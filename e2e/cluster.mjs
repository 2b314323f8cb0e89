// Several bin/gateway processes in cluster mode for end-to-end tests.
//
// startCluster(n) starts n gateways that share one fresh Postgres schema, the Redis
// server, the NATS server and one unique CLUSTER name (so their Redis keys and NATS
// subjects are their own), with one JWT secret, API key and admin token, and fast
// Muster and lease timings. waitClusterReady(gws) resolves once every node reports
// (GET /admin/node) a ready Muster view of exactly those nodes with one view hash.
import { randomBytes } from "node:crypto";
import { startGateway, uniqueId } from "./gateway.mjs";
import { storeEnv } from "./stores.mjs";

/** Fast timings: peers are noticed within a second, leases lapse in a few seconds. */
export const FAST_CLUSTER = Object.freeze({
  MUSTER_HEARTBEAT: "300ms",
  MUSTER_PING: "100ms",
  MUSTER_PEER_DOWN: "2s",
  LEASE_TTL: "6s",
  LEASE_RENEW: "2s",
  CENSUS_INTERVAL: "200ms",
});

const READY_WAIT_MS = 20_000;

/**
 * Starts n cluster-mode gateways named <prefix>a, <prefix>b, … on shared stores.
 * Extra env entries override the defaults; perNode[i], when given, overrides them for
 * node i only (e.g. its NATS_URL through a proxy). Schemas are dropped by
 * stores.dropSchemas().
 * @param {number} n
 * @param {Record<string, string>} [env]
 * @param {Record<string, string>[]} [perNode]
 * @returns {Promise<import("./gateway.mjs").Gateway[]>}
 */
export async function startCluster(n, env = {}, perNode = []) {
  const shared = {
    ...storeEnv({ nats: true }),
    ...FAST_CLUSTER,
    JWT_SECRET: randomBytes(32).toString("hex"),
    API_KEYS: `key-${randomBytes(12).toString("hex")}`,
    ADMIN_TOKEN: `admin-${randomBytes(12).toString("hex")}`,
    ...env,
  };
  const prefix = uniqueId("n") + "-";
  const names = Array.from({ length: n }, (_, i) => prefix + String.fromCharCode(97 + i));
  const started = await Promise.allSettled(names.map((name, i) => startGateway({ ...shared, ...(perNode[i] || {}), NODE_NAME: name })));
  const gws = started.filter((s) => s.status === "fulfilled").map((s) => s.value);
  const failed = started.find((s) => s.status === "rejected");
  if (failed) {
    await Promise.all(gws.map((gw) => gw.stop()));
    throw failed.reason;
  }
  return gws;
}

/** GET /admin/node of gw (with its admin token). */
export async function nodeInfo(gw) {
  const res = await gw.request("/admin/node", { headers: { Authorization: `Bearer ${gw.adminToken}` } });
  if (res.status !== 200) throw new Error(`${gw.nodeName}: /admin/node answered ${res.status} ${JSON.stringify(res.body)}`);
  return res.body;
}

/**
 * Resolves once every gateway in gws reports a ready Muster view whose members are
 * exactly the gateways' node names, all with one view hash. No signal crosses the
 * process boundary, so this polls with a deadline.
 * @param {import("./gateway.mjs").Gateway[]} gws
 */
export async function waitClusterReady(gws, ms = READY_WAIT_MS) {
  const want = gws.map((gw) => gw.nodeName).sort().join(",");
  const deadline = Date.now() + ms;
  for (;;) {
    const infos = await Promise.all(gws.map(nodeInfo));
    const ok = infos.every(
      (i) => i.cluster && i.cluster.status === "ready" && i.cluster.members.join(",") === want && i.cluster.view_hash === infos[0].cluster.view_hash,
    );
    if (ok) return infos;
    if (Date.now() > deadline) {
      throw new Error(`cluster not ready within ${ms} ms (want members ${want}):\n${JSON.stringify(infos.map((i) => ({ name: i.name, ...i.cluster })), null, 1)}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}
