// The LongPoll transport (/socket/longpoll) driven by the official phoenix client, unchanged:
// forced onto LongPoll (Node 20's fetch carries its polls and posts), and falling back to it
// with longPollFallbackMs when a proxy refuses WebSocket upgrades. Plus the transport's
// answers to raw requests that docs/PHOENIX.md §6 and the README's error table document.
import assert from "node:assert/strict";
import { once } from "node:events";
import { createServer, request as httpRequest } from "node:http";
import { after, before, test } from "node:test";
import { LongPoll } from "phoenix";
import WebSocket from "ws";
import { join, newSocket, openSocket, push, recordEvents, untilTurnEnds } from "./client.mjs";
import { startGateway, uniqueId } from "./gateway.mjs";

/** @type {import("./gateway.mjs").Gateway} */
let gw;
before(async () => {
  gw = await startGateway();
});
after(() => gw && gw.stop());

const FROM_START = { last_event: { epoch: 0, seq: 0 } };

/** The admin view of session topics joined on gw ({topic: sockets}). */
async function localViewers(g) {
  const res = await g.request("/admin/viewers", { headers: { Authorization: `Bearer ${g.adminToken}` } });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body.local;
}

/** A gauge or counter sample from /metrics (0 when absent). */
async function metric(g, line) {
  const res = await g.request("/metrics");
  const hit = res.body.split("\n").find((l) => l.startsWith(line + " "));
  return hit ? Number(hit.split(" ")[1]) : 0;
}

function assertTurn(events, text) {
  const types = events.map((e) => e.type).join(" ");
  assert.match(types, /^user_event turn_started( delta)+ message turn_completed$/, `event types: ${types}`);
  const deltas = events.filter((e) => e.type === "delta").map((e) => e.payload.data.text);
  const message = events.find((e) => e.type === "message").payload.data;
  assert.equal(deltas.join("").trim(), message.content.trim(), "the deltas add up to the final message");
  for (const word of text.split(" ")) assert.ok(message.content.includes(word), `echo contains ${word}`);
}

test("forced onto LongPoll: join, heartbeat, a pushed turn with its deltas, replay to a second client, leave", async (t) => {
  const id = uniqueId("lp-");
  const socket = await openSocket(t, gw, { transport: LongPoll });
  assert.equal(socket.transport, LongPoll);
  assert.equal(await metric(gw, "relay_longpoll_sessions"), 1);

  const ch = socket.channel(`session:${id}`, FROM_START);
  const inbox = recordEvents(ch, "longpoll client");
  const joined = await join(ch);
  assert.equal(joined.status, "ok", JSON.stringify(joined));

  // phoenix.js sends no heartbeats over LongPoll by itself; ping is a heartbeat round trip.
  const rtt = await new Promise((resolve) => socket.ping(resolve));
  assert.equal(typeof rtt, "number");

  // A full turn started by a channel push; its events come back over polls.
  const text = "north east south west";
  const pushed = await push(ch, "message", { data: { text } });
  assert.equal(pushed.status, "ok", JSON.stringify(pushed));
  const events = await untilTurnEnds(inbox);
  assertTurn(events, text);

  // A second LongPoll client replays the whole session on join.
  const other = await openSocket(t, gw, { transport: LongPoll });
  const ch2 = other.channel(`session:${id}`, FROM_START);
  const replay = recordEvents(ch2, "replaying client");
  const j2 = await join(ch2);
  assert.equal(j2.status, "ok", JSON.stringify(j2));
  const replayed = await untilTurnEnds(replay);
  assert.deepEqual(replayed.map((e) => e.payload), events.map((e) => e.payload), "the replay is the live turn");
  assert.equal((await localViewers(gw))[`session:${id}`], 2);

  // A turn posted over HTTP reaches both LongPoll clients live.
  const res = await gw.postEvent(id, { type: "message", data: { text: "up down" } });
  assert.equal(res.status, 202, JSON.stringify(res.body));
  assertTurn((await untilTurnEnds(inbox, events.length)).slice(events.length), "up down");
  assertTurn((await untilTurnEnds(replay, replayed.length)).slice(replayed.length), "up down");

  // Leave: the reply comes back and the server no longer counts the channel.
  const left = await new Promise((resolve) => ch2.leave().receive("ok", () => resolve("ok")).receive("timeout", () => resolve("timeout")));
  assert.equal(left, "ok");
  // The client may see the leave's reply before the server finished ending the channel. A
  // ping's POST waits for the ack of the leave's POST, which comes once the leave was handled.
  await new Promise((resolve) => other.ping(resolve));
  assert.equal((await localViewers(gw))[`session:${id}`], 1);
});

test("forced onto LongPoll with the authToken option: the token travels in X-Phoenix-AuthToken", async (t) => {
  const socket = await openSocket(t, gw, { transport: LongPoll, token: "", params: {}, authToken: gw.token() });
  const ch = socket.channel(`session:${uniqueId("lpauth-")}`, FROM_START);
  assert.equal((await join(ch)).status, "ok");
  // Without any token the session is refused (403): the client reports an error.
  const refused = newSocket(gw, { transport: LongPoll, token: "", params: {} });
  t.after(() => refused.disconnect());
  const err = new Promise((resolve) => refused.onError(resolve));
  refused.connect();
  assert.equal(await err, 403);
});

test("longPollFallbackMs: a client whose WebSocket upgrades are refused falls back to LongPoll and runs a turn", async (t) => {
  // A proxy in front of the gateway that forwards plain HTTP and refuses every upgrade,
  // as some corporate proxies do.
  let refused = 0;
  const proxy = createServer((req, res) => {
    const up = httpRequest(
      { host: gw.addr.split(":")[0], port: Number(gw.addr.split(":")[1]), method: req.method, path: req.url, headers: req.headers },
      (r) => {
        res.writeHead(r.statusCode, r.headers);
        r.pipe(res);
      },
    );
    up.on("error", () => res.destroy());
    req.pipe(up);
  });
  proxy.on("upgrade", (_req, sock) => {
    refused++;
    sock.end("HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
  });
  proxy.listen(0, "127.0.0.1");
  await once(proxy, "listening");
  t.after(() => {
    proxy.closeAllConnections();
    proxy.close();
  });
  const proxied = { ...gw, wsURL: `ws://127.0.0.1:${proxy.address().port}` };

  const socket = newSocket(proxied, { transport: WebSocket, longPollFallbackMs: 2_000 });
  t.after(() => socket.disconnect());
  const opened = new Promise((resolve) => socket.onOpen(resolve));
  socket.connect();
  await opened;
  assert.equal(socket.transport, LongPoll, "the socket fell back to LongPoll");
  assert.ok(refused >= 1, "the WebSocket upgrade was tried and refused");

  const id = uniqueId("fallback-");
  const ch = socket.channel(`session:${id}`, FROM_START);
  const inbox = recordEvents(ch);
  assert.equal((await join(ch)).status, "ok");
  const pushed = await push(ch, "message", { data: { text: "fell back fine" } });
  assert.equal(pushed.status, "ok", JSON.stringify(pushed));
  assertTurn(await untilTurnEnds(inbox), "fell back fine");
});

/** A raw LongPoll request; resolves with {http, body}. */
async function lp(g, method, query, { body, contentType, headers = {} } = {}) {
  const res = await fetch(`${g.httpURL}/socket/longpoll${query}`, {
    method,
    body,
    headers: { ...(contentType ? { "Content-Type": contentType } : {}), ...headers },
  });
  const text = await res.text();
  return { http: res.status, body: text ? JSON.parse(text) : null };
}

test("raw LongPoll answers: created, refused, bad batches, oversize, bad and foreign session tokens", async (t) => {
  const token = gw.token();
  const created = await lp(gw, "GET", `?vsn=2.0.0&token=${encodeURIComponent(token)}`);
  assert.equal(created.http, 200);
  assert.equal(created.body.status, 410);
  const session = created.body.token;
  assert.match(session, /^lp1\./);
  const q = `?vsn=2.0.0&token=${encodeURIComponent(token)}&token=${encodeURIComponent(session)}`;

  assert.equal((await lp(gw, "GET", "?vsn=2.0.0&token=not-a-jwt")).body.status, 403, "a bad socket token");
  assert.equal((await lp(gw, "GET", `?vsn=3.0.0&token=${encodeURIComponent(token)}`)).body.status, 403, "a bad vsn");

  const nd = { contentType: "application/x-ndjson" };
  const malformed = await lp(gw, "POST", q, { ...nd, body: `[null,"1","phoenix","heartbeat",{}]\n%%%` });
  assert.deepEqual([malformed.http, malformed.body.status, malformed.body.error], [400, 400, "invalid_batch"]);
  const big = await lp(gw, "POST", q, { ...nd, body: "A".repeat((1 << 20) + 1) });
  assert.deepEqual([big.http, big.body.status, big.body.error], [413, 413, "body_too_large"]);
  const bigFrame = await lp(gw, "POST", q, { ...nd, body: `["1","2","t","e",{"p":"${"x".repeat(70_000)}"}]` });
  assert.deepEqual([bigFrame.http, bigFrame.body.status, bigFrame.body.error], [413, 413, "frame_too_large"]);

  const ok = await lp(gw, "POST", q, { ...nd, body: `[null,"7","phoenix","heartbeat",{}]` });
  assert.deepEqual([ok.http, ok.body.status], [200, 200]);
  const polled = await lp(gw, "GET", q);
  assert.equal(polled.body.status, 200);
  assert.deepEqual(polled.body.messages.map((m) => JSON.parse(m)), [[null, "7", "phoenix", "phx_reply", { status: "ok", response: {} }]]);

  const tampered = session.slice(0, -2) + (session.endsWith("A") ? "BB" : "AA");
  const tq = `?vsn=2.0.0&token=${encodeURIComponent(tampered)}`;
  assert.equal((await lp(gw, "GET", tq)).body.status, 410, "a tampered session token, poll");
  assert.equal((await lp(gw, "POST", tq, { ...nd, body: `[null,"8","phoenix","heartbeat",{}]` })).body.status, 410, "post");

  // The session token names the node that holds the session: another node answers 410.
  const other = await startGateway();
  t.after(() => other.stop());
  const foreign = await lp(other, "GET", `?vsn=2.0.0&token=${encodeURIComponent(session)}`);
  assert.deepEqual([foreign.http, foreign.body.status], [200, 410]);
  const foreignPost = await lp(other, "POST", `?vsn=2.0.0&token=${encodeURIComponent(session)}`, { ...nd, body: `[null,"9","phoenix","heartbeat",{}]` });
  assert.equal(foreignPost.body.status, 410);
  assert.equal(await metric(other, 'relay_longpoll_gone_total{reason="other_node"}'), 2);
});
