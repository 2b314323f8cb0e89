// The demo page's "watching" line (web/src/lib/watchers.js): keys sorted, nodes unique,
// several sockets of one key counted, and the count when the gateway lists none.
import assert from "node:assert/strict";
import { test } from "node:test";
import { describeWatchers, watchersOf } from "../web/src/lib/watchers.js";

/** A stand-in for phoenix's Presence: list(chooser) over a fixed state. */
function presenceOf(state) {
  return { list: (chooser) => Object.entries(state).map(([k, v]) => chooser(k, v)) };
}

test("watchers: sorted keys, unique nodes, socket counts, counts-only topics", () => {
  const w = watchersOf(
    presenceOf({
      bob: { metas: [{ node: "n2", phx_ref: "b1" }, { node: "n2", phx_ref: "b2" }, { node: "n1", phx_ref: "b3" }] },
      alice: { metas: [{ node: "n1", phx_ref: "a1" }] },
    }),
  );
  assert.deepEqual(w, [
    { key: "alice", nodes: ["n1"], sockets: 1 },
    { key: "bob", nodes: ["n1", "n2"], sockets: 3 },
  ]);
  assert.equal(describeWatchers(w, null), "alice (n1), bob (n1, n2 ×3)");
  assert.equal(describeWatchers([], 12000), "12000 watching (too many to list)");
  assert.equal(describeWatchers([], null), "—");
});
