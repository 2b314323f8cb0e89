// Ctrl-C on `make run` (scripts/run.sh) ends with exit status 0: the node drains and exits
// 0, and neither the script nor make reports an error.
//
// Two ways in: (1) the script spawned in its own process group, which gets SIGINT as a
// whole, the way a terminal signals its foreground group; (2) `make -o build run` under a
// real pseudo-terminal (util-linux `script`), where a Ctrl-C byte typed into the terminal
// makes the line discipline signal the foreground group. `-o build` reuses the bin/gateway
// that `make e2e` built. Each run listens on its own free port and keeps no state.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { once } from "node:events";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { GATEWAY_BIN, freePort, spawnOwned } from "./gateway.mjs";

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
  const env = await runEnv();
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
  } finally {
    killGroup(child.pid);
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
