// The events an agent passes through (tool_call, tool_result, reasoning, status, any other
// type of docs/AGENT_PROTOCOL.md): which channel messages are session events, and how the
// demo page shows each one (a collapsible row, never raw JSON in the conversation).
import { EVENT_TYPES } from "./events.js";

/**
 * Reports whether a channel message is a session event: a payload with a numeric epoch and
 * seq, under any type except the channel layer's own (phx_*, presence_*).
 * @param {string} event
 * @param {unknown} payload
 */
export function isSessionEvent(event, payload) {
  if (typeof event !== "string" || event.startsWith("phx_") || event.startsWith("presence_")) return false;
  if (!payload || typeof payload !== "object") return false;
  return Number.isFinite(payload.epoch) && Number.isFinite(payload.seq);
}

/** Reports whether type is one of the gateway's own session event types. */
export function isLifecycleType(type) {
  return EVENT_TYPES.includes(type);
}

/** JSON of v, pretty-printed, shortened past max characters. */
export function pretty(v, max = 4000) {
  let s;
  try {
    s = JSON.stringify(v, null, 2);
  } catch {
    s = String(v);
  }
  if (s === undefined) s = String(v);
  return s.length > max ? s.slice(0, max - 1) + "…" : s;
}

/** A one-line argument list: {city:"Paris", n:2} → city: "Paris", n: 2 (shortened). */
export function inlineArgs(input, max = 60) {
  let s;
  if (input && typeof input === "object" && !Array.isArray(input)) {
    s = Object.entries(input)
      .map(([k, v]) => `${k}: ${JSON.stringify(v)}`)
      .join(", ");
  } else {
    s = input === undefined ? "" : JSON.stringify(input);
  }
  return s.length > max ? s.slice(0, max - 1) + "…" : s;
}

/** The value of a JSON text, or the text itself when it is not JSON (undefined stays). */
export function jsonText(s) {
  if (typeof s !== "string") return s;
  try {
    return JSON.parse(s);
  } catch {
    return s;
  }
}

/**
 * How one pass-through event is shown.
 *   kind     "tool_call" | "tool_result" | "reasoning" | "status" | "other"
 *   id       tool call id (tool_call, tool_result) or "" — a result joins its call's row
 *   title    the row's one-line summary
 *   detail   the expandable body (pretty JSON or text), "" for none
 *   failed   true for a tool error
 * @param {string} type
 * @param {any} data
 */
export function describeAgentEvent(type, data) {
  const d = data && typeof data === "object" ? data : {};
  const id = typeof d.id === "string" || typeof d.id === "number" ? String(d.id) : "";
  const name = typeof d.name === "string" && d.name ? d.name : "tool";
  switch (type) {
    case "tool_call": {
      // {id, name, input} (docs/AGENT_PROTOCOL.md), or AGENT=openai's chat completions
      // shape {id, type:"function", function:{name, arguments:"<JSON text>"}}.
      const fn = d.function && typeof d.function === "object" ? d.function : {};
      const callName = typeof d.name === "string" && d.name ? d.name : typeof fn.name === "string" && fn.name ? fn.name : "tool";
      const args = d.input ?? d.arguments ?? jsonText(fn.arguments);
      return {
        kind: "tool_call",
        id,
        title: `Tool call · ${callName}(${inlineArgs(args)})`,
        detail: pretty(args ?? {}),
        failed: typeof d.error === "string" && d.error !== "",
      };
    }
    case "tool_result": {
      const failed = typeof d.error === "string" && d.error !== "";
      return {
        kind: "tool_result",
        id,
        title: failed ? `Tool error · ${name}: ${d.error}` : `Tool result · ${name}`,
        detail: failed ? d.error : pretty(d.output ?? d.result ?? d.content ?? {}),
        failed,
      };
    }
    case "reasoning":
      return { kind: "reasoning", id: "", title: "Reasoning", detail: typeof d.text === "string" ? d.text : pretty(d), failed: false };
    case "status":
      return { kind: "status", id: "", title: typeof d.text === "string" ? d.text : `status ${inlineArgs(d)}`, detail: "", failed: false };
    default:
      return { kind: "other", id, title: type, detail: pretty(d), failed: false };
  }
}
