// Session events: their (epoch, seq) cursors, their types, and their data shapes.
// Within a session the gateway's cursors strictly increase, epoch first.

/**
 * Orders two cursors: negative if a is before b, 0 if equal, positive if after.
 * @param {{epoch: number, seq: number}} a
 * @param {{epoch: number, seq: number}} b
 */
export function compareCursor(a, b) {
  return a.epoch !== b.epoch ? a.epoch - b.epoch : a.seq - b.seq;
}

/** The cursor of an event payload {"epoch","seq",…}. */
export function cursorOf(event) {
  return { epoch: Number(event.epoch), seq: Number(event.seq) };
}

/** "e<epoch>·<seq>", how the pages print a cursor. */
export function formatCursor(c) {
  return c ? `e${c.epoch}·${c.seq}` : "—";
}

/** The event types a session topic carries, in the order a turn emits them. */
export const EVENT_TYPES = Object.freeze([
  "user_event",
  "turn_started",
  "turn_resumed",
  "delta",
  "message",
  "turn_completed",
  "turn_failed",
  "turn_stopped",
  "interrupt",
  "interrupt_expired",
]);

/** The id of a turn, "<epoch>-<seq>" of its input, from a turn_* event's data.turn. */
export function turnId(turn) {
  return turn ? `${Number(turn.epoch)}-${Number(turn.seq)}` : "";
}

/**
 * The text a user_event carries. The gateway records the accepted input as the
 * event's data, either {"text":…} or the whole envelope {"type","data":{"text":…}}.
 * Returns "" when there is no text.
 */
export function userText(data) {
  if (!data || typeof data !== "object") return "";
  if (typeof data.text === "string") return data.text;
  if (data.data && typeof data.data === "object" && typeof data.data.text === "string") return data.data.text;
  return "";
}
