// The HTTP side of a running gateway: event API errors, admin endpoints, health,
// metrics, the embedded pages, and a drain seen by a phoenix client.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Inbox, join, openSocket, recordEvents, untilTurnEnds } from "./client.mjs";
import { startGateway, uniqueId } from "./gateway.mjs";

/** @type {import("./gateway.mjs").Gateway} */
let gw;
before(async () => {
  gw = await startGateway({ MAX_BODY_BYTES: "4096" });
});
after(() => gw && gw.stop());

function assertError(res, status, code) {
  assert.equal(res.status, status, `status; body ${JSON.stringify(res.body)}`);
  assert.equal(res.body && res.body.error, code, JSON.stringify(res.body));
  assert.equal(typeof res.body.message, "string", "every error body has a message");
}

test("event API: documented errors for bad requests", async () => {
  const id = uniqueId("api-");
  const ok = { type: "message", data: { text: "hi" } };
  assertError(await gw.postEvent(id, ok, ""), 401, "unauthorized");
  assertError(await gw.postEvent(id, ok, "wrong-key"), 401, "unauthorized");
  assertError(await gw.postEvent(id, "{not json", gw.apiKey), 400, "invalid_body");
  assertError(await gw.postEvent(id, { type: "message", data: "x" }, gw.apiKey), 400, "invalid_body");
  assertError(await gw.postEvent("bad id!", ok, gw.apiKey), 400, "invalid_session_id");
  const big = { type: "message", data: { text: "x".repeat(5000) } };
  assertError(await gw.postEvent(id, big, gw.apiKey), 413, "body_too_large");
  // A JWT works as a bearer for the sessions it allows, and only those.
  const jwt = gw.token({ sessions: [`${id}`] });
  assertError(await gw.postEvent(`${id}-other`, ok, jwt), 403, "forbidden");
  const accepted = await gw.postEvent(id, ok, jwt);
  assert.equal(accepted.status, 202, JSON.stringify(accepted.body));
});

test("admin API: node and sessions need the admin token", async () => {
  const id = uniqueId("adm-");
  const res = await gw.postEvent(id, { type: "message", data: { text: "admin view" } });
  assert.equal(res.status, 202);
  const auth = { headers: { Authorization: `Bearer ${gw.adminToken}` } };
  for (const path of ["/admin/node", "/admin/sessions", "/admin/drain"]) {
    const method = path === "/admin/drain" ? "POST" : "GET";
    const denied = await gw.request(path, { method, headers: { Authorization: `Bearer ${gw.apiKey}` } });
    assert.ok([401, 403].includes(denied.status), `${path} with an API key: ${denied.status}`);
  }
  const node = await gw.request("/admin/node", auth);
  assert.equal(node.status, 200, JSON.stringify(node.body));
  assert.equal(node.body.name, gw.nodeName);
  assert.equal(node.body.ready, true);
  assert.equal(node.body.draining, false);
  for (const k of ["mode", "sockets", "sessions"]) assert.ok(k in node.body, `node has ${k}`);
  const sessions = await gw.request("/admin/sessions", auth);
  assert.equal(sessions.status, 200, JSON.stringify(sessions.body));
  assert.ok(JSON.stringify(sessions.body).includes(id), `the session list names ${id}`);
});

test("admin API: the Muster dump", async () => {
  const muster = await gw.request("/admin/muster", { headers: { Authorization: `Bearer ${gw.adminToken}` } });
  assert.equal(muster.status, 200, JSON.stringify(muster.body));
  assert.ok(muster.body && typeof muster.body === "object", "a JSON dump");
  assert.ok(muster.body.muster && muster.body.muster.status, "the dump carries the scope's status");
  assert.deepEqual(muster.body.muster.members.map((m) => m.name ?? m.Name ?? m), [muster.body.node].map((n) => n), "a lone node's view is itself");
  const denied = await gw.request("/admin/muster");
  assert.equal(denied.status, 401);
});

test("health, readiness and metrics", async () => {
  assert.equal((await gw.request("/healthz")).status, 200);
  assert.equal((await gw.request("/readyz")).status, 200);
  const m = await gw.request("/metrics");
  assert.equal(m.status, 200);
  assert.match(String(m.body), /^# (HELP|TYPE) /m, "Prometheus text format");
});

test("the embedded pages and their bundles are served", async () => {
  const index = await gw.request("/");
  assert.equal(index.status, 200);
  assert.match(String(index.body), /<script type="module" src="\/assets\/app\.js">/);
  const ops = await gw.request("/ops");
  assert.equal(ops.status, 200);
  assert.match(String(ops.body), /\/assets\/ops\.js/);
  for (const asset of ["/assets/app.js", "/assets/ops.js", "/assets/app.css", "/assets/ops.css"]) {
    const res = await fetch(gw.httpURL + asset);
    assert.equal(res.status, 200, `${asset} (run npm run build:web before building the gateway)`);
    assert.match(res.headers.get("content-type") || "", asset.endsWith(".js") ? /javascript/ : /css/);
    await res.arrayBuffer();
  }
});

test("drain: a POST /admin/drain closes sockets, refuses new work and reports draining", async (t) => {
  const own = await startGateway();
  t.after(() => own.stop());
  const id = uniqueId("drain-");
  const socket = await openSocket(t, own, { reconnectAfterMs: () => 60_000 });
  const closes = new Inbox("socket closes");
  socket.onClose((e) => closes.push(e && e.code));
  const ch = socket.channel(`session:${id}`, { last_event: { epoch: 0, seq: 0 } });
  const events = recordEvents(ch);
  assert.equal((await join(ch)).status, "ok");
  assert.equal((await own.postEvent(id, { type: "message", data: { text: "before drain" } })).status, 202);
  await untilTurnEnds(events);

  const auth = { Authorization: `Bearer ${own.adminToken}` };
  const drain = await own.request("/admin/drain", { method: "POST", headers: auth });
  assert.ok(drain.status >= 200 && drain.status < 300, `drain: ${drain.status} ${JSON.stringify(drain.body)}`);
  const code = await closes.until((items) => items[0], "socket close");
  assert.notEqual(code, 1000, "a server close is never 1000 (old clients would not reconnect)");
  assert.equal(code, 1012, "drain closes sockets with 1012 restart");

  const node = await own.request("/admin/node", { headers: auth });
  assert.equal(node.body.draining, true, JSON.stringify(node.body));
  assert.equal((await own.request("/readyz")).status, 503);
  const refused = await own.postEvent(id, { type: "message", data: { text: "after drain" } });
  assert.equal(refused.status, 503, JSON.stringify(refused.body));
  assert.ok(refused.headers.get("retry-after"), "a 503 carries Retry-After");
  assert.ok(refused.body.retry && refused.body.retry.after_ms >= 0, JSON.stringify(refused.body));
});
