// Processes a test started, found by an environment marker: every process of a script run
// (the pty's shell, make, the script, setsid, the gateway nodes, a tee) inherits the
// marker from the environment the test gave it, whatever session or process group it moved
// to, so a scan of /proc finds the ones left behind (Linux).
import { spawn } from "node:child_process";
import { once } from "node:events";
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

/**
 * Runs cmd (a bash command line, e.g. a pipeline) on a new pseudo-terminal as a user's
 * terminal would (script -q -f -e -c; output flushed at once): the pipeline is the
 * terminal's foreground job, so \x03 written to it or SIGINT to its group is a Ctrl-C.
 * The shell stays open after the pipeline, printing "pipeline done: make exited N" (the
 * pipeline's first command's status), until its standard input gives a line, so a
 * closed terminal's SIGHUP cannot hide leftovers. Returns {term, text, exited}: text
 * grows with the terminal's output, exited is {code, signal} once the shell ended.
 */
export function terminalPipeline(cmd, { cwd, env }) {
  const shell = `trap : INT; ${cmd}; echo "pipeline done: make exited \${PIPESTATUS[0]}"; read -r _`;
  const term = spawn("script", ["-qfec", shell, "/dev/null"], { cwd, env, detached: true, stdio: ["pipe", "pipe", "pipe"] });
  const run = { term, text: "", exited: null };
  once(term, "exit").then(([code, signal]) => (run.exited = { code, signal }));
  term.stdout.on("data", (d) => (run.text += d));
  term.stderr.on("data", (d) => (run.text += d));
  return run;
}
