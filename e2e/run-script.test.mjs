// Ctrl-C on `make run` (scripts/run.sh) ends with exit status 0: the node drains and exits
// 0, and neither the script nor make reports an error.
//
// Two ways in: (1) the script spawned in its own process group, which gets SIGINT as a
// whole, the way a terminal signals its foreground group; (2) `make -o build run` under a
// real pseudo-terminal (util-linux `script`), where a Ctrl-C byte typed into the terminal
// makes the line discipline signal the foreground group. `-o build` reuses the bin/gateway
// that `make e2e` built. Each run listens on its own free port and keeps no state.
//
// With the output captured (`2>&1 | tee`, `2>file`, `| cat`) one Ctrl-C still drains the
// node and leaves no process of the run behind: every process the run started carries an
// environment marker (procs.mjs), and none is left once the pty's job has exited. A node
// whose log reader died keeps draining and exits 0 (it ignores SIGPIPE).
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { GATEWAY_BIN, freePort, spawnOwned } from "./gateway.mjs";
import { killAllWith, processesWith, runMarker, terminalPipeline } from "./procs.mjs";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const SCRIPT = join(ROOT, "scripts/run.sh");
// A hang guard only: a failing run ends here instead of at the suite's timeout.
const HANG_MS = 60_000;

/** The env of a run: a free ADDR, no stores (embedded mode), the built binary. */
async function runEnv() {
  const env = { ...process.env, ADDR: `127.0.0.1:${await freePort()}`, GATEWAY_BIN, LOG_LEVEL: "info", DRAIN_WINDOW: "2s" };
  for (const k of ["DATABASE_URL", "REDIS_URL", "NATS_URL", "JWT_SECRET"]) delete env[k];
  return env;
}

const POLL_MS = 50;

/** Polls fn until it returns a truthy value; fails after HANG_MS (a hang guard) with what(). */
async function until(fn, what) {
  const deadline = Date.now() + HANG_MS;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`not within ${HANG_MS} ms: ${what()}`);
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
}

/** Whether http://ADDR/healthz answers 200. */
async function healthy(addr) {
  try {
    const res = await fetch(`http://${addr}/healthz`);
    await res.arrayBuffer();
    return res.status === 200;
  } catch {
    return false;
  }
}

/** Resolves when a line of child's output contains needle; rejects on exit or after HANG_MS. */
function waitOutput(child, lines, needle) {
  return new Promise((resolveWait, rejectWait) => {
    const timer = setTimeout(() => rejectWait(new Error(`no "${needle}" within ${HANG_MS} ms:\n${lines.join("\n")}`)), HANG_MS);
    const check = () => {
      if (lines.some((l) => l.includes(needle))) {
        clearTimeout(timer);
        resolveWait();
      }
    };
    for (const s of [child.stdout, child.stderr]) createInterface({ input: s }).on("line", (l) => (lines.push(l), check()));
    child.once("exit", (code, signal) => {
      clearTimeout(timer);
      rejectWait(new Error(`exited (${code}, ${signal}) before "${needle}":\n${lines.join("\n")}`));
    });
  });
}

function killGroup(pid) {
  try {
    process.kill(-pid, "SIGKILL");
  } catch {
    // already gone
  }
}

test("scripts/run.sh: SIGINT to its process group drains the node and exits 0", { timeout: 120_000 }, async () => {
  const marker = runMarker();
  const env = { ...(await runEnv()), [marker[0]]: marker[1] };
  const child = spawnOwned("bash", [SCRIPT], { cwd: ROOT, env, detached: true, stdio: ["ignore", "pipe", "pipe"] });
  const exit = once(child, "exit");
  const lines = [];
  try {
    await waitOutput(child, lines, '"msg":"listening"');
    process.kill(-child.pid, "SIGINT");
    const [code, signal] = await exit;
    assert.equal(signal, null, lines.join("\n"));
    assert.equal(code, 0, `exit status after SIGINT:\n${lines.join("\n")}`);
    assert.ok(lines.some((l) => l.includes('"msg":"shutting down: draining"')), `drain logged:\n${lines.join("\n")}`);
    assert.ok(lines.some((l) => l.includes('"msg":"stopped"')), `stop logged:\n${lines.join("\n")}`);
    assert.deepEqual(processesWith(marker), [], "no process of the run left");
  } finally {
    killGroup(child.pid);
    killAllWith(marker);
  }
});

test("gateway: a log pipe whose reader died does not stop a draining node; it exits 0", { timeout: 120_000 }, async () => {
  const env = await runEnv();
  const child = spawnOwned(GATEWAY_BIN, [], { cwd: ROOT, env, stdio: ["ignore", "pipe", "pipe"] });
  const exit = once(child, "exit");
  try {
    await until(() => healthy(env.ADDR), () => `gateway on ${env.ADDR} answers /healthz`);
    // The reader goes away (a tee killed by the Ctrl-C): every later log write hits EPIPE.
    child.stdout.destroy();
    child.stderr.destroy();
    child.kill("SIGTERM"); // the drain logs several lines into the broken pipe
    const [code, signal] = await exit;
    assert.deepEqual({ code, signal }, { code: 0, signal: null }, "exit after draining into a broken pipe");
  } finally {
    child.kill("SIGKILL");
  }
});

const hasScript = spawnSync("script", ["--version"]).status === 0;

test("make run in a terminal: Ctrl-C exits 0 without a make error", { timeout: 180_000, skip: !hasScript && "util-linux script(1) not installed" }, async () => {
  const env = await runEnv();
  // script -q -e -c CMD /dev/null: CMD on a new pseudo-terminal, script's exit status is CMD's.
  const child = spawnOwned("script", ["-qec", "make --no-print-directory -o build run", "/dev/null"], { cwd: ROOT, env, detached: true, stdio: ["pipe", "pipe", "pipe"] });
  const exit = once(child, "exit");
  const lines = [];
  try {
    await waitOutput(child, lines, '"msg":"listening"');
    child.stdin.write("\x03"); // Ctrl-C typed into the terminal
    const [code, signal] = await exit;
    const out = lines.join("\n");
    assert.equal(signal, null, out);
    assert.equal(code, 0, `make run's exit status after Ctrl-C:\n${out}`);
    assert.ok(out.includes('"msg":"stopped"'), `the node logged its stop:\n${out}`);
    assert.doesNotMatch(out, /make: \*\*\*/, "make reports no error");
  } finally {
    child.stdin.destroy();
    killGroup(child.pid);
  }
});

// `make run` under a pseudo-terminal with its output captured, then one Ctrl-C typed into
// the terminal. cmd is the pipeline; {{log}} a file of the test's own. The pty's shell
// outlives the pipeline (as a user's terminal does: closing the pty would hang up whatever
// is left): it reports the pipeline's end and make's exit status, then waits for a line.
const captured = [
  // stderr piped, the reader survives the Ctrl-C (tee -i): the drain shows in the pipeline.
  { name: "2>&1 | tee -i", cmd: "make --no-print-directory -o build run 2>&1 | tee -i /dev/null", drainIn: "pty" },
  // stderr piped, the reader dies with the Ctrl-C: the node drains into a broken pipe.
  { name: "2>&1 | cat", cmd: "make --no-print-directory -o build run 2>&1 | cat", drainIn: null },
  // stderr in a file: the drain shows in the file.
  { name: "2>file", cmd: "make --no-print-directory -o build run 2>{{log}}", drainIn: "log" },
  // only stdout piped: stdin and stderr are the terminal, so job control; make exits 0.
  { name: "| cat", cmd: "make --no-print-directory -o build run | cat", drainIn: "pty", exit0: true },
];

for (const c of captured) {
  test(`make run ${c.name} in a terminal: one Ctrl-C drains the node and leaves no process behind`, { timeout: 180_000, skip: !hasScript && "util-linux script(1) not installed" }, async () => {
    const marker = runMarker();
    // SHELL: the shell script(1) runs the command line with (PIPESTATUS is bash's).
    const env = { ...(await runEnv()), [marker[0]]: marker[1], SHELL: "/bin/bash" };
    const dir = mkdtempSync(join(tmpdir(), "relay-run-e2e-"));
    const log = join(dir, "run.err");
    // script -q -f -e -c CMD /dev/null: CMD on a new pseudo-terminal, output flushed at once.
    const run = terminalPipeline(c.cmd.replace("{{log}}", log), { cwd: ROOT, env });
    const fileText = () => {
      try {
        return readFileSync(log, "utf8");
      } catch {
        return "";
      }
    };
    try {
      await until(async () => {
        if (run.exited) throw new Error(`exited early ${JSON.stringify(run.exited)}:\n${run.text}\n${fileText()}`);
        // Its last start-up line written: an idle node writes nothing more before the Ctrl-C.
        return (run.text + fileText()).includes('"msg":"ready"') && healthy(env.ADDR);
      }, () => `node on ${env.ADDR} logs "ready" and answers /healthz:\n${run.text}\n${fileText()}`);
      run.term.stdin.write("\x03"); // Ctrl-C typed into the terminal
      const makeStatus = await until(() => run.text.match(/pipeline done: make exited (\d+)/)?.[1], () => `the pipeline ends after Ctrl-C:\n${run.text}`);
      // The node may outlive make (it drains in a session of its own): wait for it. The pty
      // and its shell are still there.
      const self = String(run.term.pid);
      const others = () => processesWith(marker).filter((l) => !/^\d+ (script|bash -c trap)/.test(l) && !l.startsWith(`${self} `));
      await until(() => others().length === 0, () => `processes of the run still running:\n${others().join("\n")}\n${run.text}`);
      run.term.stdin.write("\n");
      await until(() => run.exited, () => `the pty's shell exits:\n${run.text}`);
      assert.deepEqual(processesWith(marker), [], "no process of the run left");
      assert.equal(await healthy(env.ADDR), false, `nothing answers on ${env.ADDR}`);
      const drained = c.drainIn === "pty" ? run.text : c.drainIn === "log" ? fileText() : null;
      if (drained !== null) {
        assert.ok(drained.includes('"msg":"shutting down: draining"'), `drain logged:\n${drained}`);
        assert.ok(drained.includes('"msg":"stopped"'), `stop logged:\n${drained}`);
      }
      if (c.exit0) {
        assert.equal(makeStatus, "0", `make's exit status:\n${run.text}`);
        assert.doesNotMatch(run.text, /make: \*\*\*/, "make reports no error");
      }
    } finally {
      run.term.stdin.destroy();
      killGroup(run.term.pid);
      killAllWith(marker);
      rmSync(dir, { recursive: true, force: true });
    }
  });
}
