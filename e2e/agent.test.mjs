// The HTTP agent backend end to end: two cluster-mode gateways with AGENT=http in front of
// examples/agent-node (the protocol of docs/AGENT_PROTOCOL.md, in this process), driven
// by the official phoenix client. A POSTed event and a channel push each stream the agent's
// tool_call, tool_result, deltas and final message to sockets on both nodes, in order; the
// agent sees valid signatures and the stable turn id. Draining the owner mid-turn closes the
// agent's request, and the other node resumes the turn (same turn id, attempt 2). Turn
// control: a stop closes the agent's request and the next request's history holds the
// partial reply marked stopped; an agent's interrupt is shown to clients, answered by a push
// `resume`, and the continuation request carries the answer.
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

let agent, slowAgent, holdAgent;
let gws = [];

before(async () => {
  agent = await startAgent();
  slowAgent = await startAgent({ delayMs: 100 });
  // An hour between words: a turn streams its first word, then runs until it is stopped.
  holdAgent = await startAgent({ delayMs: 3_600_000 });
  gws = await startCluster(2, {
    AGENT: "http",
    AGENT_URL: agent.url,
    AGENT_SECRET: SECRET,
    AGENT_ROUTES: `slow-=${slowAgent.url},hold-=${holdAgent.url}`,
    DRAIN_WINDOW: "1s",
  });
  await waitClusterReady(gws);
});
after(async () => {
  await Promise.all(gws.map((gw) => gw.stop()));
  for (const a of [agent, slowAgent, holdAgent]) {
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

test("AGENT=http: a stop mid-turn closes the agent's request; clients get turn_stopped; the next request's history has the partial reply", withLogs(async (t) => {
  const [a, b] = gws;
  const id = uniqueId("hold-"); // AGENT_ROUTES: the holding agent
  const sb = await openSocket(t, b);
  const chb = sb.channel(`session:${id}`, {});
  const eb = record(chb, `socket on ${b.nodeName}`);
  assert.equal((await join(chb)).status, "ok");

  const r1 = await a.postEvent(id, { type: "user_message", data: { text: "stop me please" } });
  assert.equal(r1.status, 202, JSON.stringify(r1.body));
  const turn = `${r1.body.epoch}-${r1.body.seq}`;
  await eb.until((items) => items.find((e) => e.type === "delta"), "the first delta");

  // Stop by push on B (the owner is whichever node took the session; the stop is routed).
  const stopped = await push(chb, "stop", { turn });
  assert.equal(stopped.status, "ok", JSON.stringify(stopped.response));
  assert.deepEqual(stopped.response, { stopped: true, turn });
  const events = await untilTurnEnds(eb);
  assert.deepEqual(events.map((e) => e.type), ["user_event", "turn_started", "tool_call", "tool_result", "delta", "turn_stopped"]);
  assert.equal(events.at(-1).payload.data.partial, "You ");
  const closed = await holdAgent.closes.until((items) => items.find((c) => c.request.session === id), "the agent's request closed");
  assert.equal(closed.request.turn, turn);

  // The next request tells the agent its turn was stopped.
  const r2 = await b.postEvent(id, { type: "user_message", data: { text: "again" } });
  assert.equal(r2.status, 202, JSON.stringify(r2.body));
  const turn2 = `${r2.body.epoch}-${r2.body.seq}`;
  const next = await holdAgent.turns.until((items) => items.find((r) => r.request?.session === id && r.request.turn === turn2), "the next request");
  assert.deepEqual(next.request.history, [
    { role: "user", content: "stop me please" },
    { role: "assistant", content: "You ", stopped: true },
  ]);
  await eb.until((items) => items.filter((e) => e.type === "delta").length >= 2, "the next turn's first delta");
  // Stopped over HTTP, through A.
  const res = await a.request(`/api/sessions/${encodeURIComponent(id)}/turns/${turn2}/stop`, {
    method: "POST",
    headers: { Authorization: `Bearer ${a.apiKey}` },
  });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  assert.deepEqual(res.body, { stopped: true, turn: turn2 });
  await holdAgent.closes.until((items) => items.find((c) => c.request.session === id && c.request.turn === turn2), "the next request closed");
  assert.equal((await untilTurnEnds(eb, events.length)).at(-1).type, "turn_stopped");
}));

test("AGENT=http: the agent asks; clients see the interrupt; a push resume answers; the continuation request carries the value and streams", withLogs(async (t) => {
  const [a, b] = gws;
  const id = uniqueId("chat-");
  const sb = await openSocket(t, b);
  const chb = sb.channel(`session:${id}`, {});
  const eb = record(chb, `socket on ${b.nodeName}`);
  assert.equal((await join(chb)).status, "ok");

  const r1 = await a.postEvent(id, { type: "user_message", data: { text: "ship it", ask: true } });
  assert.equal(r1.status, 202, JSON.stringify(r1.body));
  const turn = `${r1.body.epoch}-${r1.body.seq}`;
  const iv = (await eb.until((items) => items.find((e) => e.type === "interrupt"), "the interrupt")).payload.data;
  const payload = { question: "Stream this reply?", choices: ["approve", "deny"], text: "ship it" };
  assert.deepEqual(iv, { id: `ask-${turn}`, kind: "approval", payload, turn: { epoch: r1.body.epoch, seq: r1.body.seq } });

  const answered = await push(chb, "resume", { interrupt: iv.id, value: "approve" });
  assert.equal(answered.status, "ok", JSON.stringify(answered.response));
  const events = await eb.until((items) => (items.some((e) => e.type === "turn_completed") ? items : null), "the continuation's turn_completed");
  assert.equal(
    events.map((e) => e.type).join(" "),
    "user_event turn_started interrupt user_event turn_started delta delta delta delta message turn_completed",
  );
  assert.equal(events.find((e) => e.type === "message").payload.data.content, "You said: ship it ");

  const reqs = agent.turns.items.filter((r) => r.request?.session === id);
  assert.equal(reqs.length, 2, JSON.stringify(reqs));
  assert.equal(reqs[0].request.answer, undefined);
  const cont = reqs[1].request;
  assert.deepEqual(cont.input, { type: "resume", data: { interrupt: iv.id, value: "approve" } });
  const info = { id: iv.id, kind: "approval", payload, turn };
  assert.deepEqual(cont.answer, { interrupt: info, value: "approve" });
  assert.equal(cont.history.length, 2);
  assert.deepEqual(cont.history[0], { role: "user", content: "ship it" });
  assert.equal(cont.history[1].role, "interrupt");
  assert.deepEqual(cont.history[1].interrupt, info);

  // A second answer is refused; nothing reaches the agent.
  const again = await push(chb, "resume", { interrupt: iv.id, value: "deny" });
  assert.equal(again.status, "error");
  assert.equal(again.response.reason, "interrupt_answered");
  assert.equal(agent.turns.items.filter((r) => r.request?.session === id).length, 2);
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
