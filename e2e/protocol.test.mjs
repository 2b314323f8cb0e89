// Raw V2 protocol edges over a plain `ws` socket: malformed frames, oversize frames,
// unknown events, bad join payloads and versions. Each misbehaving socket gets the
// documented answer (close 1007 "malformed frame", close 1009 "frame too big", or an
// error reply) and a bystander socket keeps working throughout.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { rawSocket, tryUpgrade } from "./client.mjs";
import { startGateway, uniqueId } from "./gateway.mjs";

const MAX_FRAME_BYTES = 8192;

/** @type {import("./gateway.mjs").Gateway} */
let gw;
before(async () => {
  gw = await startGateway({ MAX_FRAME_BYTES: String(MAX_FRAME_BYTES) });
});
after(() => gw && gw.stop());

let refs = 0;

/** Asserts the raw socket still answers heartbeats and joins a session. */
async function assertAlive(raw, label) {
  const hb = `hb-${++refs}`;
  raw.send([null, hb, "phoenix", "heartbeat", {}]);
  const reply = await raw.reply(hb, `${label}: heartbeat reply`);
  assert.deepEqual(reply[4], { status: "ok", response: {} }, label);
  const j = `j-${++refs}`;
  raw.send([j, j, `session:${uniqueId("alive-")}`, "phx_join", {}]);
  assert.equal((await raw.reply(j, `${label}: join reply`))[4].status, "ok", label);
}

test("malformed frames close that socket with 1007 and leave others alone", async (t) => {
  const bystander = await rawSocket(t, gw);
  await assertAlive(bystander, "bystander before");
  const cases = {
    "not JSON": "not json at all",
    "JSON object": JSON.stringify({ topic: "phoenix", event: "heartbeat", payload: {}, ref: "1" }),
    "three elements": JSON.stringify(["1", "1", "phoenix"]),
    "four elements": JSON.stringify([null, "1", "phoenix", "heartbeat"]),
    "numeric topic": JSON.stringify([null, "1", 42, "heartbeat", {}]),
    "null event": JSON.stringify([null, "1", "phoenix", null, {}]),
    "truncated JSON": '[null,"1","phoenix","heartbeat",{',
    "empty frame": "",
  };
  for (const [name, frame] of Object.entries(cases)) {
    const raw = await rawSocket(t, gw);
    raw.send(frame);
    const closed = await raw.closed;
    assert.equal(closed.code, 1007, `${name}: close code (reason ${JSON.stringify(closed.reason)})`);
    const replies = raw.frames.items.filter((f) => Array.isArray(f));
    assert.deepEqual(replies, [], `${name}: no reply before the close`);
  }
  await assertAlive(bystander, "bystander after malformed frames");
});

test("a frame over MAX_FRAME_BYTES closes that socket with 1009; one under it is served", async (t) => {
  const bystander = await rawSocket(t, gw);
  const raw = await rawSocket(t, gw);
  // Just under the limit: a heartbeat padded to ~MAX_FRAME_BYTES - 200 bytes.
  raw.send([null, "small", "phoenix", "heartbeat", { pad: "x".repeat(MAX_FRAME_BYTES - 200) }]);
  assert.equal((await raw.reply("small"))[4].status, "ok");
  // Over it.
  raw.send([null, "big", "phoenix", "heartbeat", { pad: "x".repeat(MAX_FRAME_BYTES + 100) }]);
  const closed = await raw.closed;
  assert.equal(closed.code, 1009, `close code (reason ${JSON.stringify(closed.reason)})`);
  assert.ok(!raw.frames.items.some((f) => Array.isArray(f) && f[1] === "big"), "the oversize frame is not answered");
  await assertAlive(bystander, "bystander after an oversize frame");
});

test("unknown events get error replies and the socket stays open", async (t) => {
  const raw = await rawSocket(t, gw);
  const topic = `session:${uniqueId("unk-")}`;
  raw.send(["1", "1", topic, "phx_join", {}]);
  assert.equal((await raw.reply("1"))[4].status, "ok");

  // On the joined session channel: the channel refuses it.
  raw.send(["1", "2", topic, "frobnicate", {}]);
  const joined = await raw.reply("2");
  assert.equal(joined[0], "1", "reply carries the channel's join_ref");
  assert.equal(joined[4].status, "error");
  assert.equal(joined[4].response.reason, "unknown_event", JSON.stringify(joined));

  // On a topic this socket has not joined: Phoenix's "unmatched topic", join_ref null.
  raw.send(["9", "3", `session:${uniqueId("other-")}`, "message", { data: { text: "x" } }]);
  assert.deepEqual((await raw.reply("3"))[4], { status: "error", response: { reason: "unmatched topic" } });
  const unmatched = raw.frames.items.find((f) => f[1] === "3");
  assert.equal(unmatched[0], null);

  // A non-heartbeat event on topic phoenix is an unjoined topic too.
  raw.send([null, "4", "phoenix", "shutdown", {}]);
  assert.deepEqual((await raw.reply("4"))[4], { status: "error", response: { reason: "unmatched topic" } });

  await assertAlive(raw, "socket after unknown events");
});

test("bad join payloads and a stale join_ref are handled without dropping the socket", async (t) => {
  const raw = await rawSocket(t, gw);
  const topic = `session:${uniqueId("badjoin-")}`;
  raw.send(["1", "1", topic, "phx_join", { last_event: "yesterday" }]);
  const r1 = await raw.reply("1");
  assert.equal(r1[4].status, "error", JSON.stringify(r1));
  assert.equal(r1[4].response.reason, "invalid_body");

  // After a refused join the topic is not joined.
  raw.send(["1", "2", topic, "message", { data: { text: "x" } }]);
  assert.equal((await raw.reply("2"))[4].response.reason, "unmatched topic");

  // Join properly, rejoin with a new join_ref; a push with the old join_ref is dropped,
  // one with the current join_ref is answered.
  raw.send(["3", "3", topic, "phx_join", {}]);
  assert.equal((await raw.reply("3"))[4].status, "ok");
  raw.send(["5", "5", topic, "phx_join", {}]);
  assert.equal((await raw.reply("5"))[4].status, "ok");
  raw.send(["3", "6", topic, "frobnicate", {}]);
  raw.send(["5", "7", topic, "frobnicate", {}]);
  assert.equal((await raw.reply("7"))[4].response.reason, "unknown_event");
  assert.ok(!raw.frames.items.some((f) => f[1] === "6"), "the stale join_ref push got no reply before a later one");
  await assertAlive(raw, "socket after bad joins");
});

test("binary frames: a binary push to a session channel is refused with a reply", async (t) => {
  const raw = await rawSocket(t, gw);
  const topic = `session:${uniqueId("bin-")}`;
  raw.send(["1", "1", topic, "phx_join", {}]);
  assert.equal((await raw.reply("1"))[4].status, "ok");
  // kind 0 push: join_ref "1", ref "2", topic, event "message", payload 0x01 0x02.
  const parts = [Buffer.from("1"), Buffer.from("2"), Buffer.from(topic), Buffer.from("message")];
  const frame = Buffer.concat([Buffer.from([0, ...parts.map((p) => p.length)]), ...parts, Buffer.from([1, 2])]);
  raw.ws.send(frame, { binary: true });
  const reply = await raw.reply("2");
  assert.equal(reply[4].status, "error");
  assert.equal(reply[4].response.reason, "binary payload not supported");
  await assertAlive(raw, "socket after a binary push");
});

test("upgrade refusals: an unknown serializer version is refused before the upgrade", async () => {
  const token = encodeURIComponent(gw.token());
  assert.deepEqual(await tryUpgrade(`${gw.wsURL}/socket/websocket?token=${token}&vsn=3.0.0`), { opened: false, status: 403 });
  assert.deepEqual(await tryUpgrade(`${gw.wsURL}/socket/websocket?token=${token}&vsn=2.0.0`), { opened: true });
});
