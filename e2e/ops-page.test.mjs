// The ops page in headless Chromium against three cluster-mode gateway processes (one
// Postgres schema, the Redis and NATS servers, one CLUSTER name): the page on node A
// lists all three nodes with their exact 64-bit ids (compared with each node's own
// GET /admin/node), a chart takes a point after traffic, a session lookup names the
// owner, the drain and undrain buttons move node C through draining/drained back to
// ready (a command sent to C over NATS), and a refused token clears the page.
// Screenshots: e2e/artifacts/screenshots/ops-*.png.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { launchBrowser, screenshot, withPage } from "./browser.mjs";
import { nodeInfo, startCluster, waitClusterReady } from "./cluster.mjs";
import { uniqueId } from "./gateway.mjs";
import { dropSchemas } from "./stores.mjs";

// Failure bounds for DOM conditions, not expectations of speed.
const WAIT = { timeout: 45_000, polling: 100 };

// Each test's failure bound (above the suite's default, for the takeover waits).
const TEST_TIMEOUT = 180_000;

/** @type {import("./gateway.mjs").Gateway[]} */
let gws = [];
let browser;

before(async () => {
  gws = await startCluster(3, { ECHO_DELAY: "20ms" });
  await waitClusterReady(gws);
  browser = await launchBrowser();
});
after(async () => {
  if (browser) await browser.close();
  await Promise.all(gws.map((gw) => gw.stop()));
  dropSchemas();
});

/** Runs fn on a fresh page; on failure prints every node's last log lines and the page's errors. */
// The drain button asks confirm(): every dialog is accepted.
const withLogs = (fn) => withPage(() => browser, () => gws, "ops", fn, (page) => page.on("dialog", (d) => d.accept()));

/** The cluster table as the page shows it: one object per row, by data-field. */
function rows(page) {
  return page.$$eval("#cluster tbody tr[data-node]", (trs) =>
    trs.map((tr) => {
      const out = { node: tr.dataset.node };
      for (const td of tr.querySelectorAll("[data-field]")) out[td.dataset.field] = td.textContent;
      out.status = tr.querySelector("[data-field=status]").dataset.status;
      return out;
    }),
  );
}

async function openOps(page, gw) {
  await page.goto(`${gw.httpURL}/ops`);
  await page.fill("#admin-token", gw.adminToken);
  await page.selectOption("#interval", "1000");
  await page.click("#auth button[type=submit]");
}

test(
  "the ops page on one node lists every node with exact ids, charts traffic, looks a session up",
  { timeout: TEST_TIMEOUT },
  withLogs(async (page) => {
    const [a, b] = gws;
    await openOps(page, a);
    // Every node listed, on one ready Muster view.
    await page.waitForFunction(
      () => {
        const trs = [...document.querySelectorAll("#cluster tbody tr[data-node]")];
        const hashes = new Set(trs.map((tr) => tr.querySelector("[data-field=view_hash]").textContent));
        return trs.length === 3 && hashes.size === 1 && trs.every((tr) => tr.querySelector("[data-field=status]").dataset.status === "ready");
      },
      null,
      WAIT,
    );
    const shown = await rows(page);
    const infos = await Promise.all(gws.map(nodeInfo));
    assert.deepEqual(shown.map((r) => r.node), infos.map((i) => i.name).sort());
    for (const info of infos) {
      const row = shown.find((r) => r.node === info.name);
      assert.equal(row.owner, info.owner, `${info.name}: owner`);
      assert.equal(row.incarnation, info.incarnation, `${info.name}: incarnation`);
      assert.equal(row.view_hash, info.cluster.view_hash, `${info.name}: view hash`);
      // The incarnation is beyond 2^53: a JavaScript number would have rounded it.
      assert.ok(BigInt(info.incarnation) > 2n ** 53n, `${info.name}: incarnation ${info.incarnation}`);
      assert.equal(info.owner, `${info.name}/${BigInt(info.incarnation).toString(36)}`, `${info.name}: owner carries the incarnation`);
      assert.match(info.cluster.view_hash, /^[0-9a-f]{16}$/);
    }
    // The Muster dump speaks the same hex.
    const muster = await a.request("/admin/muster", { headers: { Authorization: `Bearer ${a.adminToken}` } });
    assert.equal(muster.body.muster.view_hash, infos.find((i) => i.name === a.nodeName).cluster.view_hash);
    assert.equal(muster.body.muster.incarnation.length > 0 && typeof muster.body.muster.incarnation, "string");

    // Charts: at least one point with no event seen, then the latency series takes a
    // value once events are posted to the page's node.
    await page.waitForFunction(() => Number(document.querySelector("#chart-latency").dataset.points) >= 1, null, WAIT);
    const id = uniqueId("ops-");
    for (let i = 0; i < 5; i++) {
      const res = await a.postEvent(id, { data: { text: `hello ${i}` }, idempotency_key: `k${i}` });
      assert.equal(res.status, 202, JSON.stringify(res.body));
    }
    await page.waitForFunction(
      () => {
        const last = JSON.parse(document.querySelector("#chart-latency").dataset.last || "{}");
        return typeof last.p50 === "number" && last.p50 > 0 && typeof last.p99 === "number";
      },
      null,
      WAIT,
    );
    await page.waitForFunction(() => {
      const last = JSON.parse(document.querySelector("#chart-accepted").dataset.last || "{}");
      return typeof last.accepted === "number";
    }, null, WAIT);

    // A viewer on node B, then the lookup: owner, position and subscribers per node.
    const viewer = await browser.context.newPage();
    await viewer.goto(`${b.httpURL}/#token=${b.token()}&session=${id}`);
    await viewer.waitForFunction(() => document.querySelector("#channel-state").textContent.startsWith("joined"), null, WAIT);
    const sess = await a.request(`/api/sessions/${id}`, { headers: { Authorization: `Bearer ${a.apiKey}` } });
    await page.fill("#lookup-id", id);
    await page.click("#lookup button[type=submit]");
    await page.waitForFunction(() => document.querySelector("#lookup-result [data-field=owner]"), null, WAIT);
    assert.equal(await page.textContent("#lookup-result [data-field=owner]"), sess.body.owner || "none (no live lease)");
    // Census counts reach node A within CENSUS_INTERVAL; the page refreshes the lookup
    // with every poll.
    await page.waitForFunction(
      (node) => {
        const td = document.querySelector(`#lookup-result tr[data-node="${node}"] td.num`);
        return td && td.textContent === "1";
      },
      b.nodeName,
      WAIT,
    );
    assert.equal(await page.$$eval("#lookup-result tr[data-node]", (trs) => trs.length), 3);
    await viewer.close();
    await screenshot(page, "ops-cluster");
  }),
);

test(
  "the drain and undrain buttons move another node to drained and back to ready",
  { timeout: TEST_TIMEOUT },
  withLogs(async (page) => {
    const [a, , c] = gws;
    await openOps(page, a);
    const row = `#cluster tr[data-node="${c.nodeName}"]`;
    await page.waitForSelector(`${row} [data-status=ready]`, WAIT);
    await page.click(`${row} button[data-op=drain]`);
    await page.waitForSelector(`${row} [data-status=drained]`, WAIT);
    assert.equal((await nodeInfo(c)).draining, true);
    assert.equal((await c.request("/readyz")).status, 503);
    await screenshot(page, "ops-drained");

    await page.click(`${row} button[data-op=undrain]`);
    await page.waitForSelector(`${row} [data-status=ready]`, WAIT);
    const info = await nodeInfo(c);
    assert.equal(info.draining, false);
    // C rejoined the view: every node lists all three again, on one hash.
    await waitClusterReady(gws);
    // And it takes sockets and events again.
    const id = uniqueId("undrained-");
    const res = await c.postEvent(id, { data: { text: "back" } });
    assert.equal(res.status, 202, JSON.stringify(res.body));
  }),
);

test(
  "a refused admin token clears the page and says so",
  { timeout: TEST_TIMEOUT },
  withLogs(async (page) => {
    const [a] = gws;
    await openOps(page, a);
    await page.waitForFunction(() => document.querySelectorAll("#cluster tbody tr[data-node]").length === 3, null, WAIT);
    await page.fill("#admin-token", "not-the-admin-token");
    await page.click("#auth button[type=submit]");
    await page.waitForFunction(() => document.body.dataset.auth === "refused", null, WAIT);
    assert.equal(await page.$$eval("#cluster tr", (trs) => trs.length), 0);
    assert.equal(await page.textContent("#muster"), "");
    assert.match(await page.textContent("#notice"), /401/);
    assert.equal(await page.isVisible("#notice"), true);
    await screenshot(page, "ops-refused");
  }),
);
