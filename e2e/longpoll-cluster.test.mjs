// LongPoll on a two-node cluster, driven by the official phoenix client through a local
// load balancer: a sticky balancer keeps the client's session on node A while the turn it
// pushes runs wherever the session is owned; when the balancer moves the client to node B,
// B answers the session's next request 410, and the client opens a new session on B,
// rejoins and gets the session's next turn there (docs/PHOENIX.md §6.5).
import assert from "node:assert/strict";
import { once } from "node:events";
import { createServer, request as httpRequest } from "node:http";
import { after, before, test } from "node:test";
import { LongPoll } from "phoenix";
import { userText } from "../web/src/lib/events.js";
import { join, newSocket, push, recordEvents, untilTurnEnds } from "./client.mjs";
import { startCluster, waitClusterReady } from "./cluster.mjs";
import { dump, uniqueId } from "./gateway.mjs";
import { dropSchemas } from "./stores.mjs";

const FROM_START = { last_event: { epoch: 0, seq: 0 } };

/** @type {import("./gateway.mjs").Gateway[]} */
let gws = [];
before(async () => {
  // A short poll window, so the poll held on A when the balancer moves returns soon (it is
  // also the idle limit between two polls, so not shorter than a loaded machine's gaps).
  gws = await startCluster(2, { LONGPOLL_WINDOW: "3s" });
  await waitClusterReady(gws);
});
after(async () => {
  await Promise.all(gws.map((gw) => gw.stop()));
  dropSchemas();
});

/** A counter sample from /metrics (0 when absent). */
async function metric(g, line) {
  const res = await g.request("/metrics");
  const hit = res.body.split("\n").find((l) => l.startsWith(line + " "));
  return hit ? Number(hit.split(" ")[1]) : 0;
}

/** An HTTP proxy sending every request to lb.target (a gateway), which the test may change. */
async function balancer(t, target) {
  const lb = { target, requests: new Map() };
  const srv = createServer((req, res) => {
    const [host, port] = lb.target.addr.split(":");
    lb.requests.set(lb.target.nodeName, (lb.requests.get(lb.target.nodeName) || 0) + 1);
    const up = httpRequest({ host, port: Number(port), method: req.method, path: req.url, headers: req.headers }, (r) => {
      res.writeHead(r.statusCode, r.headers);
      r.pipe(res);
    });
    up.on("error", () => res.destroy());
    req.pipe(up);
  });
  srv.listen(0, "127.0.0.1");
  await once(srv, "listening");
  t.after(() => {
    srv.closeAllConnections();
    srv.close();
  });
  lb.wsURL = `ws://127.0.0.1:${srv.address().port}`;
  return lb;
}

test("LongPoll behind a balancer: a session stays on its node; moved to another node, the client starts over there and loses nothing", async (t) => {
  const [a, b] = gws;
  try {
    const lb = await balancer(t, a);
    const socket = newSocket({ ...a, wsURL: lb.wsURL }, { transport: LongPoll });
    t.after(() => socket.disconnect());
    const opens = [];
    socket.onOpen(() => opens.push(lb.target.nodeName));
    const opened = new Promise((resolve) => socket.onOpen(resolve));
    socket.connect();
    await opened;

    const id = uniqueId("lpc-");
    const ch = socket.channel(`session:${id}`, FROM_START);
    const inbox = recordEvents(ch, "longpoll client");
    assert.equal((await join(ch)).status, "ok");
    const first = await push(ch, "message", { data: { text: "on node a" } });
    assert.equal(first.status, "ok", JSON.stringify(first));
    const turn1 = await untilTurnEnds(inbox);

    // The balancer moves the client to B: B refuses A's session, the client opens one on B.
    const before = opens.length;
    lb.target = b;
    const reopened = new Promise((resolve) => socket.onOpen(resolve));
    await reopened;
    assert.equal(opens[0], a.nodeName);
    assert.deepEqual(opens.slice(before), [b.nodeName], "one new session, on B");
    assert.ok((await metric(b, 'relay_longpoll_gone_total{reason="other_node"}')) >= 1, "B answered A's session token 410");

    // The rejoin (from the start) replays turn 1; a turn posted on A then reaches the client on B.
    const res = await a.postEvent(id, { type: "message", data: { text: "after the move" } });
    assert.equal(res.status, 202, JSON.stringify(res.body));
    const seen = await inbox.until((items) => {
      const done = items.filter((e) => e.type === "turn_completed");
      return done.length >= 3 ? items : null; // turn 1 live, turn 1 replayed, turn 2
    }, "turn 2 after the rejoin on B");
    const unique = new Map(seen.map((e) => [`${e.payload.epoch}:${e.payload.seq}`, e]));
    const texts = [...unique.values()].filter((e) => e.type === "user_event").map((e) => userText(e.payload.data));
    assert.deepEqual(texts, ["on node a", "after the move"], "both turns, each once after dedup by (epoch, seq)");
    assert.ok(turn1.length > 0);
  } catch (err) {
    for (const gw of gws) console.error(`--- ${gw.nodeName}\n${dump(gw.logs)}`);
    throw err;
  }
});
