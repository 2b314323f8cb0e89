// The demo page's view of the event types an agent passes through
// (web/src/lib/agent-events.js): which channel messages are session events, and the
// collapsible rows tool calls, tool results, reasoning and other types become.
import assert from "node:assert/strict";
import { test } from "node:test";
import { describeAgentEvent, inlineArgs, isLifecycleType, isSessionEvent } from "../web/src/lib/agent-events.js";

test("session events are any type with a numeric cursor, except the channel layer's own", () => {
  const ev = { session: "s", epoch: 2, seq: 9, data: {} };
  assert.equal(isSessionEvent("tool_call", ev), true);
  assert.equal(isSessionEvent("delta", ev), true);
  assert.equal(isSessionEvent("phx_reply", ev), false);
  assert.equal(isSessionEvent("presence_diff", ev), false);
  assert.equal(isSessionEvent("tool_call", { data: {} }), false);
  assert.equal(isSessionEvent("tool_call", { epoch: "2", seq: 9 }), false);
  assert.equal(isSessionEvent("tool_call", null), false);
  assert.equal(isLifecycleType("turn_started"), true);
  assert.equal(isLifecycleType("tool_call"), false);
});

test("a tool call is a titled row with its arguments inline and pretty in the body", () => {
  const v = describeAgentEvent("tool_call", { id: "call_1", name: "get_weather", input: { city: "Paris", days: 2 } });
  assert.equal(v.kind, "tool_call");
  assert.equal(v.id, "call_1");
  assert.equal(v.title, 'Tool call · get_weather(city: "Paris", days: 2)');
  assert.equal(v.detail, '{\n  "city": "Paris",\n  "days": 2\n}');
  assert.equal(v.failed, false);
});

test("a tool result joins its call by id; an error is marked failed", () => {
  const ok = describeAgentEvent("tool_result", { id: "call_1", name: "get_weather", output: { temp_c: 18 } });
  assert.deepEqual([ok.kind, ok.id, ok.title, ok.failed], ["tool_result", "call_1", "Tool result · get_weather", false]);
  assert.equal(ok.detail, '{\n  "temp_c": 18\n}');
  const bad = describeAgentEvent("tool_result", { id: "c", name: "search", error: "backend down" });
  assert.deepEqual([bad.title, bad.detail, bad.failed], ["Tool error · search: backend down", "backend down", true]);
});

test("reasoning, status and unknown types are rows, never raw JSON in the conversation text", () => {
  assert.deepEqual(describeAgentEvent("reasoning", { text: "18 C is mild." }), {
    kind: "reasoning", id: "", title: "Reasoning", detail: "18 C is mild.", failed: false,
  });
  assert.equal(describeAgentEvent("status", { text: "searching…" }).title, "searching…");
  const other = describeAgentEvent("citation", { url: "https://example.com" });
  assert.equal(other.kind, "other");
  assert.equal(other.title, "citation");
  assert.match(other.detail, /"url": "https:\/\/example.com"/);
  // Missing or odd data never throws.
  for (const t of ["tool_call", "tool_result", "reasoning", "status", "x"]) {
    for (const d of [null, undefined, 3, "s", [], { id: {}, name: 5 }]) describeAgentEvent(t, d);
  }
});

test("long arguments are shortened inline", () => {
  const s = inlineArgs({ text: "x".repeat(200) });
  assert.equal(s.length, 60);
  assert.ok(s.endsWith("…"));
  assert.equal(inlineArgs([1, 2]), "[1,2]");
  assert.equal(inlineArgs(undefined), "");
});

test("an AGENT=openai tool call (function name, arguments as JSON text) is titled by its function", () => {
  const v = describeAgentEvent("tool_call", {
    id: "call_abc",
    type: "function",
    function: { name: "get_weather", arguments: '{"city":"Paris"}' },
  });
  assert.deepEqual([v.kind, v.id, v.title], ["tool_call", "call_abc", 'Tool call · get_weather(city: "Paris")']);
  assert.equal(v.detail, '{\n  "city": "Paris"\n}');
  // Arguments that are not JSON text (a model's broken output) show as the text.
  const raw = describeAgentEvent("tool_call", { id: "c", type: "function", function: { name: "f", arguments: "{oops" } });
  assert.equal(raw.title, 'Tool call · f("{oops")');
  assert.equal(raw.detail, '"{oops"');
});
