// A node that is not ready refuses new sockets, and the official phoenix client rides it
// out: with its replay store (Redis, reached through a TCP proxy of the test's own) cut, a
// single node turns not ready; then a new WebSocket upgrade and a new LongPoll session are
// answered 503 not_ready with a retry directive (README "Readiness and new sockets"), a
// phoenix client on either transport sees the refusal as a transport error and keeps
// retrying, and a socket opened before stays open. Once Redis is reachable again the node
// is ready and the retrying clients connect and join.
import assert from "node:assert/strict";
import { once } from "node:events";
import { request as httpRequest } from "node:http";
import { connect, createServer } from "node:net";
import { after, before, test } from "node:test";
import { LongPoll } from "phoenix";
import { Inbox, join, newSocket } from "./client.mjs";
import { startGateway, uniqueId } from "./gateway.mjs";
import { REDIS } from "./stores.mjs";

/** A TCP proxy on a fixed loopback port to target; cut() closes it, restore() reopens it. */
async function tcpProxy(target) {
  const conns = new Set();
  const track = (s) => {
    conns.add(s);
    s.on("close", () => conns.delete(s));
    s.on("error", () => s.destroy());
  };
  const server = createServer((client) => {
    const upstream = connect(target.port, target.hostname);
    track(client);
    track(upstream);
    client.pipe(upstream);
    upstream.pipe(client);
    client.on("close", () => upstream.destroy());
    upstream.on("close", () => client.destroy());
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address();
  return {
    port,
    async cut() {
      server.close();
      for (const s of conns) s.destroy();
      await once(server, "close");
    },
    async restore() {
      server.listen(port, "127.0.0.1");
      await once(server, "listening");
    },
    async close() {
      for (const s of conns) s.destroy();
      if (server.listening) {
        server.close();
        await once(server, "close");
      }
    },
  };
}

/** Polls /readyz until it answers status; the deadline is a hang guard only. */
async function untilReadyz(gw, status, ms = 20_000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const res = await gw.request("/readyz");
    if (res.status === status) return res.body;
    if (Date.now() > deadline) throw new Error(`/readyz never answered ${status}; last: ${res.status} ${JSON.stringify(res.body)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** A raw WebSocket upgrade request: {status, headers, body} of a refusal (status 101: opened). */
function rawUpgrade(gw, path) {
  return new Promise((resolve, reject) => {
    const req = httpRequest(gw.httpURL + path, {
      headers: { Connection: "Upgrade", Upgrade: "websocket", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==" },
    });
    req.on("upgrade", (_res, socket) => {
      socket.destroy();
      resolve({ status: 101 });
    });
    req.on("response", async (res) => {
      let text = "";
      for await (const chunk of res) text += chunk;
      resolve({ status: res.statusCode, headers: new Headers(res.headers), body: JSON.parse(text) });
    });
    req.on("error", reject);
    req.end();
  });
}

function assertNotReadyRefusal(what, res) {
  assert.equal(res.status, 503, `${what}: ${res.status} ${JSON.stringify(res.body)}`);
  assert.equal(res.body.error, "not_ready", what);
  assert.ok(res.body.reasons.some((r) => r.startsWith("replay_store:")), `${what}: reasons ${res.body.reasons}`);
  assert.ok(res.body.retry.after_ms > 0 && res.body.retry.budget_ms >= res.body.retry.after_ms, `${what}: retry ${JSON.stringify(res.body.retry)}`);
  assert.equal(res.headers.get("retry-after"), String(Math.ceil(res.body.retry.after_ms / 1000)), `${what}: Retry-After`);
}

let proxy;
let gw;
before(async () => {
  proxy = await tcpProxy(new URL(REDIS));
  gw = await startGateway({ REDIS_URL: `redis://127.0.0.1:${proxy.port}/0`, CLUSTER: uniqueId("e2e-"), READY_INTERVAL: "200ms" });
});
after(async () => {
  if (gw) await gw.stop();
  if (proxy) await proxy.close();
});

test("not ready: new sockets are refused 503 not_ready, the phoenix client retries and connects once the node is ready", async (t) => {
  const opened = newSocket(gw);
  const oldEvents = new Inbox("socket opened before");
  opened.onOpen(() => oldEvents.push("open"));
  opened.onClose(() => oldEvents.push("close"));
  opened.onError(() => oldEvents.push("error"));
  t.after(() => opened.disconnect());
  opened.connect();
  await oldEvents.until((items) => items.includes("open"), "the socket to open");

  await proxy.cut();
  await untilReadyz(gw, 503);

  // The node refuses sockets from the round its checks' hysteresis turns it, which
  // /readyz may show a round earlier. The deadline is a hang guard only.
  let upgrade;
  for (const deadline = Date.now() + 20_000; ; ) {
    upgrade = await rawUpgrade(gw, "/socket/websocket?vsn=2.0.0&token=" + gw.token());
    if (upgrade.status !== 101 || Date.now() > deadline) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  assertNotReadyRefusal("WebSocket upgrade", upgrade);
  const poll = await gw.request("/socket/longpoll?vsn=2.0.0&token=" + gw.token());
  assertNotReadyRefusal("new LongPoll session", poll);
  assert.equal(poll.body.status, 500, "the LongPoll refusal carries the transport's status 500");

  const clients = [
    ["WebSocket", newSocket(gw)],
    ["LongPoll", newSocket(gw, { transport: LongPoll })],
  ].map(([name, socket]) => {
    const inbox = new Inbox(name);
    socket.onError(() => inbox.push("error"));
    socket.onOpen(() => inbox.push("open"));
    t.after(() => socket.disconnect());
    socket.connect();
    return { name, socket, inbox };
  });
  for (const c of clients) {
    await c.inbox.until((items) => items.filter((i) => i === "error").length >= 2, `${c.name}: two refused attempts`);
    assert.ok(!c.inbox.items.includes("open"), `${c.name} opened on a node that is not ready`);
  }

  await proxy.restore();
  await untilReadyz(gw, 200);
  for (const c of clients) {
    await c.inbox.until((items) => items.includes("open"), `${c.name}: to open once the node is ready`);
    const r = await join(c.socket.channel(`session:${uniqueId("rd-")}`, {}));
    assert.equal(r.status, "ok", `${c.name}: join ${JSON.stringify(r)}`);
  }
  assert.deepEqual(oldEvents.items, ["open"], "the socket opened before the outage stayed open");
  assert.ok(opened.isConnected());
});
