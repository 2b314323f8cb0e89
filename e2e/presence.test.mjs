// Cluster-wide presence across three gateway processes, seen through the official
// phoenix client's Presence (docs/PHOENIX.md §5.4): viewers on every node list every
// viewer; a node killed with SIGKILL has its viewers removed from every other node's
// lists once the Census declares it dead; a NATS partition of one node (its NATS link
// runs through a TCP proxy the test cuts) and its heal leave no ghost and lose no viewer.
import assert from "node:assert/strict";
import { createServer, connect } from "node:net";
import { after, test } from "node:test";
import { Presence } from "phoenix";
import { describeWatchers, watchersOf } from "../web/src/lib/watchers.js";
import { join, openSocket } from "./client.mjs";
import { startCluster, waitClusterReady } from "./cluster.mjs";
import { dump, uniqueId } from "./gateway.mjs";
import { NATS, dropSchemas } from "./stores.mjs";

// Fast presence timings; the Census (CENSUS_INTERVAL 200ms in FAST_CLUSTER) declares a
// silent node dead after 3 intervals, checked every interval: within 800 ms of its last
// message, plus one PRESENCE_BROADCAST_PERIOD before subscribers see the leave.
const PRESENCE = { PRESENCE_BROADCAST_PERIOD: "100ms" };
// Generous failure bound for every eventual condition (not a time assertion).
const CONVERGE_MS = 20_000;

/** @type {import("./gateway.mjs").Gateway[]} */
const all = [];
after(async () => {
  await Promise.all(all.map((gw) => gw.stop()));
  dropSchemas();
});

/**
 * A cuttable TCP proxy in front of NATS: cut() drops every connection and refuses new
 * ones until restore().
 */
async function natsProxy() {
  const target = new URL(NATS);
  const conns = new Set();
  let open = true;
  const server = createServer((client) => {
    if (!open) {
      client.destroy();
      return;
    }
    const upstream = connect(Number(target.port || 4222), target.hostname);
    const pair = { client, upstream };
    conns.add(pair);
    const drop = () => {
      client.destroy();
      upstream.destroy();
      conns.delete(pair);
    };
    client.on("error", drop).on("close", drop);
    upstream.on("error", drop).on("close", drop);
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  after(() => server.close());
  return {
    url: `nats://127.0.0.1:${server.address().port}`,
    cut() {
      open = false;
      for (const { client, upstream } of conns) {
        client.destroy();
        upstream.destroy();
      }
      conns.clear();
    },
    restore() {
      open = true;
    },
  };
}

/**
 * A viewer: a phoenix socket as user sub on gw, joined to topic, with the official
 * Presence. names() is the sorted list of presence keys it shows.
 */
async function viewer(t, gw, topic, sub) {
  const socket = await openSocket(t, gw, { token: gw.token({ sub }) });
  const channel = socket.channel(topic, {});
  const presence = new Presence(channel);
  const syncs = [];
  const waiters = new Set();
  presence.onSync(() => {
    syncs.push(presence.list((key) => key).sort());
    for (const w of [...waiters]) w();
  });
  const res = await join(channel);
  assert.equal(res.status, "ok", JSON.stringify(res));
  const v = {
    sub,
    node: gw.nodeName,
    socket,
    // The demo page's view of the same Presence (web/src/lib/watchers.js).
    names: () => watchersOf(presence).map((w) => w.key),
    watchers: () => watchersOf(presence),
    /** Resolves once the list equals want (sorted keys); rejects after CONVERGE_MS. */
    until(want, what) {
      const w = [...want].sort().join(",");
      return new Promise((resolve, reject) => {
        const check = () => {
          if (v.names().join(",") === w) {
            waiters.delete(check);
            clearTimeout(timer);
            resolve();
          }
        };
        const timer = setTimeout(() => {
          waiters.delete(check);
          reject(new Error(`${sub} on ${gw.nodeName}: ${what}: lists [${v.names()}], want [${w}]; last syncs ${JSON.stringify(syncs.slice(-3))}`));
        }, CONVERGE_MS);
        waiters.add(check);
        check();
      });
    },
  };
  return v;
}

function withLogs(gws, fn) {
  return async (t) => {
    try {
      await fn(t);
    } catch (err) {
      for (const gw of gws) console.error(`--- ${gw.nodeName}\n${dump(gw.logs)}`);
      throw err;
    }
  };
}

test("three nodes list every viewer; a SIGKILLed node's viewers leave every list", async (t) => {
  const gws = await startCluster(3, PRESENCE);
  all.push(...gws);
  await withLogs(gws, async () => {
    await waitClusterReady(gws);
    const topic = `session:${uniqueId("pr-")}`;
    const viewers = [];
    for (const [i, gw] of gws.entries()) {
      for (const j of [0, 1]) viewers.push(await viewer(t, gw, topic, `u${i}${j}`));
    }
    const everyone = viewers.map((v) => v.sub);
    await Promise.all(viewers.map((v) => v.until(everyone, "every viewer listed")));
    // Each watcher shows the node its socket is on, on every node's page.
    for (const v of viewers) {
      for (const w of v.watchers()) {
        const on = viewers.find((x) => x.sub === w.key).node;
        assert.deepEqual(w.nodes, [on], `${v.sub} sees ${w.key} on ${w.nodes}`);
      }
    }
    assert.match(describeWatchers(viewers[0].watchers(), null), new RegExp(`^u00 \\(${gws[0].nodeName}\\), u01 `));

    // kill -9 the third node: its two viewers leave every other list.
    const [a, b, c] = gws;
    c.child.kill("SIGKILL");
    const survivors = viewers.filter((v) => v.node !== c.nodeName);
    const left = survivors.map((v) => v.sub);
    await Promise.all(survivors.map((v) => v.until(left, `${c.nodeName}'s viewers gone after SIGKILL`)));
    assert.deepEqual([a.nodeName, b.nodeName].sort(), [...new Set(survivors.map((v) => v.node))].sort());
  })(t);
});

test("a NATS partition of one node and its heal: no ghost, no lost viewer", async (t) => {
  const proxy = await natsProxy();
  // The third node reaches NATS through the proxy; the other two directly.
  const nodes = await startCluster(3, PRESENCE, [{}, {}, { NATS_URL: proxy.url }]);
  all.push(...nodes);
  const cgw = nodes[2];
  await withLogs(nodes, async () => {
    await waitClusterReady(nodes);
    const topic = `session:${uniqueId("pp-")}`;
    const va = await viewer(t, nodes[0], topic, "alice");
    const vb = await viewer(t, nodes[1], topic, "bob");
    const vc1 = await viewer(t, cgw, topic, "carol");
    const vc2 = await viewer(t, cgw, topic, "dave");
    await Promise.all([va, vb, vc1, vc2].map((v) => v.until(["alice", "bob", "carol", "dave"], "all four before the cut")));

    proxy.cut();
    // Each side declares the other dead: no ghosts on either side.
    await Promise.all([va, vb].map((v) => v.until(["alice", "bob"], "the cut node's viewers gone")));
    await Promise.all([vc1, vc2].map((v) => v.until(["carol", "dave"], "the other side's viewers gone")));
    // Changes on both sides during the partition.
    vc2.socket.disconnect();
    const ve = await viewer(t, nodes[0], topic, "erin");
    await vc1.until(["carol"], "dave's leave on his own node");

    proxy.restore();
    const want = ["alice", "bob", "carol", "erin"];
    await Promise.all([va, vb, vc1, ve].map((v) => v.until(want, "after the heal")));
  })(t);
});

