// The demo page's retry-directive policy (web/src/lib/retry.js), on a fake clock: it
// re-sends after after_ms while the budget lasts, gives up when it would run out, and
// never retries a refusal that carries no directive.
import assert from "node:assert/strict";
import { test } from "node:test";
import { retryDirective, sendWithRetry } from "../web/src/lib/retry.js";

/** A fake clock whose sleep advances time instantly, recording each sleep. */
function fakeClock() {
  const c = { t: 1_000, sleeps: [] };
  c.now = () => c.t;
  c.sleep = async (ms) => {
    c.sleeps.push(ms);
    c.t += ms;
  };
  return c;
}

/** send() that answers from a script of outcomes, advancing the clock by rtt per call. */
function scripted(clock, outcomes, rtt = 5) {
  let i = 0;
  const send = async () => {
    clock.t += rtt;
    const o = outcomes[Math.min(i, outcomes.length - 1)];
    i++;
    return o;
  };
  send.calls = () => i;
  return send;
}

const retry = (after_ms, budget_ms) => ({ status: "error", response: { reason: "retry", retry: { after_ms, budget_ms } } });

test("retryDirective reads only well-formed directives", () => {
  assert.deepEqual(retryDirective({ reason: "retry", retry: { after_ms: 250, budget_ms: 16000 } }), { afterMs: 250, budgetMs: 16000 });
  assert.equal(retryDirective({ reason: "session_busy", retry: { after_ms: 1, budget_ms: 1 } }), null);
  assert.equal(retryDirective({ reason: "retry" }), null);
  assert.equal(retryDirective({ reason: "retry", retry: { after_ms: -1, budget_ms: 10 } }), null);
  assert.equal(retryDirective({ reason: "retry", retry: { after_ms: "soon", budget_ms: 10 } }), null);
  assert.equal(retryDirective(null), null);
});

test("re-sends after after_ms until accepted", async () => {
  const clock = fakeClock();
  const ok = { status: "ok", response: { seq: 7 } };
  const send = scripted(clock, [retry(300, 5000), retry(200, 5000), ok]);
  const seen = [];
  const out = await sendWithRetry(send, { ...clock, onRetry: (i) => seen.push([i.afterMs, i.attempt]) });
  assert.deepEqual(out, { ...ok, attempts: 3 });
  assert.deepEqual(clock.sleeps, [300, 200]);
  assert.deepEqual(seen, [[300, 1], [200, 2]]);
});

test("gives up once the next wait would pass the first directive's budget", async () => {
  const clock = fakeClock();
  const send = scripted(clock, [retry(400, 1000)]);
  const out = await sendWithRetry(send, clock);
  assert.equal(out.status, "gave_up");
  assert.equal(out.response.reason, "retry");
  // First reply at t0; re-sends at t0+405 and t0+810; a third wait would end at
  // t0+1210, past the budget's t0+1000, so it stops there.
  assert.deepEqual(clock.sleeps, [400, 400]);
  assert.equal(out.attempts, 3);
  assert.equal(send.calls(), 3);
});

test("a refusal without a directive, or a timeout, is final", async () => {
  for (const final of [{ status: "error", response: { reason: "session_busy", message: "full" } }, { status: "timeout" }]) {
    const clock = fakeClock();
    const send = scripted(clock, [final, { status: "ok", response: {} }]);
    const out = await sendWithRetry(send, clock);
    assert.deepEqual(out, { ...final, attempts: 1 });
    assert.deepEqual(clock.sleeps, []);
  }
});
