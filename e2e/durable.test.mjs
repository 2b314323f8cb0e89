// Durable stores end to end: gateway processes on the real Postgres (own schema) and
// Redis (own key prefix via CLUSTER) that replace one another. A restart keeps the
// replay log and the history and continues with a higher epoch; after a crash the next
// event is refused with a retry directive until the dead node's lease lapses.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { compareCursor, cursorOf } from "../web/src/lib/events.js";
import { pushOnce, sendWithRetry } from "../web/src/lib/retry.js";
import { join, openSocket, recordEvents, untilTurnEnds } from "./client.mjs";
import { startGateway, uniqueId } from "./gateway.mjs";
import { dropSchemas, storeEnv } from "./stores.mjs";

const FROM_START = { last_event: { epoch: 0, seq: 0 } };

after(dropSchemas);

/** Runs one turn on gw for session id (posting text) and returns its events. */
async function runTurn(t, gw, id, text) {
  const socket = await openSocket(t, gw);
  const ch = socket.channel(`session:${id}`, FROM_START);
  const inbox = recordEvents(ch, `${gw.nodeName} ${id}`);
  const joined = await join(ch);
  assert.equal(joined.status, "ok", JSON.stringify(joined));
  const before = await inbox.until((items) => items.length >= joined.response.replayed && items, "replay");
  const res = await gw.postEvent(id, { type: "message", data: { text } });
  assert.equal(res.status, 202, JSON.stringify(res.body));
  const all = await untilTurnEnds(inbox, before.length);
  socket.disconnect();
  return { replayed: all.slice(0, before.length), turn: all.slice(before.length), joined: joined.response };
}

test("restart: a new process replays the log, keeps the history and continues with a higher epoch", async (t) => {
  const env = storeEnv();
  const id = uniqueId("durable-");
  const gw1 = await startGateway(env);
  t.after(() => gw1.stop());
  const info = await gw1.request("/admin/node", { headers: { Authorization: `Bearer ${gw1.adminToken}` } });
  assert.equal(info.body.mode, "single", "durable stores without NATS");
  const first = await runTurn(t, gw1, id, "kept across restarts");
  await gw1.stop(); // SIGTERM: drain hands the lease back

  const gw2 = await startGateway(env);
  t.after(() => gw2.stop());
  const view = await gw2.request(`/api/sessions/${id}`, { headers: { Authorization: `Bearer ${gw2.apiKey}` } });
  assert.equal(view.status, 200, JSON.stringify(view.body));
  assert.deepEqual(
    view.body.history,
    [
      { n: 1, turn: { epoch: 1, seq: 1 }, role: "user", content: "kept across restarts" },
      { n: 2, turn: { epoch: 1, seq: 1 }, role: "assistant", content: "kept across restarts" },
    ],
    "history comes back from the session store, numbered, with the turn that wrote it",
  );

  const second = await runTurn(t, gw2, id, "after the restart");
  assert.deepEqual(
    second.replayed.map((e) => e.payload),
    first.turn.map((e) => e.payload),
    "the new process replays the first process's events from Redis",
  );
  assert.equal(second.joined.recovered, true);
  const lastBefore = cursorOf(first.turn.at(-1).payload);
  const firstAfter = cursorOf(second.turn[0].payload);
  assert.ok(compareCursor(lastBefore, firstAfter) < 0, `${JSON.stringify(firstAfter)} follows ${JSON.stringify(lastBefore)}`);
  assert.ok(firstAfter.epoch > lastBefore.epoch, "the new owner writes under a higher epoch");

  const after2 = await gw2.request(`/api/sessions/${id}`, { headers: { Authorization: `Bearer ${gw2.apiKey}` } });
  assert.equal(after2.body.history.length, 4, JSON.stringify(after2.body.history));
  assert.equal(after2.body.owner.startsWith(gw2.nodeName), true, `owner ${after2.body.owner}`);
});

test("crash: the next event gets a retry directive until the dead node's lease lapses, then runs", async (t) => {
  const env = storeEnv({ LEASE_TTL: "3s", LEASE_RENEW: "500ms" });
  const id = uniqueId("crash-");
  const gw1 = await startGateway(env);
  t.after(() => gw1.stop());
  const first = await runTurn(t, gw1, id, "before the crash");
  gw1.child.kill("SIGKILL"); // no drain: the lease stays live until it expires
  await gw1.stop();

  const gw2 = await startGateway(env);
  t.after(() => gw2.stop());
  const directives = [];
  const body = { type: "message", data: { text: "after the crash" }, idempotency_key: `k-${id}` };
  const out = await sendWithRetry(
    async () => {
      const res = await gw2.postEvent(id, body);
      if (res.status === 202) return { status: "ok", response: res.body };
      if (res.status === 503) {
        directives.push({ retryAfter: res.headers.get("retry-after"), body: res.body });
        return { status: "error", response: { reason: "retry", ...res.body } };
      }
      return { status: "error", response: res.body };
    },
    { onRetry: () => {} },
  );
  assert.equal(out.status, "ok", `outcome ${JSON.stringify(out)}; directives ${JSON.stringify(directives)}`);
  assert.ok(directives.length >= 1, "the first attempt met the dead node's live lease");
  for (const d of directives) {
    assert.equal(d.body.error, "session_moving", JSON.stringify(d.body));
    assert.ok(d.body.retry.after_ms > 0 && d.body.retry.budget_ms >= d.body.retry.after_ms, JSON.stringify(d.body));
    assert.ok(Number(d.retryAfter) >= 1, `Retry-After ${d.retryAfter}`);
  }
  const lastBefore = cursorOf(first.turn.at(-1).payload);
  assert.ok(out.response.epoch > lastBefore.epoch, `takeover epoch ${out.response.epoch} > ${lastBefore.epoch}`);
  assert.ok(compareCursor(lastBefore, cursorOf(out.response)) < 0);
});

test("crash: the demo page's send path follows the channel's retry directive until the takeover", async (t) => {
  const env = storeEnv({ LEASE_TTL: "3s", LEASE_RENEW: "500ms" });
  const id = uniqueId("crashpush-");
  const gw1 = await startGateway(env);
  t.after(() => gw1.stop());
  const first = await runTurn(t, gw1, id, "before the crash");
  gw1.child.kill("SIGKILL");
  await gw1.stop();

  const gw2 = await startGateway(env);
  t.after(() => gw2.stop());
  const socket = await openSocket(t, gw2);
  const ch = socket.channel(`session:${id}`, { last_event: cursorOf(first.turn.at(-1).payload) });
  const inbox = recordEvents(ch, `${gw2.nodeName} ${id}`);
  assert.equal((await join(ch)).status, "ok");

  const retries = [];
  const payload = { data: { text: "pushed after the crash" }, idempotency_key: `k-${id}` };
  const out = await sendWithRetry(() => pushOnce(ch, "message", payload), { onRetry: (info) => retries.push(info) });
  assert.equal(out.status, "ok", `outcome ${JSON.stringify(out)}`);
  assert.ok(retries.length >= 1, "the first push met the dead node's live lease and got a directive");
  for (const r of retries) assert.ok(r.afterMs > 0 && r.budgetMs >= r.afterMs, JSON.stringify(r));
  assert.equal(out.response.duplicate, false);
  assert.ok(out.response.epoch > cursorOf(first.turn.at(-1).payload).epoch, "the takeover raised the epoch");

  const turn = await untilTurnEnds(inbox);
  assert.deepEqual(turn.map((e) => e.type).slice(0, 2), ["user_event", "turn_started"]);
  assert.deepEqual(cursorOf(turn[0].payload), cursorOf(out.response), "the accepted push is the user_event");
});
