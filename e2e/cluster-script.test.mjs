// The README's failover demo for `make cluster`, run as written against scripts/cluster.sh:
// the script starts three nodes and prints their pids, the token, the API key and the admin
// token; an event posted through node 1 is claimed by some node; kill -9 of that node's pid
// is reported by the script, which keeps the other two running; an event posted on a
// survivor is refused with the retry directive until the dead node's lease lapses, then
// accepted on a survivor at a higher epoch (and the new owner logs `session taken over`);
// typing the dead node's number and Enter on the script's stdin starts it again; one SIGINT
// to the script's process group (a terminal's Ctrl-C) drains all three nodes: each logs its
// drain and exits 0, and the lease table holds no live lease of theirs afterwards. A node
// that fails to start stops the script with its error, a non-zero exit, and the nodes
// already started stopped.
//
// Isolation: the script runs on three free consecutive ports (BASE_PORT), a fresh Postgres
// schema and a unique CLUSTER name (storeEnv), its own LOG_DIR, with the fast lease and
// Muster timings of the other cluster tests passed through its environment. It runs in its
// own process group; its nodes run in sessions of their own (setsid), so if the test fails
// midway the group and every node pid the script printed are killed with SIGKILL. The script
// runs under spawnOwned (gateway.mjs): it dies with the test process, and its nodes (under
// setpriv --pdeathsig TERM) with it.
//
// With the output captured (`make cluster 2>&1 | tee -i`, `2>&1 | cat`) one Ctrl-C typed
// into a pseudo-terminal still drains every node (their logs are files in LOG_DIR, and no
// live lease of theirs is left) and leaves no process of the run: every process the run
// started carries an environment marker (procs.mjs), and none is left afterwards.
import assert from "node:assert/strict";
import { execFileSync, spawn, spawnSync } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { after, test } from "node:test";
import { fileURLToPath } from "node:url";
import { FAST_CLUSTER } from "./cluster.mjs";
import { GATEWAY_BIN, spawnOwned, uniqueId } from "./gateway.mjs";
import { killAllWith, processesWith, runMarker, terminalPipeline } from "./procs.mjs";
import { PG, dropSchemas, storeEnv } from "./stores.mjs";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const SCRIPT = join(ROOT, "scripts/cluster.sh");

// Failure bounds for waits on other processes (no signal crosses the process boundary, so
// these poll). They bound a failing run; the test asserts no elapsed time.
const WAIT_MS = 45_000;
const POLL_MS = 100;

after(() => dropSchemas());

/** Listens on 127.0.0.1:port; resolves to the server, or null when the port is taken. */
function tryListen(port) {
  return new Promise((resolve) => {
    const srv = createServer();
    // once(srv, "listening") would reject on the error event, so a taken port
    // must be answered here, not raced.
    srv.once("error", () => resolve(null));
    srv.listen(port, "127.0.0.1", () => resolve(srv));
  });
}

/** A port P such that P, P+1 and P+2 on 127.0.0.1 were free a moment ago. */
async function freePortRange(n = 3) {
  for (let attempt = 0; attempt < 50; attempt++) {
    const first = await tryListen(0);
    const base = first.address().port;
    const held = [first];
    for (let i = 1; i < n && base + i <= 65535; i++) {
      const s = await tryListen(base + i);
      if (!s) break;
      held.push(s);
    }
    await Promise.all(held.map((s) => new Promise((r) => s.close(r))));
    if (held.length === n) return base;
  }
  throw new Error(`no ${n} consecutive free ports found`);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Polls fn until it returns a truthy value; fails after ms with what(). */
async function until(fn, what, ms = WAIT_MS) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`not within ${ms} ms: ${typeof what === "function" ? what() : what}`);
    await sleep(POLL_MS);
  }
}

/** GET url; resolves to its status, or 0 when nothing answers. */
async function statusOf(url) {
  try {
    const res = await fetch(url);
    await res.arrayBuffer();
    return res.status;
  } catch {
    return 0;
  }
}

async function request(url, init = {}) {
  const res = await fetch(url, init);
  const text = await res.text();
  let body = text;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    // keep text
  }
  return { status: res.status, headers: res.headers, body };
}

/** The search_path schema of a storeEnv DATABASE_URL. */
const schemaOf = (env) => new URL(env.DATABASE_URL).searchParams.get("search_path");

/** Live leases (expires_at in the future) whose owner is one of names, as "owner key" lines. */
function liveLeases(schema, names) {
  const owners = names.map((n) => `owner_node LIKE '${n}/%'`).join(" OR ");
  const out = execFileSync("psql", [PG, "-qAtc", `SELECT owner_node || ' ' || agent_key FROM "${schema}".agent_leases WHERE expires_at > now() AND (${owners})`], { encoding: "utf8" });
  return out.split("\n").filter(Boolean);
}

/** Parsed JSON lines of a node log (other lines skipped). */
const jsonLines = (text) =>
  text
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l));

/** Resolves to [code, signal] when child exits; fails after 2 * WAIT_MS (a hang guard) with what(). */
function exitWithin(child, what) {
  let timer;
  const guard = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`cluster.sh still running:\n${what()}`)), 2 * WAIT_MS);
  });
  return Promise.race([once(child, "exit"), guard]).finally(() => clearTimeout(timer));
}

/** SIGKILLs pid, ignoring a process already gone. */
function killQuiet(pid) {
  try {
    process.kill(pid, "SIGKILL");
  } catch {
    // gone
  }
}

function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

test("make cluster failover demo: kill -9 the owner, a survivor takes over at a higher epoch, restart by number, Ctrl-C stops all", { timeout: 180_000 }, async (t) => {
  const basePort = await freePortRange(3);
  const logDir = mkdtempSync(join(tmpdir(), "relay-cluster-e2e-"));
  const marker = runMarker();
  const env = {
    ...process.env,
    [marker[0]]: marker[1],
    ...storeEnv({ nats: true }),
    ...FAST_CLUSTER,
    GATEWAY_BIN,
    BASE_PORT: String(basePort),
    LOG_DIR: logDir,
    // A bound, not a wait: a drain ends when its work is done.
    DRAIN_WINDOW: "15s",
    ECHO_DELAY: "10ms",
    LOG_LEVEL: "info",
  };
  for (const k of ["JWT_SECRET", "API_KEYS", "ADMIN_TOKEN"]) delete env[k];

  // detached: the script leads its own process group, which holds the nodes it starts.
  const script = spawnOwned("bash", [SCRIPT], { cwd: ROOT, env, detached: true, stdio: ["pipe", "pipe", "pipe"] });
  let exited = null;
  const exitP = once(script, "exit").then(([code, signal]) => (exited = { code, signal }));
  const out = [];
  const errLines = [];
  createInterface({ input: script.stdout }).on("line", (l) => out.push(l));
  createInterface({ input: script.stderr }).on("line", (l) => errLines.push(l));
  const transcript = () => [...out, "--- stderr", ...errLines].join("\n");
  const nodeLog = (name) => {
    try {
      return readFileSync(join(logDir, `${name}.log`), "utf8");
    } catch {
      return "";
    }
  };
  const urlOf = (n) => `http://127.0.0.1:${basePort + n - 1}`; // node n in 1..3
  let ok = false;

  try {
    // The banner: pids, token, API key, admin token (the last line before the watch loop).
    const text = await until(() => {
      if (exited) throw new Error(`cluster.sh exited early ${JSON.stringify(exited)}:\n${transcript()}`);
      const t = out.join("\n");
      return t.includes("Ctrl-C stops all three.") && t;
    }, () => `cluster.sh banner:\n${transcript()}`);
    const pids = {};
    for (const m of text.matchAll(/node([123])=(\d+)/g)) pids[m[1]] = Number(m[2]);
    assert.deepEqual(Object.keys(pids).sort(), ["1", "2", "3"], `three pids in the banner:\n${text}`);
    const token = text.match(/socket\/API token \(JWT, all sessions\): (\S+)/)?.[1];
    const apiKey = text.match(/API key:\s+(\S+)/)?.[1];
    const adminToken = text.match(/admin token:\s+(\S+)/)?.[1];
    assert.ok(token && apiKey && adminToken, `token, API key and admin token in the banner:\n${text}`);
    for (let n = 1; n <= 3; n++) {
      assert.ok(text.includes(`${urlOf(n)}/#token=${token}&session=`), `demo link of node${n} on port ${basePort + n - 1}`);
    }

    // All three ready (Muster view of all three, stores reachable).
    await until(async () => (await Promise.all([1, 2, 3].map((n) => statusOf(`${urlOf(n)}/readyz`)))).every((s) => s === 200), "all three /readyz 200");
    for (let n = 1; n <= 3; n++) {
      const info = await request(`${urlOf(n)}/admin/node`, { headers: { Authorization: `Bearer ${adminToken}` } });
      assert.equal(info.status, 200, `node${n} /admin/node with the printed admin token`);
      assert.equal(info.body.name, `node${n}`);
    }

    // A quiet start: a few info lines per node (starting, agent, cluster mode, listening,
    // ready), the routing chatter at debug.
    for (let n = 1; n <= 3; n++) {
      // Warnings are not chatter (a slow store on a loaded machine may cause one): info only.
      const info = jsonLines(nodeLog(`node${n}`)).filter((e) => e.level === "info");
      assert.ok(info.length <= 6, `node${n} logs ${info.length} lines at info while starting:\n${info.map((e) => e.msg).join("\n")}`);
      for (const msg of ["listening", "ready"]) assert.ok(info.some((e) => e.msg === msg), `node${n} logs "${msg}"`);
    }

    // "open a node's demo link and send a message": post with the link's token through node 1.
    const session = uniqueId("demo-");
    const post = (n, text) =>
      request(`${urlOf(n)}/api/sessions/${session}/events`, {
        method: "POST",
        headers: { "Content-Type": "application/json", Authorization: `Bearer ${token}` },
        body: JSON.stringify({ type: "message", data: { text }, idempotency_key: `k-${text}` }),
      });
    const getSession = (n) => request(`${urlOf(n)}/api/sessions/${session}`, { headers: { Authorization: `Bearer ${apiKey}` } });
    const first = await post(1, "before the kill");
    assert.equal(first.status, 202, `first post: ${JSON.stringify(first.body)}`);
    const before = await getSession(1);
    assert.equal(before.status, 200);
    const ownerName = String(before.body.owner).split("/")[0];
    assert.match(ownerName, /^node[123]$/, `owner ${before.body.owner}`);
    const dead = Number(ownerName.slice(4));
    const survivors = [1, 2, 3].filter((n) => n !== dead);

    // kill -9 the owner's pid.
    process.kill(pids[dead], "SIGKILL");
    await until(() => errLines.some((l) => l.includes(`cluster: node${dead} (pid ${pids[dead]}) exited`)), () => `script reports node${dead}'s death:\n${transcript()}`);
    assert.equal(exited, null, "the script keeps running");
    for (const n of survivors) {
      assert.ok(alive(pids[n]), `node${n} (pid ${pids[n]}) still running`);
      assert.equal(await statusOf(`${urlOf(n)}/healthz`), 200, `node${n} answers /healthz`);
    }

    // The next event on a survivor: refused with the retry directive while the dead node's
    // lease is live, then accepted by a survivor at epoch + 1 or later.
    let refused = 0;
    const taken = await until(async () => {
      const r = await post(survivors[0], "after the kill");
      if (r.status === 202) return r;
      assert.equal(r.status, 503, `post on node${survivors[0]}: ${r.status} ${JSON.stringify(r.body)}`);
      assert.ok(r.body && r.body.retry && r.body.retry.after_ms >= 0, `503 carries a retry directive: ${JSON.stringify(r.body)}`);
      assert.ok(r.headers.get("retry-after"), "503 carries Retry-After");
      refused++;
      await sleep(Math.min(r.body.retry.after_ms, 2_000));
      return null;
    }, () => `post on node${survivors[0]} accepted (refused ${refused} times)`);
    assert.equal(taken.body.duplicate, false);
    assert.ok(taken.body.epoch > first.body.epoch, `epoch ${taken.body.epoch} after the takeover > ${first.body.epoch}`);
    const afterKill = await getSession(survivors[0]);
    const newOwner = String(afterKill.body.owner).split("/")[0];
    assert.ok(survivors.map((n) => `node${n}`).includes(newOwner), `new owner ${afterKill.body.owner} is a survivor (dead: node${dead})`);
    assert.ok(afterKill.body.epoch >= taken.body.epoch, `session epoch ${afterKill.body.epoch}`);
    // "that node logs `session taken over` with the old and new owner"
    const takeoverLine = () =>
      nodeLog(newOwner)
        .split("\n")
        .filter((l) => l.startsWith("{"))
        .map((l) => JSON.parse(l))
        .find((e) => e.msg === "session taken over" && e.session === session);
    const line = await until(takeoverLine, () => `${newOwner} logs "session taken over" for ${session}`);
    assert.ok(String(line.old_owner).startsWith(`node${dead}/`), `old_owner ${line.old_owner}`);
    assert.ok(String(line.new_owner).startsWith(`${newOwner}/`), `new_owner ${line.new_owner}`);

    // Type the dead node's number and Enter: the script starts it again.
    script.stdin.write(`${dead}\n`);
    const restarted = await until(() => {
      for (const l of errLines) {
        const m = l.match(new RegExp(`^cluster: node${dead} restarted \\(pid (\\d+)\\)`));
        if (m) return Number(m[1]);
      }
      return null;
    }, () => `script restarts node${dead}:\n${transcript()}`);
    assert.notEqual(restarted, pids[dead]);
    await until(async () => (await statusOf(`${urlOf(dead)}/healthz`)) === 200, `node${dead} answers /healthz after the restart`);
    pids[dead] = restarted;

    // The nodes hold leases now (the session's owner at least), so "none afterwards" means
    // the drain released them.
    const schema = schemaOf(env);
    const held = liveLeases(schema, ["node1", "node2", "node3"]);
    assert.ok(held.length > 0, "a live lease before Ctrl-C");
    const logLen = Object.fromEntries([1, 2, 3].map((n) => [n, nodeLog(`node${n}`).length]));

    // Ctrl-C as a terminal sends it: SIGINT to the script's whole process group, once.
    process.kill(-script.pid, "SIGINT");
    await until(() => exited, () => `cluster.sh exits after SIGINT:\n${transcript()}`, 60_000);
    assert.equal(exited.code, 0, `script exit ${JSON.stringify(exited)}:\n${transcript()}`);
    assert.ok(out.some((l) => l.startsWith("stopping 3 nodes")), transcript());
    for (const n of [1, 2, 3]) {
      assert.ok(!alive(pids[n]), `node${n} (pid ${pids[n]}) stopped`);
      assert.ok(out.includes(`cluster: node${n} (pid ${pids[n]}) drained and exited 0`), `node${n} exit 0 reported:\n${transcript()}`);
      // This incarnation's log: it drained and stopped, and was not cut short.
      const since = jsonLines(nodeLog(`node${n}`).slice(logLen[n]));
      const msgs = since.map((e) => e.msg);
      assert.ok(msgs.includes("shutting down: draining"), `node${n} logs its drain: ${msgs.join(" | ")}`);
      assert.ok(msgs.includes("stopped"), `node${n} logs its stop: ${msgs.join(" | ")}`);
      assert.ok(!msgs.includes("drain incomplete"), `node${n} drain complete: ${msgs.join(" | ")}`);
    }
    assert.deepEqual(liveLeases(schema, ["node1", "node2", "node3"]), [], `no live lease of the three nodes after Ctrl-C (before: ${held.join(", ")})`);
    assert.deepEqual(processesWith(marker), [], "no process of the run left");
    t.diagnostic(`dead node${dead}, refused ${refused}, epoch ${first.body.epoch} -> ${taken.body.epoch}, new owner ${newOwner}, restarted pid ${restarted}`);
    ok = true;
  } catch (err) {
    for (const n of ["node1", "node2", "node3"]) console.error(`--- ${n}.log (tail)\n${nodeLog(n).split("\n").slice(-40).join("\n")}`);
    console.error(`--- cluster.sh\n${transcript()}`);
    throw err;
  } finally {
    if (!exited) {
      try {
        process.kill(-script.pid, "SIGKILL");
      } catch {
        // group already gone
      }
      await exitP;
    }
    // The nodes run in sessions of their own: kill every pid the script printed.
    for (const m of out.join("\n").matchAll(/\(pid (\d+)\)|node[123]=(\d+)/g)) killQuiet(Number(m[1] || m[2]));
    for (const m of errLines.join("\n").matchAll(/\(pid (\d+)\)/g)) killQuiet(Number(m[1]));
    killAllWith(marker);
    script.stdin.destroy();
    if (ok) rmSync(logDir, { recursive: true, force: true });
  }
});

test("make cluster: a node that fails to start stops the script with its error and exit 1, and the nodes already started are stopped", { timeout: 120_000 }, async () => {
  const basePort = await freePortRange(3);
  const logDir = mkdtempSync(join(tmpdir(), "relay-cluster-e2e-"));
  // node2's port is taken: nodes 1 and 3 start, node2 fails to listen.
  const blocker = await tryListen(basePort + 1);
  assert.ok(blocker, `port ${basePort + 1} free a moment ago`);
  blocker.on("connection", (c) => c.destroy()); // the script's /healthz probe gets no answer here
  const env = { ...process.env, ...storeEnv({ nats: true }), ...FAST_CLUSTER, GATEWAY_BIN, BASE_PORT: String(basePort), LOG_DIR: logDir, DRAIN_WINDOW: "15s", LOG_LEVEL: "info" };
  for (const k of ["JWT_SECRET", "API_KEYS", "ADMIN_TOKEN"]) delete env[k];
  const script = spawnOwned("bash", [SCRIPT], { cwd: ROOT, env, detached: true, stdio: ["ignore", "pipe", "pipe"] });
  const out = [];
  const errLines = [];
  createInterface({ input: script.stdout }).on("line", (l) => out.push(l));
  createInterface({ input: script.stderr }).on("line", (l) => errLines.push(l));
  const transcript = () => [...out, "--- stderr", ...errLines].join("\n");
  const started = [];
  try {
    const [code, signal] = await exitWithin(script, () => transcript());
    const text = transcript();
    for (const m of text.matchAll(/node([123]) \(pid (\d+)\)/g)) started.push(Number(m[2]));
    assert.equal(signal, null, text);
    assert.equal(code, 1, `exit status:\n${text}`);
    assert.ok(errLines.some((l) => l.startsWith("cluster: node2 failed to start (exit status 1)")), `node2's failure reported:\n${text}`);
    assert.ok(errLines.some((l) => l.includes("address already in use")), `node2's error in the log tail:\n${text}`);
    assert.ok(!out.some((l) => l.includes("Ctrl-C stops all three.")), "no banner");
    assert.equal(new Set(started).size, 3, `three node pids printed:\n${text}`);
    for (const pid of new Set(started)) assert.ok(!alive(pid), `pid ${pid} stopped:\n${text}`);
    // The two that started were stopped by the script (drained, exit 0).
    for (const n of [1, 3]) assert.match(text, new RegExp(`cluster: node${n} \\(pid \\d+\\) drained and exited 0`), `node${n} stopped cleanly`);
  } finally {
    try {
      process.kill(-script.pid, "SIGKILL");
    } catch {
      // group already gone
    }
    for (const pid of started) killQuiet(pid);
    await new Promise((r) => blocker.close(r));
    rmSync(logDir, { recursive: true, force: true });
  }
});

test("make cluster: Postgres unreachable stops the script with the node's error and exit 1", { timeout: 120_000 }, async () => {
  const basePort = await freePortRange(3);
  const closed = await freePortRange(1); // nothing listens here
  const logDir = mkdtempSync(join(tmpdir(), "relay-cluster-e2e-"));
  const env = { ...process.env, ...storeEnv({ nats: true }), ...FAST_CLUSTER, GATEWAY_BIN, BASE_PORT: String(basePort), LOG_DIR: logDir, LOG_LEVEL: "info" };
  env.DATABASE_URL = `postgres://postgres@127.0.0.1:${closed}/test?sslmode=disable`;
  const script = spawnOwned("bash", [SCRIPT], { cwd: ROOT, env, detached: true, stdio: ["ignore", "pipe", "pipe"] });
  const lines = [];
  for (const s of [script.stdout, script.stderr]) createInterface({ input: s }).on("line", (l) => lines.push(l));
  try {
    const [code] = await exitWithin(script, () => lines.join("\n"));
    const text = lines.join("\n");
    assert.equal(code, 1, `exit status:\n${text}`);
    assert.match(text, /cluster: node[123] failed to start \(exit status 1\)/, text);
    assert.match(text, /connection refused/, `the node's error is printed:\n${text}`);
    for (const m of text.matchAll(/\(pid (\d+)\)/g)) assert.ok(!alive(Number(m[1])), `pid ${m[1]} gone`);
  } finally {
    try {
      process.kill(-script.pid, "SIGKILL");
    } catch {
      // group already gone
    }
    for (const m of lines.join("\n").matchAll(/\(pid (\d+)\)/g)) killQuiet(Number(m[1]));
    rmSync(logDir, { recursive: true, force: true });
  }
});

const hasScript = spawnSync("script", ["--version"]).status === 0;

test("make cluster in a terminal: one Ctrl-C drains every node and make exits 0", { timeout: 180_000, skip: !hasScript && "util-linux script(1) not installed" }, async () => {
  const basePort = await freePortRange(3);
  const logDir = mkdtempSync(join(tmpdir(), "relay-cluster-e2e-"));
  const env = { ...process.env, ...storeEnv({ nats: true }), ...FAST_CLUSTER, GATEWAY_BIN, BASE_PORT: String(basePort), LOG_DIR: logDir, DRAIN_WINDOW: "15s", LOG_LEVEL: "info" };
  for (const k of ["JWT_SECRET", "API_KEYS", "ADMIN_TOKEN", "RELAY_CLUSTER_FG"]) delete env[k];
  // script -q -e -c CMD /dev/null: CMD on a new pseudo-terminal; `-o build` reuses bin/gateway.
  const term = spawnOwned("script", ["-qec", "make --no-print-directory -o build cluster", "/dev/null"], { cwd: ROOT, env, detached: true, stdio: ["pipe", "pipe", "pipe"] });
  let exited = null;
  once(term, "exit").then(([code, signal]) => (exited = { code, signal }));
  let text = "";
  term.stdout.on("data", (d) => (text += d));
  term.stderr.on("data", (d) => (text += d));
  const pids = [];
  try {
    await until(() => {
      if (exited) throw new Error(`make cluster exited early ${JSON.stringify(exited)}:\n${text}`);
      return text.includes("Ctrl-C stops all three.");
    }, () => `banner:\n${text}`);
    for (const m of text.matchAll(/node([123])=(\d+)/g)) pids.push(Number(m[2]));
    assert.equal(pids.length, 3, text);
    term.stdin.write("\x03"); // Ctrl-C typed into the terminal
    await until(() => exited, () => `make cluster exits after Ctrl-C:\n${text}`, 60_000);
    assert.deepEqual(exited, { code: 0, signal: null }, `make cluster's exit after Ctrl-C:\n${text}`);
    for (let n = 1; n <= 3; n++) assert.match(text, new RegExp(`cluster: node${n} \\(pid \\d+\\) drained and exited 0`), text);
    assert.doesNotMatch(text, /make: \*\*\*/, "make reports no error");
    for (const pid of pids) assert.ok(!alive(pid), `pid ${pid} stopped`);
  } finally {
    if (!exited) {
      try {
        process.kill(-term.pid, "SIGKILL");
      } catch {
        // gone
      }
    }
    for (const pid of pids) killQuiet(pid);
    term.stdin.destroy();
    rmSync(logDir, { recursive: true, force: true });
  }
});

// `make cluster` under a pseudo-terminal with its output piped, then one Ctrl-C typed into
// the terminal. The pty's shell outlives the pipeline (as a user's terminal does: closing
// the pty would hang up whatever is left): it reports the pipeline's end, then waits for a
// line.
const captured = [
  // The reader survives the Ctrl-C (tee -i): the script's report shows in the pipeline.
  { name: "2>&1 | tee -i", cmd: "make --no-print-directory -o build cluster 2>&1 | tee -i /dev/null", reportShown: true },
  // The reader dies with the Ctrl-C: the script drains with its output gone.
  { name: "2>&1 | cat", cmd: "make --no-print-directory -o build cluster 2>&1 | cat", reportShown: false },
];

for (const c of captured) {
  test(`make cluster ${c.name} in a terminal: one Ctrl-C drains every node and leaves no process behind`, { timeout: 180_000, skip: !hasScript && "util-linux script(1) not installed" }, async () => {
    const basePort = await freePortRange(3);
    const logDir = mkdtempSync(join(tmpdir(), "relay-cluster-e2e-"));
    const marker = runMarker();
    // SHELL: the shell script(1) runs the command line with (PIPESTATUS is bash's).
    const env = { ...process.env, ...storeEnv({ nats: true }), ...FAST_CLUSTER, GATEWAY_BIN, BASE_PORT: String(basePort), LOG_DIR: logDir, DRAIN_WINDOW: "15s", LOG_LEVEL: "info", SHELL: "/bin/bash", [marker[0]]: marker[1] };
    for (const k of ["JWT_SECRET", "API_KEYS", "ADMIN_TOKEN", "RELAY_CLUSTER_FG"]) delete env[k];
    const run = terminalPipeline(c.cmd, { cwd: ROOT, env });
    const nodeLog = (n) => {
      try {
        return readFileSync(join(logDir, `node${n}.log`), "utf8");
      } catch {
        return "";
      }
    };
    let ok = false;
    try {
      await until(() => {
        if (run.exited) throw new Error(`exited early ${JSON.stringify(run.exited)}:\n${run.text}`);
        return run.text.includes("Ctrl-C stops all three.");
      }, () => `banner:\n${run.text}`);
      const token = run.text.match(/socket\/API token \(JWT, all sessions\): (\S+)/)?.[1];
      assert.ok(token, `token in the banner:\n${run.text}`);
      // A session with an owner: a live lease the drain must release.
      await until(async () => (await Promise.all([0, 1, 2].map((i) => statusOf(`http://127.0.0.1:${basePort + i}/readyz`)))).every((st) => st === 200), () => "all three /readyz 200");
      const session = uniqueId("pipe-");
      const posted = await request(`http://127.0.0.1:${basePort}/api/sessions/${session}/events`, {
        method: "POST",
        headers: { "Content-Type": "application/json", Authorization: `Bearer ${token}` },
        body: JSON.stringify({ type: "message", data: { text: "hello" }, idempotency_key: "k-1" }),
      });
      assert.equal(posted.status, 202, JSON.stringify(posted.body));
      const schema = schemaOf(env);
      assert.ok(liveLeases(schema, ["node1", "node2", "node3"]).length > 0, "a live lease before Ctrl-C");

      run.term.stdin.write("\x03"); // Ctrl-C typed into the terminal
      await until(() => /pipeline done: make exited \d+/.test(run.text), () => `the pipeline ends after Ctrl-C:\n${run.text}`);
      // The script and its nodes may outlive make: wait for them. The pty and its shell stay.
      const others = () => processesWith(marker).filter((l) => !/^\d+ (script|bash -c trap)/.test(l));
      await until(() => others().length === 0, () => `processes of the run still running:\n${others().join("\n")}\n${run.text}`);
      run.term.stdin.write("\n");
      await until(() => run.exited, () => `the pty's shell exits:\n${run.text}`);
      assert.deepEqual(processesWith(marker), [], "no process of the run left");
      for (const n of [1, 2, 3]) {
        const msgs = jsonLines(nodeLog(n)).map((e) => e.msg);
        assert.ok(msgs.includes("shutting down: draining"), `node${n} logs its drain: ${msgs.join(" | ")}`);
        assert.ok(msgs.includes("stopped"), `node${n} logs its stop: ${msgs.join(" | ")}`);
        assert.ok(!msgs.includes("drain incomplete"), `node${n} drain complete: ${msgs.join(" | ")}`);
        // Its own close of the NATS link at the stop is no warning.
        assert.ok(!msgs.includes("nats disconnected"), `node${n} logs no "nats disconnected" at its stop: ${msgs.join(" | ")}`);
        if (c.reportShown) assert.match(run.text, new RegExp(`cluster: node${n} \\(pid \\d+\\) drained and exited 0`), run.text);
      }
      assert.deepEqual(liveLeases(schema, ["node1", "node2", "node3"]), [], "no live lease of the three nodes after Ctrl-C");
      ok = true;
    } finally {
      if (!ok) for (const n of [1, 2, 3]) console.error(`--- node${n}.log (tail)\n${nodeLog(n).split("\n").slice(-20).join("\n")}`);
      run.term.stdin.destroy();
      try {
        process.kill(-run.term.pid, "SIGKILL");
      } catch {
        // gone
      }
      killAllWith(marker);
      rmSync(logDir, { recursive: true, force: true });
    }
  });
}
