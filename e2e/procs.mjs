// Processes a test started, found by an environment marker: every process of a script run
// (the pty's shell, make, the script, setsid, the gateway nodes, a tee) inherits the
// marker from the environment the test gave it, whatever session or process group it moved
// to, so a scan of /proc finds the ones left behind (Linux).
import { readFileSync, readdirSync } from "node:fs";
import { uniqueId } from "./gateway.mjs";

/** A fresh marker: [name, value] to put in a child's environment. */
export function runMarker() {
  return ["RELAY_E2E_RUN", uniqueId("run-")];
}

/** Whether pid runs: it has a /proc entry that is not a zombie (exited, unreaped). */
export function running(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat[stat.lastIndexOf(")") + 2] !== "Z";
  } catch {
    return false;
  }
}

/** "pid command line" of every running (not zombie) process whose environment holds name=value. */
export function processesWith([name, value]) {
  const needle = `${name}=${value}`;
  const found = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    if (!running(entry)) continue;
    try {
      if (!readFileSync(`/proc/${entry}/environ`, "latin1").split("\0").includes(needle)) continue;
      found.push(`${entry} ${readFileSync(`/proc/${entry}/cmdline`, "latin1").split("\0").join(" ").trim()}`);
    } catch {
      // gone meanwhile, or not ours to read
    }
  }
  return found;
}

/** SIGKILLs every process processesWith finds (a failed test's cleanup). */
export function killAllWith(marker) {
  for (const line of processesWith(marker)) {
    try {
      process.kill(Number(line.split(" ")[0]), "SIGKILL");
    } catch {
      // gone
    }
  }
}
