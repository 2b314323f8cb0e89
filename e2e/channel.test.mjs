// Channel lifecycle with the official phoenix client: connect, heartbeat, join, leave,
// duplicate join, refused joins and refused sockets.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Inbox, join, newSocket, openSocket, push, rawSocket, recordEvents, tryUpgrade, untilTurnEnds } from "./client.mjs";
import { startGateway, uniqueId } from "./gateway.mjs";

/** @type {import("./gateway.mjs").Gateway} */
let gw;
before(async () => {
  gw = await startGateway();
});
after(() => gw && gw.stop());

test("join ok: a session channel joins and the reply names the node", async (t) => {
  const socket = await openSocket(t, gw);
  const id = uniqueId("join-");
  const ch = socket.channel(`session:${id}`, { last_event: { epoch: 0, seq: 0 } });
  const res = await join(ch);
  assert.equal(res.status, "ok", `join reply: ${JSON.stringify(res)}`);
  const r = res.response;
  assert.equal(r.node, gw.nodeName);
  assert.equal(r.replayed, 0, "a new session has nothing to replay");
  assert.equal(r.recovered, true);
  assert.equal(typeof r.epoch, "number");
  assert.equal(typeof r.seq, "number");
  assert.equal(ch.state, "joined");
});

test("join ok: a join without last_event is accepted too", async (t) => {
  const socket = await openSocket(t, gw);
  const res = await join(socket.channel(`session:${uniqueId("plain-")}`));
  assert.equal(res.status, "ok", `join reply: ${JSON.stringify(res)}`);
  assert.equal(res.response.node, gw.nodeName);
});

test("heartbeat: the client's heartbeats are answered on topic phoenix", async (t) => {
  const socket = await openSocket(t, gw, { heartbeatIntervalMs: 50 });
  const sent = new Map(); // ref -> true, heartbeats the client pushed
  const replies = new Inbox("heartbeat replies");
  const origPush = socket.push.bind(socket);
  socket.push = (data, channel) => {
    if (data.topic === "phoenix" && data.event === "heartbeat") sent.set(data.ref, true);
    return origPush(data, channel);
  };
  socket.onMessage((msg) => {
    if (msg.topic === "phoenix" && msg.event === "phx_reply") replies.push(msg);
  });
  const got = await replies.until((items) => items.length >= 3 && items, "three heartbeat replies");
  for (const msg of got.slice(0, 3)) {
    assert.equal(msg.join_ref, null);
    assert.ok(sent.has(msg.ref), `reply ref ${msg.ref} answers a heartbeat the client sent`);
    assert.deepEqual(msg.payload, { status: "ok", response: {} });
  }
  assert.ok(socket.isConnected(), "socket stays open across heartbeats");
});

test("heartbeat: raw frame gets the exact Phoenix reply, joined or not", async (t) => {
  const raw = await rawSocket(t, gw);
  raw.send([null, "hb-1", "phoenix", "heartbeat", {}]);
  assert.deepEqual(await raw.reply("hb-1"), [null, "hb-1", "phoenix", "phx_reply", { status: "ok", response: {} }]);
});

test("leave: the channel closes, the server forgets the topic", async (t) => {
  const socket = await openSocket(t, gw);
  const id = uniqueId("leave-");
  const frames = new Inbox("socket A frames");
  socket.onMessage((m) => frames.push(m));
  const ch = socket.channel(`session:${id}`, { last_event: { epoch: 0, seq: 0 } });
  assert.equal((await join(ch)).status, "ok");
  const joinRef = ch.joinRef();
  const left = await new Promise((resolve) => ch.leave().receive("ok", () => resolve("ok")).receive("timeout", () => resolve("timeout")));
  assert.equal(left, "ok");
  assert.equal(ch.state, "closed");
  assert.ok(!socket.channels.includes(ch), "the client dropped the channel");

  // The server answers the leave and closes that join (phx_close carrying the join_ref).
  await frames.until(
    (items) => items.find((m) => m.topic === `session:${id}` && m.event === "phx_close" && m.ref === joinRef),
    "phx_close for the left join",
  );

  // Another observer sees a whole turn; the left socket must get none of it.
  const observer = await openSocket(t, gw);
  const och = observer.channel(`session:${id}`, { last_event: { epoch: 0, seq: 0 } });
  const oev = recordEvents(och);
  assert.equal((await join(och)).status, "ok");
  const posted = await gw.postEvent(id, { type: "message", data: { text: "after leave" } });
  assert.equal(posted.status, 202, JSON.stringify(posted.body));
  await untilTurnEnds(oev);
  // A heartbeat round trip on the left socket orders it after anything already sent to it.
  await new Promise((resolve) => socket.ping(resolve));
  const closedAt = frames.items.findIndex((m) => m.topic === `session:${id}` && m.event === "phx_close" && m.ref === joinRef);
  const leaked = frames.items
    .slice(closedAt + 1)
    .filter((m) => m.topic === `session:${id}` && !["phx_reply", "phx_close"].includes(m.event));
  assert.deepEqual(leaked, [], "no session events after leave");

  // The raw protocol: a push on the left topic is now an unmatched topic.
  const raw = await rawSocket(t, gw);
  raw.send(["1", "1", `session:${id}`, "phx_join", {}]);
  assert.equal((await raw.reply("1"))[4].status, "ok");
  raw.send(["1", "2", `session:${id}`, "phx_leave", {}]);
  assert.deepEqual((await raw.reply("2"))[4], { status: "ok", response: {} });
  await raw.frames.until((items) => items.find((f) => f[3] === "phx_close" && f[0] === "1" && f[1] === "1"), "phx_close");
  raw.send(["1", "3", `session:${id}`, "message", { data: { text: "x" } }]);
  assert.deepEqual(await raw.reply("3"), [null, "3", `session:${id}`, "phx_reply", { status: "error", response: { reason: "unmatched topic" } }]);
});

test("duplicate join (raw): the older join is closed and the new one works", async (t) => {
  const raw = await rawSocket(t, gw);
  const topic = `session:${uniqueId("dup-")}`;
  raw.send(["1", "1", topic, "phx_join", { last_event: { epoch: 0, seq: 0 } }]);
  assert.equal((await raw.reply("1"))[4].status, "ok");
  raw.send(["2", "2", topic, "phx_join", { last_event: { epoch: 0, seq: 0 } }]);
  const second = await raw.reply("2");
  assert.equal(second[0], "2");
  assert.equal(second[4].status, "ok", JSON.stringify(second));
  const close = await raw.frames.until((items) => items.find((f) => f[3] === "phx_close"), "phx_close of the older join");
  assert.deepEqual(close, ["1", "1", topic, "phx_close", {}]);
  assert.ok(!raw.frames.items.some((f) => f[3] === "phx_close" && f[0] === "2"), "the new join stays open");

  // The new join receives the session's events.
  raw.send(["2", "3", topic, "message", { data: { text: "still here" } }]);
  const pushed = await raw.reply("3");
  assert.equal(pushed[0], "2");
  assert.equal(pushed[4].status, "ok", JSON.stringify(pushed));
  const done = await raw.frames.until((items) => items.find((f) => f[2] === topic && f[3] === "turn_completed"), "turn_completed");
  assert.ok(done[0] === "2" || done[0] === null, `events carry the new join_ref or null, got ${JSON.stringify(done)}`);
});

test("duplicate join (phoenix client): a second Channel on the topic replaces the first", async (t) => {
  const socket = await openSocket(t, gw);
  const id = uniqueId("dup2-");
  const first = socket.channel(`session:${id}`, { last_event: { epoch: 0, seq: 0 } });
  assert.equal((await join(first)).status, "ok");
  const second = socket.channel(`session:${id}`, { last_event: { epoch: 0, seq: 0 } });
  const events = recordEvents(second);
  const res = await join(second);
  assert.equal(res.status, "ok", JSON.stringify(res));
  assert.equal(first.state, "closed", "the client leaves the older channel");
  const posted = await gw.postEvent(id, { type: "message", data: { text: "to the second" } });
  assert.equal(posted.status, 202, JSON.stringify(posted.body));
  const items = await untilTurnEnds(events);
  assert.equal(items[0].type, "user_event");
  assert.equal(second.state, "joined");
});

test("refused join: a topic the gateway does not route", async (t) => {
  const socket = await openSocket(t, gw);
  const ch = socket.channel("nope:1");
  const res = await join(ch);
  ch.leave(); // stop the client's rejoin loop
  assert.equal(res.status, "error");
  assert.deepEqual(res.response, { reason: "unmatched topic" });
});

test("refused join: a session the token does not allow", async (t) => {
  const socket = await openSocket(t, gw, { token: gw.token({ sessions: ["s1", "demo-*"] }) });
  const outcomes = {};
  for (const id of ["s1", "demo-abc", "s2", "s1x", "other-demo-1"]) {
    const ch = socket.channel(`session:${id}`);
    const res = await join(ch);
    ch.leave();
    outcomes[id] = res.status === "ok" ? "ok" : res.response && res.response.reason;
  }
  assert.deepEqual(outcomes, {
    s1: "ok",
    "demo-abc": "ok",
    s2: "unauthorized",
    s1x: "unauthorized",
    "other-demo-1": "unauthorized",
  });
});

test("refused join: an invalid session id", async (t) => {
  const socket = await openSocket(t, gw);
  const outcomes = {};
  for (const id of ["", "has space", "x".repeat(129), "slash/no"]) {
    const ch = socket.channel(`session:${id}`);
    const res = await join(ch);
    ch.leave();
    outcomes[JSON.stringify(id.length > 20 ? `${id.length} chars` : id)] = res.status === "ok" ? "ok" : res.response.reason;
  }
  for (const [id, reason] of Object.entries(outcomes)) assert.equal(reason, "invalid_session_id", `session id ${id}`);
  const ok = await join(socket.channel(`session:${"y".repeat(128)}`));
  assert.equal(ok.status, "ok", "128 characters is the limit, inclusive");
});

test("refused socket: no token, a bad signature, an expired token never open", async (t) => {
  // Flip the signature's first character (its last one may only carry padding bits).
  const [h, p, sig] = gw.token().split(".");
  const badSig = `${h}.${p}.${sig[0] === "A" ? "B" : "A"}${sig.slice(1)}`;
  const wrongKey = (await import("./gateway.mjs")).mintJWT("not-the-secret", { sub: "u", sessions: ["*"] });
  const expired = gw.token({ exp: Math.floor(Date.now() / 1000) - 60 });
  for (const [name, token] of Object.entries({ none: "", garbage: "abc", badSig, wrongKey, expired })) {
    // Raw upgrade: HTTP 403, no WebSocket.
    const q = token ? `token=${encodeURIComponent(token)}&` : "";
    const up = await tryUpgrade(`${gw.wsURL}/socket/websocket?${q}vsn=2.0.0`);
    assert.deepEqual(up, { opened: false, status: 403 }, `raw upgrade with ${name} token`);

    // The phoenix client sees an error and never opens.
    const socket = newSocket(gw, { token });
    t.after(() => socket.disconnect());
    let opened = false;
    socket.onOpen(() => {
      opened = true;
    });
    const errored = new Inbox(`socket with ${name} token`);
    socket.onError(() => errored.push("error"));
    socket.onClose((e) => errored.push(`close ${e && e.code}`));
    socket.connect();
    await errored.until((items) => items.includes("error") && items.some((i) => i.startsWith("close")), "error and close");
    socket.disconnect();
    assert.equal(opened, false, `socket with ${name} token must not open`);
  }
});

test("auth token subprotocol: the phoenix authToken option is accepted", async (t) => {
  // Tokens whose standard base64 contains "/" cannot be offered by a WebSocket client
  // (docs/PHOENIX.md §1.3); mint until one is usable.
  let token;
  for (let i = 0; i < 200 && !token; i++) {
    const c = gw.token({ sub: `user-${i}` });
    if (!Buffer.from(c).toString("base64").includes("/")) token = c;
  }
  assert.ok(token, "found a token usable as a subprotocol");
  const socket = await openSocket(t, gw, { token: "", params: {}, authToken: token });
  assert.equal(socket.conn.protocol, "phoenix", "the server selects the phoenix subprotocol");
  const res = await join(socket.channel(`session:${uniqueId("sub-")}`));
  assert.equal(res.status, "ok", JSON.stringify(res));
});

test("unknown event: a push the session channel does not know is refused", async (t) => {
  const socket = await openSocket(t, gw);
  const ch = socket.channel(`session:${uniqueId("nullref-")}`, { last_event: { epoch: 0, seq: 0 } });
  assert.equal((await join(ch)).status, "ok");
  const res = await push(ch, "no_such_event", {});
  assert.equal(res.status, "error");
  assert.equal(res.response.reason, "unknown_event", JSON.stringify(res.response));
});
