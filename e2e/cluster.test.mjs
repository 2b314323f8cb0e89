// Two gateway processes in cluster mode (shared Postgres schema, Redis prefix and NATS
// subject prefix): a socket on one node observes a session whose turn runs on the
// other, a late joiner on the owner replays exactly what the remote observer saw live,
// and events posted to a non-owner are forwarded to the owner.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { compareCursor, cursorOf } from "../web/src/lib/events.js";
import { join, openSocket, recordEvents, untilTurnEnds } from "./client.mjs";
import { startGateway, uniqueId } from "./gateway.mjs";
import { dropSchemas, storeEnv } from "./stores.mjs";

const FROM_START = { last_event: { epoch: 0, seq: 0 } };
const ROUTE_WAIT_MS = 15_000;

/** @type {import("./gateway.mjs").Gateway} */
let a;
/** @type {import("./gateway.mjs").Gateway} */
let b;

before(async () => {
  const env = storeEnv({ nats: true });
  [a, b] = await Promise.all([startGateway(env), startGateway(env)]);
  // Each node's Muster view must list both before routing can be trusted. No trace
  // point crosses processes, so poll the dump with a deadline. A gateway that does not
  // serve the dump (404) is taken as it is: joins wait for Muster's join on their own.
  for (const gw of [a, b]) {
    const deadline = Date.now() + ROUTE_WAIT_MS;
    for (;;) {
      const d = await gw.request("/admin/muster", { headers: { Authorization: `Bearer ${gw.adminToken}` } });
      const text = JSON.stringify(d.body);
      if (d.status === 404 || (d.status === 200 && text.includes(a.nodeName) && text.includes(b.nodeName))) break;
      if (Date.now() > deadline) {
        throw new Error(`${gw.nodeName} never listed both nodes in /admin/muster: ${d.status} ${text.slice(0, 500)}`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  }
});
after(async () => {
  await Promise.all([a && a.stop(), b && b.stop()]);
  dropSchemas();
});

function ownerOf(gw, id) {
  return gw.request(`/api/sessions/${id}`, { headers: { Authorization: `Bearer ${gw.apiKey}` } });
}

test("observe from anywhere: a socket on node A sees a turn that runs on node B", async (t) => {
  const id = uniqueId("cluster-");
  const sa = await openSocket(t, a);
  const cha = sa.channel(`session:${id}`, FROM_START);
  const ea = recordEvents(cha, `observer on ${a.nodeName}`);
  const ja = await join(cha);
  assert.equal(ja.status, "ok", JSON.stringify(ja));
  assert.equal(ja.response.node, a.nodeName);

  // Posted to B: B claims the session and runs the turn; A's socket sees it live.
  const res = await b.postEvent(id, { type: "message", data: { text: "seen from the other node" } });
  assert.equal(res.status, 202, JSON.stringify(res.body));
  const first = await untilTurnEnds(ea);
  assert.match(first.map((e) => e.type).join(" "), /^user_event turn_started( delta)+ message turn_completed$/);
  const view = await ownerOf(a, id);
  assert.equal(view.status, 200, JSON.stringify(view.body));
  assert.ok(String(view.body.owner).startsWith(b.nodeName), `owner ${view.body.owner} is node B`);

  // A late joiner on B replays exactly what A saw live.
  const sb = await openSocket(t, b);
  const chb = sb.channel(`session:${id}`, FROM_START);
  const eb = recordEvents(chb, `late joiner on ${b.nodeName}`);
  const jb = await join(chb);
  assert.equal(jb.status, "ok");
  assert.equal(jb.response.replayed, first.length);
  const replay = await eb.until((items) => items.length >= first.length && items, `${first.length} replayed events`);
  assert.deepEqual(replay.map((e) => e.payload), first.map((e) => e.payload));
});

test(
  "forwarding: an event posted to a node that does not own the session runs on the owner",
  async (t) => {
    const id = uniqueId("forward-");
    const sa = await openSocket(t, a);
    const cha = sa.channel(`session:${id}`, FROM_START);
    const ea = recordEvents(cha, `observer on ${a.nodeName}`);
    assert.equal((await join(cha)).status, "ok");
    const res = await b.postEvent(id, { type: "message", data: { text: "claimed by B" } });
    assert.equal(res.status, 202, JSON.stringify(res.body));
    const first = await untilTurnEnds(ea);

    // Posted to A, which does not own it: forwarded to B; A's socket sees that turn too.
    const res2 = await a.postEvent(id, { type: "message", data: { text: "forwarded to the owner" } });
    assert.equal(res2.status, 202, JSON.stringify(res2.body));
    const all = await untilTurnEnds(ea, first.length);
    for (let i = 1; i < all.length; i++) {
      assert.ok(compareCursor(cursorOf(all[i - 1].payload), cursorOf(all[i].payload)) < 0, `event ${i} in order`);
    }
    assert.ok(String((await ownerOf(b, id)).body.owner).startsWith(b.nodeName), "ownership did not move");
    const second = all.slice(first.length);
    assert.match(second.map((e) => e.type).join(" "), /^user_event turn_started( delta)+ message turn_completed$/);
    assert.deepEqual(cursorOf(second[0].payload), cursorOf(res2.body), "the 202 from A names the owner's user_event");
  },
);
