// Turn control end to end with the official phoenix client: a stop (HTTP and channel
// push) ends the running turn with turn_stopped and the partial reply in history; the
// next input runs normally; a stop of a finished or unknown turn is a no-op answer;
// double texting reject and interrupt.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { turnId } from "../web/src/lib/events.js";
import { join, openSocket, push, recordEvents, untilTurnEnds } from "./client.mjs";
import { startGateway, uniqueId } from "./gateway.mjs";

/** @type {import("./gateway.mjs").Gateway} */
let gw;
before(async () => {
  // An hour between echoed words: a turn of two words or more streams its first
  // word and then runs until it is stopped.
  gw = await startGateway({ ECHO_DELAY: "1h" });
});
after(() => gw && gw.stop());

const FROM_START = { last_event: { epoch: 0, seq: 0 } };

function stopTurn(id, turn) {
  return gw.request(`/api/sessions/${encodeURIComponent(id)}/turns/${turn}/stop`, {
    method: "POST",
    headers: { Authorization: `Bearer ${gw.apiKey}` },
  });
}

function history(id) {
  return gw.request(`/api/sessions/${encodeURIComponent(id)}`, { headers: { Authorization: `Bearer ${gw.apiKey}` } });
}

function firstDelta(inbox, from) {
  return inbox.until((items) => items.slice(from).find((e) => e.type === "delta"), "a delta");
}

test("stop over HTTP and by push: turn_stopped, partial reply in history, next input runs", async (t) => {
  const id = uniqueId("stop-");
  const socket = await openSocket(t, gw);
  const ch = socket.channel(`session:${id}`, FROM_START);
  const inbox = recordEvents(ch);
  assert.equal((await join(ch)).status, "ok");

  const res = await gw.postEvent(id, { data: { text: "alpha beta gamma" } });
  assert.equal(res.status, 202, JSON.stringify(res.body));
  const started = await inbox.until((items) => items.find((e) => e.type === "turn_started"), "turn_started");
  const turn = turnId(started.payload.data.turn);
  assert.equal(turn, `${res.body.epoch}-${res.body.seq}`, "turn_started names the input");
  await firstDelta(inbox, 0);

  const stopped = await stopTurn(id, turn);
  assert.equal(stopped.status, 200, JSON.stringify(stopped.body));
  assert.deepEqual(stopped.body, { stopped: true, turn });
  const events = await untilTurnEnds(inbox);
  const end = events.at(-1);
  assert.equal(end.type, "turn_stopped");
  assert.deepEqual(end.payload.data, { turn: started.payload.data.turn, partial: "alpha " });

  const view = await history(id);
  assert.deepEqual(
    view.body.history.map((m) => [m.role, m.content, m.stopped === true]),
    [
      ["user", "alpha beta gamma", false],
      ["assistant", "alpha ", true],
    ],
  );

  // A stop of the finished turn, and of a turn that never was: documented no-ops.
  for (const t2 of [turn, "99-1"]) {
    const noop = await stopTurn(id, t2);
    assert.equal(noop.status, 200, JSON.stringify(noop.body));
    assert.deepEqual(noop.body, { stopped: false, turn: t2, reason: "not_running" });
  }
  const bad = await stopTurn(id, "nope");
  assert.equal(bad.status, 400);
  assert.equal(bad.body.error, "invalid_turn");

  // The next input runs normally (one word: no wait between words).
  const from = inbox.items.length;
  const next = await push(ch, "message", { data: { text: "solo" } });
  assert.equal(next.status, "ok", JSON.stringify(next.response));
  const turn2 = await untilTurnEnds(inbox, from);
  assert.deepEqual(
    turn2.slice(from).map((e) => e.type),
    ["user_event", "turn_started", "delta", "message", "turn_completed"],
  );

  // A stop by channel push.
  const from3 = inbox.items.length;
  const third = await push(ch, "message", { data: { text: "delta epsilon" } });
  assert.equal(third.status, "ok");
  await firstDelta(inbox, from3);
  const turn3 = `${third.response.epoch}-${third.response.seq}`;
  const byPush = await push(ch, "stop", { turn: turn3 });
  assert.equal(byPush.status, "ok", JSON.stringify(byPush.response));
  assert.deepEqual(byPush.response, { stopped: true, turn: turn3 });
  const end3 = (await untilTurnEnds(inbox, from3)).at(-1);
  assert.equal(end3.type, "turn_stopped");
  assert.equal(end3.payload.data.partial, "delta ");
  const badPush = await push(ch, "stop", { turn: 7 });
  assert.equal(badPush.status, "error");
  assert.equal(badPush.response.reason, "invalid_body");
});

test("double texting: reject answers 409 with the running turn; interrupt stops it and runs the new input", async (t) => {
  const id = uniqueId("dt-");
  const socket = await openSocket(t, gw);
  const ch = socket.channel(`session:${id}`, FROM_START);
  const inbox = recordEvents(ch);
  assert.equal((await join(ch)).status, "ok");

  const first = await gw.postEvent(id, { data: { text: "one two" } });
  assert.equal(first.status, 202);
  await firstDelta(inbox, 0);
  const turn = `${first.body.epoch}-${first.body.seq}`;

  const rejected = await gw.postEvent(id, { data: { text: "ignored" }, multitask: "reject" });
  assert.equal(rejected.status, 409, JSON.stringify(rejected.body));
  assert.equal(rejected.body.error, "session_busy_turn");
  assert.equal(rejected.body.turn, turn);
  const byPush = await push(ch, "message", { data: { text: "ignored" }, multitask: "reject" });
  assert.equal(byPush.status, "error");
  assert.equal(byPush.response.reason, "session_busy_turn");
  assert.equal(byPush.response.turn, turn);

  const interrupting = await gw.postEvent(id, { data: { text: "three" }, multitask: "interrupt" });
  assert.equal(interrupting.status, 202, JSON.stringify(interrupting.body));
  const events = await inbox.until(
    (items) => (items.some((e) => e.type === "turn_completed") ? items : null),
    "the interrupting input's turn_completed",
  );
  const types = events.map((e) => e.type).join(" ");
  assert.equal(types, "user_event turn_started delta user_event turn_stopped turn_started delta message turn_completed");
  const view = await history(id);
  assert.deepEqual(
    view.body.history.map((m) => [m.content, m.stopped === true]),
    [
      ["one two", false],
      ["one ", true],
      ["three", false],
      ["three", false],
    ],
  );
});

test("double texting per session: the first event's multitask is the session's mode; later events follow it or name their own", async (t) => {
  const id = uniqueId("dts-");
  const socket = await openSocket(t, gw);
  const ch = socket.channel(`session:${id}`, FROM_START);
  const inbox = recordEvents(ch);
  assert.equal((await join(ch)).status, "ok");

  const first = await gw.postEvent(id, { data: { text: "one two" }, multitask: "reject" });
  assert.equal(first.status, 202, JSON.stringify(first.body));
  await firstDelta(inbox, 0);
  const turn = `${first.body.epoch}-${first.body.seq}`;

  // No multitask: the session's mode, reject.
  const plain = await gw.postEvent(id, { data: { text: "ignored" } });
  assert.equal(plain.status, 409, JSON.stringify(plain.body));
  assert.equal(plain.body.error, "session_busy_turn");
  assert.equal(plain.body.turn, turn);
  const byPush = await push(ch, "message", { data: { text: "ignored" } });
  assert.equal(byPush.status, "error");
  assert.equal(byPush.response.reason, "session_busy_turn");

  // Its own multitask wins for that event alone.
  const queued = await gw.postEvent(id, { data: { text: "three" }, multitask: "enqueue" });
  assert.equal(queued.status, 202, JSON.stringify(queued.body));
  const again = await gw.postEvent(id, { data: { text: "ignored" } });
  assert.equal(again.status, 409, JSON.stringify(again.body));
  const stopped = await stopTurn(id, turn);
  assert.deepEqual(stopped.body, { stopped: true, turn });
  await inbox.until((items) => items.some((e) => e.type === "turn_completed"), "the queued event's turn");
});
