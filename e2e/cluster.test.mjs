// Three gateway processes in cluster mode (one Postgres schema, the Redis and NATS
// servers, one unique CLUSTER name) driven by the official phoenix client: a socket on
// node A observes a session owned by node B while events are posted on B and on C
// (forwarded to B); a client on C that comes back mid-turn with its last seen event
// gets replay then live with no gap and no duplicate; a late joiner on the owner
// replays exactly what A saw live.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { cursorOf } from "../web/src/lib/events.js";
import { join, openSocket, recordEvents, untilTurnEnds } from "./client.mjs";
import { nodeInfo, startCluster, waitClusterReady } from "./cluster.mjs";
import { dump, uniqueId } from "./gateway.mjs";
import { dropSchemas } from "./stores.mjs";

const FROM_START = { last_event: { epoch: 0, seq: 0 } };
const WORDS = 60; // the echo agent streams one delta per word, ECHO_DELAY apart

/** @type {import("./gateway.mjs").Gateway[]} */
let gws = [];
let a, b, c;

before(async () => {
  gws = await startCluster(3);
  [a, b, c] = gws;
  await waitClusterReady(gws);
});
after(async () => {
  await Promise.all(gws.map((gw) => gw.stop()));
  dropSchemas();
});

function getSession(gw, id) {
  return gw.request(`/api/sessions/${id}`, { headers: { Authorization: `Bearer ${gw.apiKey}` } });
}

function adminSessions(gw) {
  return gw.request("/admin/sessions", { headers: { Authorization: `Bearer ${gw.adminToken}` } });
}

/** Fails unless every event's seq is the previous one's plus one, in one epoch. */
function assertContiguous(events, what) {
  for (let i = 1; i < events.length; i++) {
    const p = cursorOf(events[i - 1].payload);
    const q = cursorOf(events[i].payload);
    assert.ok(q.epoch === p.epoch && q.seq === p.seq + 1, `${what}: e${p.epoch}·${p.seq} then e${q.epoch}·${q.seq} at ${i}`);
  }
}

const seqs = (events) => events.map((e) => e.payload.seq);

/** Runs fn; on failure prints every node's last log lines, then fails. */
function withLogs(fn) {
  return async (t) => {
    try {
      await fn(t);
    } catch (err) {
      for (const gw of gws) console.error(`--- ${gw.nodeName}\n${dump(gw.logs)}`);
      throw err;
    }
  };
}

test("observe from anywhere: three processes, owner B, posts on B and C, a mid-turn rejoin on C", withLogs(async (t) => {
  const id = uniqueId("s1-");
  const topic = `session:${id}`;

  // A's observer joins before anything happened.
  const sa = await openSocket(t, a);
  const cha = sa.channel(topic, {});
  const ea = recordEvents(cha, `observer on ${a.nodeName}`);
  const ja = await join(cha);
  assert.equal(ja.status, "ok", JSON.stringify(ja));
  assert.equal(ja.response.node, a.nodeName);

  // A first client on C watches turn 1 live, then goes away (a page reload).
  const sc1 = await openSocket(t, c);
  const chc1 = sc1.channel(topic, {});
  const ec1 = recordEvents(chc1, `first client on ${c.nodeName}`);
  assert.equal((await join(chc1)).status, "ok");

  // Turn 1, posted on B: B claims the session and runs it.
  const r1 = await b.postEvent(id, { type: "message", data: { text: "owned by b" } });
  assert.equal(r1.status, 202, JSON.stringify(r1.body));
  const turn1 = await untilTurnEnds(ea);
  assert.match(turn1.map((e) => e.type).join(" "), /^user_event turn_started( delta){3} message turn_completed$/);
  assert.deepEqual((await untilTurnEnds(ec1)).map((e) => e.payload), turn1.map((e) => e.payload));
  for (const gw of gws) {
    const v = await getSession(gw, id);
    assert.equal(v.status, 200, JSON.stringify(v.body));
    assert.ok(String(v.body.owner).startsWith(`${b.nodeName}/`), `${gw.nodeName} sees owner ${v.body.owner}, want node B`);
  }
  const lastSeenOnC = cursorOf(turn1.at(-1).payload);
  sc1.disconnect();

  // Turn 2, posted on C: forwarded to B, the owner, at B's epoch.
  const text = Array.from({ length: WORDS }, (_, i) => `w${i}`).join(" ");
  const r2 = await c.postEvent(id, { type: "message", data: { text } });
  assert.equal(r2.status, 202, JSON.stringify(r2.body));
  assert.equal(r2.body.epoch, turn1[0].payload.epoch, "the forwarded event runs under B's lease");
  assert.deepEqual((await adminSessions(c)).body.sessions, [], "C runs no session");
  assert.equal((await adminSessions(b)).body.sessions.length, 1, "B runs the session");

  // Mid-turn (A has seen a few deltas), the client on C comes back with its cursor.
  await ea.until((items) => items.filter((e, i) => i >= turn1.length && e.type === "delta").length >= 3, "3 deltas of turn 2");
  const sc2 = await openSocket(t, c);
  const chc2 = sc2.channel(topic, { last_event: lastSeenOnC });
  const ec2 = recordEvents(chc2, `returning client on ${c.nodeName}`);
  const jc2 = await join(chc2);
  assert.equal(jc2.status, "ok", JSON.stringify(jc2));
  assert.equal(jc2.response.recovered, true, JSON.stringify(jc2.response));
  assert.equal(jc2.response.node, c.nodeName);
  assert.ok(String(jc2.response.owner).startsWith(`${b.nodeName}/`), `join reply owner ${jc2.response.owner}`);

  const all = await untilTurnEnds(ea, turn1.length);
  const turn2 = all.slice(turn1.length);
  const back = await untilTurnEnds(ec2);

  // A got every event of both turns, in seq order, none missing.
  assertContiguous(all, `observer on A`);
  assert.equal(turn2.filter((e) => e.type === "delta").length, WORDS);
  assert.equal(turn2[0].type, "user_event");

  // C: replay then live, together exactly A's events after C's cursor.
  assert.ok(jc2.response.replayed >= 1 && jc2.response.replayed < turn2.length, `replayed ${jc2.response.replayed} of ${turn2.length}: the join landed mid-turn`);
  assert.deepEqual(seqs(back), seqs(turn2), "returning client on C: no gap, no duplicate");
  assert.deepEqual(back.map((e) => e.payload), turn2.map((e) => e.payload));

  // A late joiner on the owner replays exactly what A saw live.
  const sb = await openSocket(t, b);
  const chb = sb.channel(topic, FROM_START);
  const eb = recordEvents(chb, `late joiner on ${b.nodeName}`);
  const jb = await join(chb);
  assert.equal(jb.status, "ok");
  assert.equal(jb.response.replayed, all.length);
  const replay = await eb.until((items) => items.length >= all.length && items, `${all.length} replayed events`);
  assert.deepEqual(replay.map((e) => e.payload), all.map((e) => e.payload));

  // The cluster is still one ready view.
  const infos = await Promise.all(gws.map(nodeInfo));
  assert.ok(infos.every((i) => i.cluster.status === "ready"), JSON.stringify(infos.map((i) => i.cluster)));
}));

/** GET /admin/viewers of gw: {node, local, cluster, peers}. */
async function viewers(gw) {
  const res = await gw.request("/admin/viewers", { headers: { Authorization: `Bearer ${gw.adminToken}` } });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body;
}

/**
 * Polls every node's /admin/viewers until topic's cluster-wide count is want on all of
 * them (counts cross the process boundary only every CENSUS_INTERVAL), then returns them.
 */
async function untilViewers(topic, want, ms = 10_000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const all = await Promise.all(gws.map(viewers));
    if (all.every((v) => v.cluster[topic] === want)) return all;
    if (Date.now() > deadline) throw new Error(`viewers of ${topic} never reached ${want}: ${JSON.stringify(all)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

test("viewers: /admin/viewers on every node counts the sockets of all three processes", withLogs(async (t) => {
  const topic = `session:${uniqueId("v-")}`;
  const sockets = [await openSocket(t, a), await openSocket(t, a), await openSocket(t, c)];
  for (const s of sockets) assert.equal((await join(s.channel(topic, {}))).status, "ok");

  const all = await untilViewers(topic, 3);
  const byNode = Object.fromEntries(all.map((v) => [v.node, v]));
  assert.equal(byNode[a.nodeName].local[topic], 2);
  assert.equal(byNode[b.nodeName].local[topic], undefined);
  assert.equal(byNode[c.nodeName].local[topic], 1);
  for (const v of all) assert.deepEqual([...v.peers].sort(), gws.map((gw) => gw.nodeName).filter((n) => n !== v.node).sort());

  // The socket on C goes away (a closed tab): every node drops it.
  sockets[2].disconnect();
  await untilViewers(topic, 2);
}));

test("interrupt: raised on the owner, answered by a client on another node, continuation runs, replayed to a late joiner", withLogs(async (t) => {
  const id = uniqueId("ask-");
  const topic = `session:${id}`;
  const sa = await openSocket(t, a);
  const cha = sa.channel(topic, FROM_START);
  const ea = recordEvents(cha, `watcher on ${a.nodeName}`);
  assert.equal((await join(cha)).status, "ok");

  const asked = await b.postEvent(id, { data: { text: "ship it", ask: true } });
  assert.equal(asked.status, 202, JSON.stringify(asked.body));
  const iv = await ea.until((items) => items.find((e) => e.type === "interrupt"), "interrupt");
  const turn = `${asked.body.epoch}-${asked.body.seq}`;
  assert.equal(iv.payload.data.id, `ask-${turn}`);
  assert.equal(iv.payload.data.kind, "approval");
  assert.deepEqual(iv.payload.data.payload.choices, ["approve", "deny"]);

  // A second client, on C, answers by push.
  const sc = await openSocket(t, c);
  const chc = sc.channel(topic, {});
  assert.equal((await join(chc)).status, "ok");
  const answer = await new Promise((resolve) => {
    chc.push("resume", { interrupt: iv.payload.data.id, value: "approve" })
      .receive("ok", (r) => resolve({ status: "ok", r }))
      .receive("error", (r) => resolve({ status: "error", r }))
      .receive("timeout", () => resolve({ status: "timeout" }));
  });
  assert.equal(answer.status, "ok", JSON.stringify(answer.r));
  const events = await ea.until((items) => (items.some((e) => e.type === "turn_completed") ? items : null), "continuation's turn_completed");
  assert.equal(
    events.map((e) => e.type).join(" "),
    "user_event turn_started interrupt user_event turn_started delta delta message turn_completed",
  );
  assert.deepEqual(events[3].payload.data, { type: "resume", data: { interrupt: iv.payload.data.id, value: "approve" } });
  assert.equal(events.find((e) => e.type === "message").payload.data.content, "ship it");

  // A second answer, through A, is refused.
  const late = await a.request(`/api/sessions/${id}/interrupts/${iv.payload.data.id}`, {
    method: "POST",
    headers: { Authorization: `Bearer ${a.apiKey}`, "Content-Type": "application/json" },
    body: JSON.stringify({ value: "deny" }),
  });
  assert.equal(late.status, 409, JSON.stringify(late.body));
  assert.equal(late.body.error, "interrupt_answered");

  // A late joiner on C replays the interrupt and its answer.
  const sl = await openSocket(t, c);
  const chl = sl.channel(topic, FROM_START);
  const el = recordEvents(chl, "late joiner");
  assert.equal((await join(chl)).status, "ok");
  const replayed = await el.until((items) => (items.some((e) => e.type === "turn_completed") ? items : null), "replayed turn_completed");
  assert.deepEqual(replayed.map((e) => e.type), events.map((e) => e.type));
}));
