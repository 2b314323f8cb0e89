// No gateway started by a test outlives the test process: after a failed test file (its
// process exits with an error) or a killed one (SIGKILL, as the runner's timeout or a
// Ctrl-C on `make test` may do), the gateways it started are gone.
//
// Each case runs a small test process (node) that starts a real gateway through
// e2e/gateway.mjs startGateway, prints its pid, and then dies without stopping it.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { running } from "./procs.mjs";

const GATEWAY_MJS = join(dirname(fileURLToPath(import.meta.url)), "gateway.mjs");
// A hang guard for a failing run; the test asserts no elapsed time.
const HANG_MS = 30_000;


/** Runs a test process that starts a gateway and then does end; resolves to the gateway pid. */
async function orphanedGateway(end) {
  const code = `
    import { startGateway } from ${JSON.stringify(GATEWAY_MJS)};
    const gw = await startGateway();
    console.log("gateway pid " + gw.child.pid);
    ${end}
  `;
  const proc = spawn(process.execPath, ["--input-type=module", "-e", code], { stdio: ["ignore", "pipe", "inherit"] });
  const exited = once(proc, "exit");
  let pid = 0;
  for await (const line of createInterface({ input: proc.stdout })) {
    const m = line.match(/^gateway pid (\d+)$/);
    if (m) {
      pid = Number(m[1]);
      break;
    }
  }
  assert.ok(pid > 0, "the test process printed its gateway's pid");
  return { proc, pid, exited };
}

async function assertGone(pid) {
  const deadline = Date.now() + HANG_MS;
  while (running(pid)) {
    if (Date.now() > deadline) {
      process.kill(pid, "SIGKILL");
      assert.fail(`gateway pid ${pid} still runs after its test process ended`);
    }
    await new Promise((r) => setTimeout(r, 20));
  }
}

test("a test process that fails (exits 1) leaves no gateway running", { skip: process.platform !== "linux" && "reads /proc" }, async () => {
  const { pid, exited } = await orphanedGateway(`setTimeout(() => { throw new Error("a failed test"); }, 0);`);
  const [code] = await exited;
  assert.notEqual(code, 0);
  await assertGone(pid);
});

test("a test process killed with SIGKILL leaves no gateway running", { skip: process.platform !== "linux" && "reads /proc; pdeathsig is Linux" }, async () => {
  const { proc, pid, exited } = await orphanedGateway(`setInterval(() => {}, 1000);`);
  assert.ok(running(pid), `gateway pid ${pid} runs while its test process lives`);
  proc.kill("SIGKILL");
  await exited;
  await assertGone(pid);
});
