// Cluster-wide presence across three gateway processes, seen through the official
// phoenix client's Presence (docs/PHOENIX.md §5.4): viewers on every node list every
// viewer; a node killed with SIGKILL has its viewers removed from every other node's
// lists once the Census declares it dead; a NATS partition of one node (its NATS link
// runs through a TCP proxy the test cuts) and its heal leave no ghost and lose no viewer; a
// viewer that joins and leaves within one broadcast period while another joins never stays
// listed on the other (the phantom viewer).
import assert from "node:assert/strict";
import { createServer, connect } from "node:net";
import { after, test } from "node:test";
import { Presence } from "phoenix";
import { describeWatchers, watchersOf } from "../web/src/lib/watchers.js";
import { join, openSocket } from "./client.mjs";
import { startCluster, waitClusterReady } from "./cluster.mjs";
import { dump, startGateway, uniqueId } from "./gateway.mjs";
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


// The phantom viewer. M joins and leaves a session topic within one
// PRESENCE_BROADCAST_PERIOD while J joins: J's presence_state lists M (M is tracked until it
// leaves), so J must hear of M's leave in a presence_diff, however fast it followed M's
// join. Each round runs on a fresh topic; rounds run ROUND_WORKERS at a time, each worker
// on its own three sockets (M, J, K). The settle point is a third viewer K that joins
// after M left, on M's node: K's join is tracked after M's leave on that node, so the diff
// that brings K to J was made after M's leave was recorded (on J's node too: one node's
// changes reach another in order); once J lists K, J must not list M. A round starts right
// after the diff that brought K, so its joins and M's leave fall well within one period.
const ROUNDS = 200;
const ROUND_WORKERS = 10;

/** Leaves a channel; resolves once the server acknowledged (or the push timed out). */
function leave(channel) {
  return new Promise((resolve) => {
    channel.leave().receive("ok", resolve).receive("timeout", resolve);
  });
}

/**
 * Joins topic on socket with phoenix.js Presence; resolves to {channel, names(), first,
 * until(pred, what)} where first is the key list of the first sync (the presence_state).
 */
async function presenceJoin(socket, topic, who) {
  const channel = socket.channel(topic, {});
  const presence = new Presence(channel);
  const names = () => presence.list((key) => key).sort();
  const waiters = new Set();
  const p = { channel, names, first: null };
  presence.onSync(() => {
    if (p.first === null) p.first = names();
    for (const w of [...waiters]) w();
  });
  p.until = (pred, what) =>
    new Promise((resolve, reject) => {
      const check = () => {
        if (p.first !== null && pred(names())) {
          waiters.delete(check);
          clearTimeout(timer);
          resolve();
        }
      };
      const timer = setTimeout(() => {
        waiters.delete(check);
        reject(new Error(`${who} on ${topic}: ${what}: lists [${names()}]`));
      }, CONVERGE_MS);
      waiters.add(check);
      check();
    });
  const res = await join(channel);
  assert.equal(res.status, "ok", `${who} joins ${topic}: ${JSON.stringify(res)}`);
  await p.until(() => true, "presence_state"); // the push right after the join reply
  return p;
}

/**
 * Runs ROUNDS rounds of the phantom scenario, M and K on gwM, J on gwJ, and returns the
 * rounds in which J still listed M once it listed K. With rejoinUntilM (J on another
 * node) J rejoins until its presence_state lists M.
 */
async function phantomRounds(t, gwM, gwJ, { rejoinUntilM = false } = {}) {
  const phantoms = [];
  let next = 0;
  const worker = async (w) => {
    const sM = await openSocket(t, gwM, { token: gwM.token({ sub: "M" }) });
    const sJ = await openSocket(t, gwJ, { token: gwJ.token({ sub: "J" }) });
    const sK = await openSocket(t, gwM, { token: gwM.token({ sub: "K" }) });
    while (next < ROUNDS) {
      const round = next++;
      const topic = `session:${uniqueId(`ph${w}-`)}`;
      const m = sM.channel(topic, {});
      assert.equal((await join(m)).status, "ok");
      let j = await presenceJoin(sJ, topic, "J");
      // J's node learns of M by M's node's next delta: rejoin until J's state lists M.
      const deadline = Date.now() + CONVERGE_MS;
      while (rejoinUntilM && !j.first.includes("M") && Date.now() < deadline) {
        await leave(j.channel);
        j = await presenceJoin(sJ, topic, "J");
      }
      assert.ok(j.first.includes("M") && j.first.includes("J"), `round ${round}: J's presence_state lists [${j.first}]`);
      // The leave's reply may pass M's untrack; the server reads a socket's frames one
      // at a time, so the reply to an untracked join sent after it means M is untracked.
      await leave(m);
      const fence = sM.channel(topic, { presence: false });
      assert.equal((await join(fence)).status, "ok");
      await leave(fence);
      const k = sK.channel(topic, {});
      assert.equal((await join(k)).status, "ok");
      await j.until((names) => names.includes("K"), `round ${round}: K listed`);
      if (j.names().includes("M")) phantoms.push({ round, topic, names: j.names() });
      await Promise.all([leave(j.channel), leave(k)]);
    }
  };
  await Promise.all(Array.from({ length: ROUND_WORKERS }, (_, w) => worker(w)));
  return phantoms;
}

test(`phantom viewer, one node: M joins and leaves within a period while J joins; J never lists M once it lists K (${ROUNDS} rounds)`, async (t) => {
  const gw = await startGateway({ PRESENCE_BROADCAST_PERIOD: "300ms" });
  all.push(gw);
  await withLogs([gw], async () => {
    const phantoms = await phantomRounds(t, gw, gw);
    assert.deepEqual(phantoms, [], `${phantoms.length} of ${ROUNDS} rounds left M listed on J`);
  })(t);
});

test(`phantom viewer, two nodes: M's leave reaches J on the other node (${ROUNDS} rounds)`, async (t) => {
  // M's node flushes often and J's seldom, so M's join and leave both reach J's node
  // within one of its periods, after J was served a state listing M.
  const gws = await startCluster(2, {}, [{ PRESENCE_BROADCAST_PERIOD: "50ms" }, { PRESENCE_BROADCAST_PERIOD: "400ms" }]);
  all.push(...gws);
  await withLogs(gws, async () => {
    await waitClusterReady(gws);
    const phantoms = await phantomRounds(t, gws[0], gws[1], { rejoinUntilM: true });
    assert.deepEqual(phantoms, [], `${phantoms.length} of ${ROUNDS} rounds left M listed on J`);
  })(t);
});
