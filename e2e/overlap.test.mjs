// Overlapping joins (docs/PHOENIX.md §3.3, §4.4): phoenix.js gives up on a join whose
// reply is late, sends phx_leave and rejoins with a new join_ref. The server then holds
// two joins of one topic in a row on one socket; the new one supersedes the old one
// completely, so the application sees every event exactly once, in order.
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { after, before, test } from "node:test";
import { compareCursor, cursorOf } from "../web/src/lib/events.js";
import { EVENT_TYPES, Inbox, WAIT_MS, openSocket, rawSocket } from "./client.mjs";
import { startGateway, uniqueId } from "./gateway.mjs";

/** @type {import("./gateway.mjs").Gateway} */
let gw;
before(async () => {
  gw = await startGateway({ ECHO_DELAY: "1ms" });
});
after(() => gw && gw.stop());

/** Resolves with p, or rejects with what and state() after WAIT_MS. */
function within(p, what, state) {
  let timer;
  const limit = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${WAIT_MS} ms waiting for ${what}: ${state()}`)), WAIT_MS);
  });
  return Promise.race([p, limit]).finally(() => clearTimeout(timer));
}

/** The state letter of each thread of pid (Linux /proc; "T" or "t" when stopped). */
function threadStates(pid) {
  return readdirSync(`/proc/${pid}/task`).map((tid) => {
    const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, "utf8");
    return stat[stat.lastIndexOf(")") + 2];
  });
}

/** Resolves once every thread of pid is stopped (SIGSTOP acted on). */
async function allStopped(pid) {
  while (!threadStates(pid).every((s) => s === "T" || s === "t")) {
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** Posts n one-word events to session id, one after the other. */
async function postMany(id, prefix, n) {
  for (let i = 1; i <= n; i++) {
    const res = await gw.postEvent(id, { data: { text: `${prefix}${i}` } });
    assert.equal(res.status, 202, JSON.stringify(res.body));
  }
}

test("a join whose reply comes after the client's timeout: the rejoin's replay and live stream reach the application exactly once, in order", async (t) => {
  const id = uniqueId("overlap-");
  await postMany(id, "before", 30); // a replay of ~150 events for a join from the start

  const socket = await openSocket(t, gw);
  // The application: keeps its events and rejoins from the last one it holds.
  const app = new Inbox("application");
  let last = { epoch: 0, seq: 0 };
  const ch = socket.channel(`session:${id}`, () => ({ last_event: last }));
  for (const type of EVENT_TYPES) {
    ch.on(type, (payload) => {
      last = cursorOf(payload);
      app.push({ type, payload });
    });
  }
  // Frames on the wire, to show the old join's frames did reach the client.
  const wire = new Inbox("wire");
  socket.onMessage((m) => wire.push(m));

  // The gateway is stopped, so the first join's reply comes after the client's timeout.
  process.kill(gw.child.pid, "SIGSTOP");
  // kill(2) returns before the signal is acted on: wait until every thread of the
  // gateway shows as stopped, so the join below cannot be answered in time.
  await within(allStopped(gw.child.pid), "the gateway to stop", () => `threads ${JSON.stringify(threadStates(gw.child.pid))}`);
  let resumed = false;
  const resume = () => {
    if (!resumed) {
      resumed = true;
      process.kill(gw.child.pid, "SIGCONT");
    }
  };
  t.after(resume);
  const timedOut = new Promise((resolve) => {
    ch.join(300).receive("timeout", resolve);
  });
  const firstRef = ch.joinPush.ref;
  const state = () => `channel ${ch.state}, last wire frames ${JSON.stringify(wire.items.slice(-5))}`;
  await within(timedOut, "the first join to time out", state);
  ch.timeout = WAIT_MS; // the rejoin gets the usual timeout
  const joined = new Promise((resolve) => ch.joinPush.receive("ok", resolve));
  // Events posted while the first join is pending and after: live on one join or the other.
  const posting = postMany(id, "during", 30);
  resume();
  const reply = await within(joined, "the rejoin's ok reply", state);
  assert.notEqual(ch.joinPush.ref, firstRef, "the rejoin has a new join_ref");
  assert.equal(reply.recovered, true, JSON.stringify(reply));
  await within(posting, "the posts", state);

  const view = await gw.request(`/api/sessions/${id}`, { headers: { Authorization: `Bearer ${gw.apiKey}` } });
  assert.equal(view.status, 200);
  const top = cursorOf(view.body);
  // Every turn ends: wait until the application holds the session's top.
  const events = await app.until(
    (items) => {
      const l = items.at(-1);
      return l && compareCursor(cursorOf(l.payload), top) >= 0 && items;
    },
    `the application to reach ${JSON.stringify(top)}`,
  );
  const seqs = events.map((e) => cursorOf(e.payload));
  for (let i = 0; i < seqs.length; i++) {
    assert.deepEqual(seqs[i], { epoch: top.epoch, seq: i + 1 }, `event ${i}: every event once, in order (got ${JSON.stringify(seqs.slice(Math.max(0, i - 3), i + 3))})`);
  }
  assert.equal(seqs.length, top.seq);
  // Whatever the first join got on the wire before its phx_leave was handled (its
  // reply, part of its replay, live events) carries its join_ref, which the client no
  // longer holds, so none of it reached the application; no session event is sent
  // without a join_ref, which the client would hand to whichever join is current.
  const firstFrames = wire.items.filter((m) => m.join_ref === firstRef);
  assert.ok(firstFrames.length > 0, "the first join's reply reached the socket");
  const bare = wire.items.filter((m) => m.topic === `session:${id}` && m.join_ref == null && EVENT_TYPES.includes(m.event));
  assert.deepEqual(bare, [], "no session event without a join_ref");
});

test("pushes with an abandoned join_ref are refused without a reply and accept nothing", async (t) => {
  const id = uniqueId("oldref-");
  const raw = await rawSocket(t, gw);
  const topic = `session:${id}`;
  raw.send(["1", "1", topic, "phx_join", {}]);
  assert.equal((await raw.reply("1"))[4].status, "ok");
  raw.send(["2", "2", topic, "phx_join", {}]); // a rejoin: "1" is abandoned
  assert.equal((await raw.reply("2"))[4].status, "ok");
  raw.send(["1", "3", topic, "message", { data: { text: "from the old join" } }]);
  raw.send(["2", "4", topic, "message", { data: { text: "from the new join" } }]);
  raw.send([null, "5", "phoenix", "heartbeat", {}]);
  await raw.reply("5");
  // Frames of one socket are handled in order: a reply to "3" would be here by now.
  assert.equal(raw.frames.items.filter((f) => Array.isArray(f) && f[1] === "3").length, 0, "no reply to the old-ref push");
  const ok = raw.frames.items.find((f) => Array.isArray(f) && f[1] === "4");
  assert.equal(ok[4].status, "ok", JSON.stringify(ok));
  assert.equal(ok[0], "2");
  const view = await gw.request(`/api/sessions/${id}`, { headers: { Authorization: `Bearer ${gw.apiKey}` } });
  const texts = [...view.body.history, ...view.body.pending].filter((m) => m.role === "user").map((m) => m.content);
  assert.deepEqual(texts, ["from the new join"]);
});
