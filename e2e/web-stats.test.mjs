// The ops page's chart arithmetic (web/src/lib/stats.js): per-second rates from two
// counter reads on the node's clock, and latency quantiles from two reads of a
// cumulative histogram, interpolated inside a bucket as Prometheus does.
import assert from "node:assert/strict";
import { test } from "node:test";
import { fmt, quantile, rates } from "../web/src/lib/stats.js";

test("rates divide counter differences by the node's time between reads", () => {
  const a = { node: "n", at_ms: 1000, counters: { x: 10, y: 0 } };
  const b = { node: "n", at_ms: 3000, counters: { x: 30, y: 5 } };
  assert.deepEqual(rates(a, b), { x: 10, y: 2.5 });
  assert.equal(rates(null, b), null, "no earlier read");
  assert.equal(rates(b, b), null, "no time passed");
  assert.equal(rates({ ...a, counters: { x: 40 } }, b), null, "a counter went back: restarted");
  assert.equal(rates({ ...a, node: "m" }, b), null, "another node");
});

test("quantiles come from the buckets filled between two reads", () => {
  const h = (count, counts) => ({ count, buckets: [0.01, 0.1, 1].map((le, i) => ({ le, count: counts[i] })) });
  const prev = h(10, [10, 10, 10]); // ten fast observations before
  const cur = h(30, [10, 20, 28]); // then 10 in (0.01, 0.1], 8 in (0.1, 1], 2 above 1
  // rank 10 of 20 is the last of the (0.01, 0.1] bucket.
  assert.equal(quantile(0.5, prev, cur), 0.1);
  // rank 5 of 20: halfway through (0.01, 0.1].
  assert.ok(Math.abs(quantile(0.25, prev, cur) - 0.055) < 1e-12);
  // rank 19.8: beyond the last finite bucket, which is reported.
  assert.equal(quantile(0.99, prev, cur), 1);
  assert.equal(quantile(0.5, cur, cur), null, "nothing observed between the reads");
});

test("chart labels keep three significant digits", () => {
  assert.equal(fmt(null), "—");
  assert.equal(fmt(0), "0");
  assert.equal(fmt(123.4), "123");
  assert.equal(fmt(12.34), "12.3");
  assert.equal(fmt(1.234), "1.23");
  assert.equal(fmt(0.01234), "0.012");
});
