// scripts/lib/serve-check.sh, the part of `make check-image` that runs the built binary:
// it stops the node it started, by its pid, whether the check passes or fails, so no
// process of the check is left running.
import assert from "node:assert/strict";
import { once } from "node:events";
import { chmodSync, mkdtempSync, readFileSync, readdirSync, readlinkSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { GATEWAY_BIN, spawnOwned } from "./gateway.mjs";
import { running } from "./procs.mjs";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const SCRIPT = join(ROOT, "scripts/lib/serve-check.sh");


/** Pids of running processes whose working directory is a serve-check directory (the node
 * runs there), found in /proc independently of what the script printed. */
function leftovers() {
  const found = [];
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d) || !running(Number(d))) continue;
    try {
      if (readlinkSync(`/proc/${d}/cwd`).includes("/relay-serve-check.")) found.push(Number(d));
    } catch {
      // gone, or not ours to read
    }
  }
  return found;
}

/** Runs serve-check.sh on bin; resolves to its exit code, output and the node pid it printed. */
async function serveCheck(bin, env = {}) {
  const child = spawnOwned("bash", [SCRIPT, bin], { cwd: ROOT, env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  child.stdout.on("data", (d) => (out += d));
  child.stderr.on("data", (d) => (out += d));
  const [code] = await once(child, "exit");
  const pid = Number(out.match(/serve-check: node pid (\d+)/)?.[1]);
  assert.ok(pid > 0, `serve-check printed the node's pid:\n${out}`);
  return { code, out, pid };
}

test("serve-check passes on the built gateway and leaves no node running", { timeout: 120_000, skip: process.platform !== "linux" && "reads /proc" }, async () => {
  const { code, out, pid } = await serveCheck(GATEWAY_BIN);
  assert.equal(code, 0, out);
  assert.match(out, /SIGTERM stopped it with exit 0/);
  assert.ok(!running(pid), `node pid ${pid} gone:\n${out}`);
  assert.deepEqual(leftovers(), [], "no process left in a serve-check directory");
});

test("serve-check that fails stops the node it started", { timeout: 120_000, skip: process.platform !== "linux" && "reads /proc" }, async () => {
  // A stand-in binary that says it listens but serves nothing: the check fails on its
  // timeout with the stand-in still running, and must stop it.
  const dir = mkdtempSync(join(tmpdir(), "relay-serve-check-e2e-"));
  try {
    const fake = join(dir, "gateway");
    writeFileSync(fake, `#!/usr/bin/env bash\necho $$ > ${join(dir, "pid")}\necho '{"msg":"listening","addr":"127.0.0.1:1"}'\nexec sleep 600\n`);
    chmodSync(fake, 0o755);
    const { code, out, pid } = await serveCheck(fake, { SERVE_TIMEOUT: "1" });
    assert.equal(code, 1, out);
    assert.match(out, /did not serve \/assets\/app\.js/);
    const own = Number(readFileSync(join(dir, "pid"), "utf8"));
    assert.ok(!running(pid) && !running(own), `stand-in (pid ${own}, printed ${pid}) gone after the failed check:\n${out}`);
    assert.deepEqual(leftovers(), [], "no process left in a serve-check directory");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
