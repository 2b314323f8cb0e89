// Starts a real bin/gateway process for end-to-end tests and talks HTTP to it.
//
// startGateway(env) picks a free loopback port, runs the binary in its embedded
// (single-node, in-memory) mode with test settings, and resolves once the gateway logs
// {"msg":"listening","addr":…}. Every log line is kept (gw.logs) so a failing test can
// print them. stop() sends SIGTERM and, if the process has not exited after a grace
// period, SIGKILL.
//
// No gateway outlives the test process that started it: one that was not stopped is
// SIGKILLed when the process exits (a failed assertion, an uncaught error), and on Linux
// each runs under `setpriv --pdeathsig KILL` (util-linux), so the kernel kills it when the
// test process dies without running exit handlers (SIGKILL, the runner's timeout).
import { spawn, spawnSync } from "node:child_process";
import { createHmac, randomBytes } from "node:crypto";
import { once } from "node:events";
import { existsSync } from "node:fs";
import { createServer } from "node:net";
import { dirname, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");

/** The gateway binary: $GATEWAY_BIN, else bin/gateway at the repository root. */
export const GATEWAY_BIN = process.env.GATEWAY_BIN || resolve(ROOT, "bin/gateway");

const START_TIMEOUT_MS = 20_000;

/** The gateways started and not yet exited; SIGKILLed at process exit. */
const running = new Set();
process.on("exit", () => {
  for (const child of running) child.kill("SIGKILL");
});

/** [command, args prefix] that run a program so that it dies with this process (Linux). */
const DIE_WITH_PARENT =
  process.platform === "linux" && (spawnSync("setpriv", ["--help"], { encoding: "utf8" }).stdout || "").includes("--pdeathsig")
    ? ["setpriv", ["--pdeathsig", "KILL", "--"]]
    : null;

/**
 * Spawns program (no shell) as spawn does; on Linux under setpriv --pdeathsig KILL, which
 * execs it, so child.pid is the program's pid. The child is killed at this process's exit.
 */
export function spawnOwned(program, args, options) {
  const child = DIE_WITH_PARENT ? spawn(DIE_WITH_PARENT[0], [...DIE_WITH_PARENT[1], program, ...args], options) : spawn(program, args, options);
  running.add(child);
  child.once("exit", () => running.delete(child));
  return child;
}
const STOP_GRACE_MS = 5_000;

/** Resolves to a TCP port on 127.0.0.1 that was free a moment ago. */
export async function freePort() {
  const srv = createServer();
  srv.listen(0, "127.0.0.1");
  await once(srv, "listening");
  const { port } = srv.address();
  srv.close();
  await once(srv, "close");
  return port;
}

function b64url(buf) {
  return Buffer.from(buf).toString("base64url");
}

/**
 * Signs claims as an HS256 JWT. exp defaults to one hour from now (seconds).
 * @param {string} secret
 * @param {{sub?: string, sessions?: string[], exp?: number}} claims
 */
export function mintJWT(secret, claims) {
  const body = { exp: Math.floor(Date.now() / 1000) + 3600, ...claims };
  const head = b64url(JSON.stringify({ alg: "HS256", typ: "JWT" }));
  const payload = b64url(JSON.stringify(body));
  const sig = createHmac("sha256", secret).update(`${head}.${payload}`).digest("base64url");
  return `${head}.${payload}.${sig}`;
}

/** A random id safe for session ids and env values: prefix + 12 hex chars. */
export function uniqueId(prefix) {
  return `${prefix}${randomBytes(6).toString("hex")}`;
}

/**
 * A running gateway.
 * @typedef {object} Gateway
 * @property {string} addr    host:port it listens on
 * @property {string} httpURL "http://host:port"
 * @property {string} wsURL   "ws://host:port"
 * @property {string} secret  JWT_SECRET
 * @property {string} apiKey  one of API_KEYS
 * @property {string} adminToken ADMIN_TOKEN
 * @property {string} nodeName NODE_NAME
 * @property {object[]} logs  parsed JSON log lines (non-JSON lines as {raw})
 * @property {(claims?: object) => string} token mints a JWT (default sub "user-1", sessions ["*"])
 * @property {(path: string, init?: RequestInit) => Promise<{status: number, headers: Headers, body: any}>} request
 * @property {() => Promise<void>} stop
 */

/**
 * Starts bin/gateway with test settings; extra env entries override them.
 * DATABASE_URL, REDIS_URL and NATS_URL are removed unless given in env, so the gateway
 * runs its embedded mode.
 * @param {Record<string, string>} [env]
 * @returns {Promise<Gateway>}
 */
/** Polls url/readyz until it answers 200, failing after ms with the node's logs. */
async function waitReady(url, ms, logs) {
  const deadline = Date.now() + ms;
  for (;;) {
    const res = await fetch(url + "/readyz").catch(() => null);
    if (res) await res.arrayBuffer();
    if (res && res.status === 200) return;
    if (Date.now() > deadline) throw new Error(`gateway not ready within ${ms} ms (/readyz ${res ? res.status : "unreachable"}):\n${dump(logs)}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

export async function startGateway(env = {}) {
  if (!existsSync(GATEWAY_BIN)) {
    throw new Error(`gateway binary not found at ${GATEWAY_BIN}: run \`make build\` first`);
  }
  const port = await freePort();
  const settings = {
    ADDR: `127.0.0.1:${port}`,
    NODE_NAME: uniqueId("e2e-"),
    JWT_SECRET: randomBytes(32).toString("hex"),
    API_KEYS: `key-${randomBytes(12).toString("hex")}`,
    ADMIN_TOKEN: `admin-${randomBytes(12).toString("hex")}`,
    ECHO_DELAY: "30ms",
    LOG_LEVEL: "info",
    DRAIN_WINDOW: "2s",
    ...env,
  };
  const childEnv = { ...process.env };
  for (const k of ["DATABASE_URL", "REDIS_URL", "NATS_URL"]) delete childEnv[k];
  Object.assign(childEnv, settings);

  const child = spawnOwned(GATEWAY_BIN, [], { env: childEnv, stdio: ["ignore", "pipe", "pipe"] });
  const logs = [];
  let exited = null;
  const exitPromise = once(child, "exit").then(([code, signal]) => {
    exited = { code, signal };
    return exited;
  });

  const listening = new Promise((resolveListen, rejectListen) => {
    const onLine = (line) => {
      let entry;
      try {
        entry = JSON.parse(line);
      } catch {
        entry = { raw: line };
      }
      logs.push(entry);
      if (entry.msg === "listening" && typeof entry.addr === "string") resolveListen(entry.addr);
    };
    for (const stream of [child.stdout, child.stderr]) {
      createInterface({ input: stream }).on("line", onLine);
    }
    child.on("error", rejectListen);
    exitPromise.then((e) =>
      rejectListen(new Error(`gateway exited before listening (${JSON.stringify(e)}):\n${dump(logs)}`)),
    );
  });

  let timer;
  const timeout = new Promise((_, rejectTimeout) => {
    timer = setTimeout(
      () => rejectTimeout(new Error(`gateway did not log "listening" within ${START_TIMEOUT_MS} ms:\n${dump(logs)}`)),
      START_TIMEOUT_MS,
    );
  });
  let addr;
  try {
    addr = await Promise.race([listening, timeout]);
  } catch (err) {
    child.kill("SIGKILL");
    throw err;
  } finally {
    clearTimeout(timer);
  }
  // A wildcard listen address ("[::]:port", ":port") is reached on loopback.
  const hostPort = addr.replace(/^(\[::\]|0\.0\.0\.0)?:/, "127.0.0.1:");
  // A node without NATS is served to tests once /readyz says so: it listens before its
  // routing scope is ready, and an event posted in between is refused not_ready. Cluster
  // nodes are awaited together (cluster.mjs waitClusterReady), as one alone is not ready.
  if (!settings.NATS_URL) {
    try {
      await waitReady(`http://${hostPort}`, START_TIMEOUT_MS, logs);
    } catch (err) {
      child.kill("SIGKILL");
      throw err;
    }
  }

  const gw = {
    addr: hostPort,
    httpURL: `http://${hostPort}`,
    wsURL: `ws://${hostPort}`,
    secret: settings.JWT_SECRET,
    apiKey: settings.API_KEYS.split(",")[0],
    adminToken: settings.ADMIN_TOKEN,
    nodeName: settings.NODE_NAME,
    logs,
    child,
    token(claims = {}) {
      return mintJWT(settings.JWT_SECRET, { sub: "user-1", sessions: ["*"], ...claims });
    },
    async request(path, init = {}) {
      const res = await fetch(gw.httpURL + path, init);
      const text = await res.text();
      let body = text;
      try {
        body = text ? JSON.parse(text) : null;
      } catch {
        // keep text
      }
      return { status: res.status, headers: res.headers, body };
    },
    /** POST /api/sessions/{id}/events with the API key. */
    postEvent(id, body, bearerToken = settings.API_KEYS.split(",")[0]) {
      return gw.request(`/api/sessions/${encodeURIComponent(id)}/events`, {
        method: "POST",
        headers: { "Content-Type": "application/json", Authorization: `Bearer ${bearerToken}` },
        body: typeof body === "string" ? body : JSON.stringify(body),
      });
    },
    async stop() {
      if (exited) return;
      child.kill("SIGTERM");
      let t;
      const grace = new Promise((r) => {
        t = setTimeout(r, STOP_GRACE_MS);
      });
      await Promise.race([exitPromise, grace]);
      clearTimeout(t);
      if (!exited) {
        child.kill("SIGKILL");
        await exitPromise;
      }
    },
  };
  return gw;
}

/** Renders log entries for a failure message (last 60 lines). */
export function dump(logs) {
  return logs
    .slice(-60)
    .map((e) => (e.raw !== undefined ? e.raw : JSON.stringify(e)))
    .join("\n");
}
