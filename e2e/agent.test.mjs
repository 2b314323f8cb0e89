// The HTTP agent backend end to end: two cluster-mode gateways with AGENT=http in front of
// examples/agent-node (the protocol of docs/AGENT_PROTOCOL.md, in this process), driven
// by the official phoenix client. A POSTed event and a channel push each stream the agent's
// tool_call, tool_result, deltas and final message to sockets on both nodes, in order; the
// agent sees valid signatures and the stable turn id. Draining the owner mid-turn closes the
// agent's request, and the other node resumes the turn (same turn id, attempt 2).
import assert from "node:assert/strict";
import { once } from "node:events";
import { after, before, test } from "node:test";
import { createAgent, sign, verify } from "../examples/agent-node/agent.mjs";
import { Inbox, join, openSocket, push, recordEvents, untilTurnEnds } from "./client.mjs";
import { startCluster, waitClusterReady } from "./cluster.mjs";
import { dump, freePort, startGateway, uniqueId } from "./gateway.mjs";
import { dropSchemas } from "./stores.mjs";

const SECRET = `agent-${uniqueId("")}`;

/** An example agent on a free port; turns and closes are recorded in Inboxes. */
async function startAgent(opts = {}) {
  const turns = new Inbox("agent requests");
  const closes = new Inbox("agent requests closed by relay");
  const server = createAgent({ secret: SECRET, onTurn: (t) => turns.push(t), onClose: (c) => closes.push(c), ...opts });
  const port = await freePort();
  server.listen(port, "127.0.0.1");
  await once(server, "listening");
  return {
    url: `http://127.0.0.1:${port}/`,
    turns,
    closes,
    stop: () => new Promise((r) => server.close(r)),
    server,
  };
}

/** Records the session events and the agent's own types (tool_call, tool_result). */
function record(channel, name) {
  const inbox = recordEvents(channel, name);
  for (const type of ["tool_call", "tool_result"]) channel.on(type, (payload) => inbox.push({ type, payload }));
  return inbox;
}

let agent, slowAgent;
let gws = [];

before(async () => {
  agent = await startAgent();
  slowAgent = await startAgent({ delayMs: 100 });
  gws = await startCluster(2, {
    AGENT: "http",
    AGENT_URL: agent.url,
    AGENT_SECRET: SECRET,
    AGENT_ROUTES: `slow-=${slowAgent.url}`,
    DRAIN_WINDOW: "1s",
  });
  await waitClusterReady(gws);
});
after(async () => {
  await Promise.all(gws.map((gw) => gw.stop()));
  for (const a of [agent, slowAgent]) {
    a.server.closeAllConnections();
    await a.stop();
  }
  dropSchemas();
});

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

/** The events of one turn the example agent streams for text, in order. */
function expectedTurn(text) {
  const words = `You said: ${text}`.split(" ");
  return ["user_event", "turn_started", "tool_call", "tool_result", ...words.map(() => "delta"), "message", "turn_completed"];
}

test("AGENT=http: a POSTed event and a channel push stream the agent's events to sockets on two nodes", withLogs(async (t) => {
  const [a, b] = gws;
  const id = uniqueId("chat-");
  const topic = `session:${id}`;
  const sa = await openSocket(t, a);
  const sb = await openSocket(t, b);
  const cha = sa.channel(topic, {});
  const chb = sb.channel(topic, {});
  const ea = record(cha, `socket on ${a.nodeName}`);
  const eb = record(chb, `socket on ${b.nodeName}`);
  assert.equal((await join(cha)).status, "ok");
  assert.equal((await join(chb)).status, "ok");

  // Turn 1: POSTed on node A.
  const r1 = await a.postEvent(id, { type: "user_message", data: { text: "hello over http" } });
  assert.equal(r1.status, 202, JSON.stringify(r1.body));
  const turn1 = await untilTurnEnds(ea);
  assert.deepEqual(turn1.map((e) => e.type), expectedTurn("hello over http"));
  assert.deepEqual((await untilTurnEnds(eb)).map((e) => e.payload), turn1.map((e) => e.payload), "both nodes, same events, same order");
  const call = turn1.find((e) => e.type === "tool_call").payload.data;
  assert.deepEqual({ name: call.name, input: call.input }, { name: "word_count", input: { text: "hello over http" } });
  assert.deepEqual(turn1.find((e) => e.type === "tool_result").payload.data.output, { words: 3 });
  assert.equal(turn1.at(-2).payload.data.content, "You said: hello over http ");
  const deltas = turn1.filter((e) => e.type === "delta").map((e) => e.payload.data.text).join("");
  assert.equal(deltas, "You said: hello over http ");

  // Turn 2: a channel push on node B.
  const pr = await push(chb, "message", { data: { text: "and over a socket" } });
  assert.equal(pr.status, "ok", JSON.stringify(pr));
  const all = await untilTurnEnds(eb, turn1.length);
  const turn2 = all.slice(turn1.length);
  assert.deepEqual(turn2.map((e) => e.type), expectedTurn("and over a socket"));
  assert.deepEqual((await untilTurnEnds(ea, turn1.length)).map((e) => e.payload), all.map((e) => e.payload));
  for (let i = 1; i < all.length; i++) {
    assert.equal(all[i].payload.seq, all[i - 1].payload.seq + 1, "contiguous seqs");
  }

  // The agent saw two signed requests, each with its input's position as the turn id.
  const reqs = agent.turns.items.filter((r) => r.request?.session === id);
  assert.equal(reqs.length, 2, JSON.stringify(reqs));
  for (const [i, turn] of [turn1, turn2].entries()) {
    const ue = turn[0].payload;
    const want = `${ue.epoch}-${ue.seq}`;
    assert.equal(reqs[i].signature, null, "a valid signature");
    assert.equal(reqs[i].request.turn, want);
    assert.equal(reqs[i].idempotencyKey, `${id}:${want}`);
    assert.equal(reqs[i].request.attempt, 1);
  }
  assert.deepEqual(reqs[1].request.history, [
    { role: "user", content: "hello over http" },
    { role: "assistant", content: "You said: hello over http " },
  ]);
}));

test("AGENT=http: draining the owner mid-turn closes the agent's request; the other node resumes the turn", withLogs(async (t) => {
  const [a, b] = gws;
  const id = uniqueId("slow-"); // AGENT_ROUTES: the slow agent
  const topic = `session:${id}`;
  const sb = await openSocket(t, b);
  const chb = sb.channel(topic, {});
  const eb = record(chb, `socket on ${b.nodeName}`);
  assert.equal((await join(chb)).status, "ok");

  const text = Array.from({ length: 40 }, (_, i) => `w${i}`).join(" ");
  const r1 = await a.postEvent(id, { type: "user_message", data: { text } });
  assert.equal(r1.status, 202, JSON.stringify(r1.body));
  await eb.until((items) => items.filter((e) => e.type === "delta").length >= 2, "2 deltas");

  await a.stop(); // SIGTERM: drain; the turn outlives the window and is handed over
  const closed = await slowAgent.closes.until((items) => items.find((c) => c.request.session === id), "the request closed");
  const turnID = `${r1.body.epoch}-${r1.body.seq}`;
  assert.equal(closed.request.turn, turnID);

  // The next event on B claims the session; B resumes the unfinished turn first.
  const r2 = await b.postEvent(id, { type: "user_message", data: { text: "next" } });
  assert.equal(r2.status, 202, JSON.stringify(r2.body));
  const resumed = await slowAgent.turns.until(
    (items) => items.find((r) => r.request?.session === id && r.request.attempt === 2),
    "the resumed request",
    30_000,
  );
  assert.equal(resumed.request.turn, turnID);
  assert.equal(resumed.signature, null);
  assert.equal(resumed.idempotencyKey, `${id}:${turnID}`);
  assert.ok(resumed.request.resume && resumed.request.resume.text.startsWith("You said: w0"), JSON.stringify(resumed.request.resume));

  const events = await eb.until((items) => items.filter((e) => e.type === "turn_completed").length >= 2 && items, "two turns", 30_000);
  const firstMsg = events.find((e) => e.type === "message").payload.data.content;
  assert.equal(firstMsg, `You said: ${text} `, "the resumed turn's message is the whole reply");
  const words = events
    .slice(0, events.findIndex((e) => e.type === "message"))
    .filter((e) => e.type === "delta")
    .map((e) => e.payload.data.text)
    .join("");
  assert.equal(words, `You said: ${text} `, "every word streamed once across both owners");
  gws = gws.filter((gw) => gw !== a);
}));

test("AGENT=http with the wrong AGENT_SECRET: the agent refuses the signature and the turn fails", async (t) => {
  const gw = await startGateway({ AGENT: "http", AGENT_URL: agent.url, AGENT_SECRET: "not-the-secret" });
  t.after(() => gw.stop());
  const id = uniqueId("bad-");
  const s = await openSocket(t, gw);
  const ch = s.channel(`session:${id}`, {});
  const ev = record(ch, "socket");
  assert.equal((await join(ch)).status, "ok");
  assert.equal((await gw.postEvent(id, { type: "user_message", data: { text: "hi" } })).status, 202);
  const turn = await untilTurnEnds(ev);
  assert.deepEqual(turn.map((e) => e.type), ["user_event", "turn_started", "turn_failed"]);
  assert.match(turn.at(-1).payload.data.error, /401 Unauthorized: Relay-Signature does not match/);
  const seen = agent.turns.items.find((r) => r.request?.session === id);
  assert.equal(seen.signature, "Relay-Signature does not match");
});

test("the example agent signs and verifies as docs/AGENT_PROTOCOL.md shows", () => {
  const body = Buffer.from('{"a":1}');
  const sig = sign("my-agent-secret", "1764590400", body);
  assert.equal(sig, "v1=f874c31f595ac18643d39228e9950972ac6a5de83f4f59248f46aa23fdce4287");
  const headers = { "relay-timestamp": "1764590400", "relay-signature": sig };
  assert.equal(verify("my-agent-secret", headers, body, 1764590400 + 60), null);
  assert.match(verify("my-agent-secret", headers, body, 1764590400 + 301), /replay window/);
  assert.match(verify("other", headers, body, 1764590400), /does not match/);
  assert.match(verify("my-agent-secret", headers, Buffer.from('{"a":2}'), 1764590400), /does not match/);
  assert.match(verify("my-agent-secret", { "relay-signature": sig }, body), /Relay-Timestamp/);
});
