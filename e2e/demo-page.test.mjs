// The demo conversation page in headless Chromium against three cluster-mode gateway
// processes (real Postgres, Redis, NATS):
// - the page on node B shows the owner of a turn that runs on node A (the owner GET
//   /api/sessions/{id} and A's GET /admin/node name), and when A is killed (SIGKILL)
//   mid-stream the reply ends resumed (done) or failed, never streaming for ever;
// - a delta the browser never receives (the test's WebSocket route drops it) makes the
//   page rejoin from its last contiguous event (README "Gaps"), and the replay brings it.
// Screenshots: e2e/artifacts/screenshots/demo-*.png.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { launchBrowser, screenshot, withPage } from "./browser.mjs";
import { nodeInfo, startCluster, waitClusterReady } from "./cluster.mjs";
import { uniqueId } from "./gateway.mjs";
import { dropSchemas } from "./stores.mjs";

// Failure bounds for DOM conditions, not expectations of speed. A takeover after a
// SIGKILL waits out LEASE_TTL (6 s here) and a recovery pass.
const WAIT = { timeout: 60_000, polling: 100 };
const WORDS = 60; // the echo agent streams one delta per word, ECHO_DELAY apart
const text = (tag) => Array.from({ length: WORDS }, (_, i) => `${tag}${i}`).join(" ");

// Each test's failure bound (above the suite's default, for the takeover waits).
const TEST_TIMEOUT = 180_000;

/** @type {import("./gateway.mjs").Gateway[]} */
let gws = [];
let browser;

before(async () => {
  gws = await startCluster(3, { ECHO_DELAY: "100ms" });
  await waitClusterReady(gws);
  browser = await launchBrowser();
});
after(async () => {
  if (browser) await browser.close();
  await Promise.all(gws.map((gw) => gw.stop()));
  dropSchemas();
});

/** Runs fn on a fresh page; on failure prints every node's last log lines and the page's errors. */
const withLogs = (fn) => withPage(() => browser, () => gws, "demo", fn);

async function openDemo(page, gw, id) {
  await page.goto(`${gw.httpURL}/#token=${gw.token()}&session=${id}`);
  await page.waitForFunction(() => document.querySelector("#channel-state").textContent.startsWith("joined"), null, WAIT);
}

/** The state class of the last assistant bubble: streaming, done, failed or stopped. */
const lastReplyState = () => {
  const li = [...document.querySelectorAll("#messages li.msg.assistant")].pop();
  return li ? ["streaming", "done", "failed", "stopped"].find((c) => li.classList.contains(c)) || "" : "";
};

test(
  "the page shows the turn's owner, and a turn whose owner is killed mid-stream ends resumed or failed",
  { timeout: TEST_TIMEOUT },
  withLogs(async (page) => {
    const [a, b] = gws;
    const id = uniqueId("demo-");
    await openDemo(page, b, id);
    // The event enters on A, which claims the session and runs the turn.
    const res = await a.postEvent(id, { data: { text: text("w") } });
    assert.equal(res.status, 202, JSON.stringify(res.body));
    const owner = (await a.request(`/api/sessions/${id}`, { headers: { Authorization: `Bearer ${a.apiKey}` } })).body.owner;
    assert.equal(owner, (await nodeInfo(a)).owner, "the node the event entered on owns the session");

    // Streaming on B's page, with A shown as the owner.
    await page.waitForFunction(() => {
      const li = [...document.querySelectorAll("#messages li.msg.assistant.streaming")].pop();
      return li && li.textContent.includes("w3");
    }, null, WAIT);
    assert.equal(await page.textContent("#owner"), owner);
    assert.equal(await page.textContent("#node"), b.nodeName);
    await screenshot(page, "demo-streaming");

    a.child.kill("SIGKILL");
    await page.waitForFunction(() => {
      const li = [...document.querySelectorAll("#messages li.msg.assistant")].pop();
      return li && (li.classList.contains("done") || li.classList.contains("failed"));
    }, null, WAIT);
    const types = await page.$$eval("#events .type", (els) => els.map((e) => e.textContent));
    assert.ok(types.includes("turn_resumed") || types.includes("turn_started") || types.includes("turn_failed"), types.join(","));
    if ((await page.evaluate(lastReplyState)) === "done") {
      // Resumed elsewhere: the page names the new owner, not the killed process.
      await page.waitForFunction((dead) => {
        const t = document.querySelector("#owner").textContent;
        return t !== dead && t.includes("/");
      }, owner, WAIT);
      const reply = await page.$eval("#messages li.msg.assistant.done", (li) => li.querySelector(".body").textContent);
      assert.equal(reply.trim(), text("w"));
    }
    await screenshot(page, "demo-after-owner-killed");
  }),
);

test(
  "a delta the page never receives makes it rejoin from its last contiguous event",
  { timeout: TEST_TIMEOUT },
  withLogs(async (page) => {
    const c = gws[2];
    const id = uniqueId("gap-");
    let dropped = null; // the event frame dropped on its way to the page
    const joins = []; // phx_join payloads for the session topic, in order
    await page.routeWebSocket(/\/socket\/websocket/, (ws) => {
      const server = ws.connectToServer();
      ws.onMessage((msg) => {
        try {
          const f = JSON.parse(msg);
          if (Array.isArray(f) && f[3] === "phx_join" && f[2] === `session:${id}`) joins.push(f[4]);
        } catch {
          // not a JSON frame
        }
        server.send(msg);
      });
      server.onMessage((msg) => {
        if (!dropped && typeof msg === "string") {
          const f = JSON.parse(msg);
          if (Array.isArray(f) && f[3] === "delta" && f[2] === `session:${id}` && f[4].data.text.startsWith("g5")) {
            dropped = f[4];
            return;
          }
        }
        ws.send(msg);
      });
    });
    await openDemo(page, c, id);
    const res = await c.postEvent(id, { data: { text: text("g") } });
    assert.equal(res.status, 202, JSON.stringify(res.body));
    await page.waitForFunction(() => Number(document.body.dataset.rejoins) >= 1, null, WAIT);
    await page.waitForFunction(() => {
      const li = [...document.querySelectorAll("#messages li.msg.assistant")].pop();
      return li && li.classList.contains("done");
    }, null, WAIT);
    assert.ok(dropped, "a delta was dropped");
    // The rejoin asked for everything after the event before the dropped one ...
    assert.ok(joins.length >= 2, JSON.stringify(joins));
    assert.deepEqual(joins[1].last_event, { epoch: dropped.epoch, seq: dropped.seq - 1 });
    // ... and the replay brought the dropped event: its row is there, marked replayed.
    const cursor = `e${dropped.epoch}·${dropped.seq}`;
    const row = await page.$$eval("#events tr", (trs, cur) => trs.filter((tr) => tr.querySelector("td")?.textContent === cur && !tr.classList.contains("gap")).map((tr) => tr.className), cursor);
    assert.deepEqual(row, ["replayed"], `rows for ${cursor}`);
    const reply = await page.$eval("#messages li.msg.assistant.done .body", (el) => el.textContent);
    assert.equal(reply.trim(), text("g"));
    await screenshot(page, "demo-gap-rejoin");
  }),
);
