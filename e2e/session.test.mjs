// Session turns end to end: events POSTed over HTTP or pushed on the channel stream to
// phoenix clients in (epoch, seq) order; late joiners get replay then live, seamlessly.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { compareCursor, cursorOf, userText } from "../web/src/lib/events.js";
import { EVENT_TYPES, Inbox, join, openSocket, push, recordEvents, untilTurnEnds } from "./client.mjs";
import { startGateway, uniqueId } from "./gateway.mjs";

/** @type {import("./gateway.mjs").Gateway} */
let gw;
before(async () => {
  gw = await startGateway();
});
after(() => gw && gw.stop());

const FROM_START = { last_event: { epoch: 0, seq: 0 } };

/** Asserts the (epoch, seq) of events strictly increase. */
function assertIncreasing(events, label) {
  for (let i = 1; i < events.length; i++) {
    const a = cursorOf(events[i - 1].payload);
    const b = cursorOf(events[i].payload);
    assert.ok(compareCursor(a, b) < 0, `${label}: event ${i} ${JSON.stringify(b)} does not follow ${JSON.stringify(a)}`);
  }
}

/** Asserts one whole turn: user_event, turn_started, delta+, message, turn_completed. */
function assertTurn(events, id, text) {
  const types = events.map((e) => e.type).join(" ");
  assert.match(types, /^user_event turn_started( delta)+ message turn_completed$/, `event types: ${types}`);
  assertIncreasing(events, id);
  for (const { type, payload } of events) {
    assert.equal(payload.session, id);
    assert.equal(payload.type, type, "payload type matches the event name");
    assert.equal(typeof payload.data, "object");
    assert.ok(!Number.isNaN(Date.parse(payload.at)), `"at" is a timestamp: ${payload.at}`);
  }
  assert.equal(userText(events[0].payload.data), text, "user_event carries the posted text");
  const deltas = events.filter((e) => e.type === "delta").map((e) => e.payload.data.text);
  for (const d of deltas) assert.equal(typeof d, "string");
  const message = events.find((e) => e.type === "message").payload.data;
  assert.equal(message.role, "assistant");
  assert.equal(deltas.join("").trim(), message.content.trim(), "the deltas add up to the final message");
  for (const word of text.split(" ")) assert.ok(message.content.includes(word), `echo contains ${word}`);
}

test("a POSTed event produces user_event, turn_started, deltas, message, turn_completed in order", async (t) => {
  const id = uniqueId("post-");
  const socket = await openSocket(t, gw);
  const ch = socket.channel(`session:${id}`, FROM_START);
  const inbox = recordEvents(ch);
  assert.equal((await join(ch)).status, "ok");

  const text = "alpha beta gamma delta";
  const res = await gw.postEvent(id, { type: "message", data: { text }, idempotency_key: `k-${id}` });
  assert.equal(res.status, 202, JSON.stringify(res.body));
  assert.equal(res.body.session, id);
  assert.equal(res.body.duplicate, false);
  const events = await untilTurnEnds(inbox);
  assertTurn(events, id, text);
  assert.deepEqual(cursorOf(events[0].payload), cursorOf(res.body), "the 202 names the user_event's position");

  // The same idempotency key is accepted once.
  const again = await gw.postEvent(id, { type: "message", data: { text }, idempotency_key: `k-${id}` });
  assert.equal(again.status, 202, JSON.stringify(again.body));
  assert.equal(again.body.duplicate, true);

  // The session view reflects the turn.
  const view = await gw.request(`/api/sessions/${id}`, { headers: { Authorization: `Bearer ${gw.apiKey}` } });
  assert.equal(view.status, 200, JSON.stringify(view.body));
  assert.equal(view.body.session, id);
  assert.equal(view.body.node, gw.nodeName);
  assert.ok(view.body.owner, "a session that ran a turn has an owner");
  const last = cursorOf(events.at(-1).payload);
  assert.ok(compareCursor(cursorOf(view.body), last) >= 0, `GET position ${JSON.stringify(view.body)} reaches the last event`);
  const history = view.body.history.map((m) => m.role);
  assert.deepEqual(history, ["user", "assistant"], JSON.stringify(view.body.history));
  assert.equal(view.body.history[0].content, text);
});

test("a second client joining mid-turn with its last event gets replay then live, no gap, no duplicate", async (t) => {
  const id = uniqueId("seam-");
  const a = await openSocket(t, gw);
  const cha = a.channel(`session:${id}`, FROM_START);
  const ea = recordEvents(cha, "client A");
  assert.equal((await join(cha)).status, "ok");

  // A long reply (40 words at ECHO_DELAY 30ms) so the second join lands inside the turn.
  const text = Array.from({ length: 40 }, (_, i) => `w${i}`).join(" ");
  const res = await gw.postEvent(id, { type: "message", data: { text } });
  assert.equal(res.status, 202, JSON.stringify(res.body));

  // B saw events up to A's third delta before it went away (a reload, a second tab).
  const seen = await ea.until((items) => {
    let deltas = 0;
    for (let i = 0; i < items.length; i++) {
      if (items[i].type === "delta" && ++deltas === 3) return items.slice(0, i + 1);
    }
    return null;
  }, "three deltas on A");
  const lastSeen = cursorOf(seen.at(-1).payload);

  const b = await openSocket(t, gw);
  const chb = b.channel(`session:${id}`, { last_event: lastSeen });
  const eb = recordEvents(chb, "client B");
  const jb = await join(chb);
  assert.equal(jb.status, "ok", JSON.stringify(jb));
  assert.equal(jb.response.recovered, true);

  const all = await untilTurnEnds(ea);
  const bAll = await untilTurnEnds(eb);
  assertTurn(all, id, text);
  const expected = all.slice(seen.length);
  assert.deepEqual(
    bAll.map((e) => [e.type, e.payload.epoch, e.payload.seq]),
    expected.map((e) => [e.type, e.payload.epoch, e.payload.seq]),
    "B's events are exactly A's events after B's last seen event",
  );
  assert.deepEqual(bAll.map((e) => e.payload), expected.map((e) => e.payload), "payloads are identical too");
  assert.ok(jb.response.replayed <= bAll.length, "replayed counts events B received");
  assert.ok(jb.response.replayed < bAll.length, `B joined mid-turn and got live events after the replay (replayed ${jb.response.replayed} of ${bAll.length})`);
  assert.deepEqual(
    cursorOf(bAll[jb.response.replayed - 1]?.payload ?? lastSeen),
    cursorOf(jb.response),
    "the join reply's position is the last replayed event",
  );
});

test("a client joining after the turn with {epoch:0, seq:0} replays the whole session", async (t) => {
  const id = uniqueId("late-");
  const a = await openSocket(t, gw);
  const cha = a.channel(`session:${id}`, FROM_START);
  const ea = recordEvents(cha, "client A");
  assert.equal((await join(cha)).status, "ok");
  const res = await gw.postEvent(id, { type: "message", data: { text: "one two three" } });
  assert.equal(res.status, 202, JSON.stringify(res.body));
  const live = await untilTurnEnds(ea);

  const b = await openSocket(t, gw);
  const chb = b.channel(`session:${id}`, FROM_START);
  const eb = recordEvents(chb, "client B");
  const jb = await join(chb);
  assert.equal(jb.status, "ok");
  assert.equal(jb.response.replayed, live.length);
  assert.equal(jb.response.recovered, true);
  assert.deepEqual(cursorOf(jb.response), cursorOf(live.at(-1).payload));
  const replayed = await eb.until((items) => items.length >= live.length && items, `${live.length} replayed events`);
  assert.deepEqual(replayed.map((e) => e.payload), live.map((e) => e.payload));
});

test("a client push of message on the channel starts a turn", async (t) => {
  const id = uniqueId("push-");
  const socket = await openSocket(t, gw);
  const ch = socket.channel(`session:${id}`, FROM_START);
  const inbox = recordEvents(ch);
  assert.equal((await join(ch)).status, "ok");

  const text = "hello world";
  const res = await push(ch, "message", { data: { text }, idempotency_key: `k-${id}` });
  assert.equal(res.status, "ok", JSON.stringify(res));
  assert.equal(res.response.session, id);
  assert.equal(res.response.duplicate, false);
  const events = await untilTurnEnds(inbox);
  assertTurn(events, id, text);
  assert.deepEqual(cursorOf(events[0].payload), cursorOf(res.response));

  const again = await push(ch, "message", { data: { text }, idempotency_key: `k-${id}` });
  assert.equal(again.status, "ok", JSON.stringify(again));
  assert.equal(again.response.duplicate, true);

  const bad = await push(ch, "message", { data: "not an object" });
  assert.equal(bad.status, "error");
  assert.equal(bad.response.reason, "invalid_body", JSON.stringify(bad.response));
});

test("two turns in a row keep one strictly increasing sequence", async (t) => {
  const id = uniqueId("two-");
  const socket = await openSocket(t, gw);
  const ch = socket.channel(`session:${id}`, FROM_START);
  const inbox = recordEvents(ch);
  assert.equal((await join(ch)).status, "ok");
  assert.equal((await push(ch, "message", { data: { text: "first" } })).status, "ok");
  const first = await untilTurnEnds(inbox);
  assert.equal((await gw.postEvent(id, { type: "message", data: { text: "second" } })).status, 202);
  const all = await untilTurnEnds(inbox, first.length);
  assertTurn(all.slice(0, first.length), id, "first");
  assertTurn(all.slice(first.length), id, "second");
  assertIncreasing(all, id);
});

test("a phoenix client that loses its socket mid-turn rejoins from its last event and misses nothing", async (t) => {
  const id = uniqueId("reconnect-");
  const observer = await openSocket(t, gw);
  const och = observer.channel(`session:${id}`, FROM_START);
  const oev = recordEvents(och, "observer");
  assert.equal((await join(och)).status, "ok");

  // The demo page's pattern: join params are re-evaluated on every rejoin.
  let cursor = { epoch: 0, seq: 0 };
  const socket = await openSocket(t, gw, { reconnectAfterMs: () => 50 });
  const ch = socket.channel(`session:${id}`, () => ({ last_event: cursor }));
  const events = recordEvents(ch, "reconnecting client");
  for (const type of EVENT_TYPES) ch.on(type, (p) => (cursor = cursorOf(p)));
  const joins = new Inbox("join replies");
  ch.join().receive("ok", (r) => joins.push(r));
  await joins.until((j) => j.length === 1, "first join");
  const closes = new Inbox("socket closes");
  socket.onClose((e) => closes.push(e.code));

  const text = Array.from({ length: 40 }, (_, i) => `r${i}`).join(" ");
  assert.equal((await gw.postEvent(id, { type: "message", data: { text } })).status, 202);
  await events.until((items) => items.filter((e) => e.type === "delta").length >= 3, "three deltas");
  // A malformed frame makes the server close this socket (1007); the client reconnects.
  socket.conn.send("not a frame");
  const [code] = await closes.until((c) => c.length >= 1 && c, "the server's close");
  assert.equal(code, 1007);
  await joins.until((j) => j.length >= 2, "the rejoin after reconnecting");

  const want = await untilTurnEnds(oev);
  const got = await untilTurnEnds(events);
  assertTurn(want, id, text);
  assert.deepEqual(
    got.map((e) => [e.type, e.payload.seq]),
    want.map((e) => [e.type, e.payload.seq]),
    "the reconnecting client saw every event exactly once",
  );
});
