// Event cursors: the (epoch, seq) position of a session event. Within a session the
// gateway's cursors strictly increase, epoch first.

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
  "delta",
  "message",
  "turn_completed",
  "turn_failed",
]);
