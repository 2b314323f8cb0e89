// Client-side helpers for the end-to-end suite: the official phoenix client (given the
// `ws` WebSocket, since Node 20 has none), a raw `ws` socket that speaks V2 frames by
// hand, and Inbox, which lets a test wait for what arrives instead of for time.
import { Socket } from "phoenix";
import WebSocket from "ws";
import { EVENT_TYPES } from "../web/src/lib/events.js";

export { EVENT_TYPES };

/** How long any single wait may take before the test fails with what it saw. */
export const WAIT_MS = 10_000;

/**
 * An append-only list with waiters: until(pred) resolves as soon as pred(items) is
 * truthy (checked now and after every push), or rejects after ms with the items seen.
 * When pred returns the items array itself, until resolves with a snapshot of it.
 */
export class Inbox {
  constructor(name) {
    this.name = name;
    this.items = [];
    this.waiters = new Set();
  }

  push(item) {
    this.items.push(item);
    for (const w of [...this.waiters]) w.check();
  }

  /**
   * @template T
   * @param {(items: any[]) => T} pred
   * @param {string} what description for the timeout error
   * @param {number} [ms]
   * @returns {Promise<T>}
   */
  until(pred, what, ms = WAIT_MS) {
    return new Promise((resolve, reject) => {
      const w = {
        check: () => {
          let v;
          try {
            v = pred(this.items);
          } catch (err) {
            this.waiters.delete(w);
            clearTimeout(w.timer);
            reject(err);
            return;
          }
          if (v) {
            this.waiters.delete(w);
            clearTimeout(w.timer);
            resolve(v === this.items ? this.items.slice() : v);
          }
        },
      };
      w.timer = setTimeout(() => {
        this.waiters.delete(w);
        const seen = JSON.stringify(this.items.slice(-20), null, 1);
        reject(new Error(`${this.name}: timed out after ${ms} ms waiting for ${what}; last items:\n${seen}`));
      }, ms);
      this.waiters.add(w);
      w.check();
    });
  }
}

/**
 * Opens a phoenix Socket to the gateway and resolves once it is open; rejects on the
 * first transport error (the client would retry forever). The socket is disconnected
 * when the test ends. opts are passed to the Socket (after the test defaults).
 * @param {import("node:test").TestContext} t
 * @param {import("./gateway.mjs").Gateway} gw
 * @param {{token?: string} & object} [opts]
 * @returns {Promise<Socket>}
 */
export function openSocket(t, gw, opts = {}) {
  const socket = newSocket(gw, opts);
  t.after(() => socket.disconnect());
  return new Promise((resolve, reject) => {
    const refs = [
      socket.onOpen(() => {
        socket.off(refs);
        resolve(socket);
      }),
      socket.onError((err) => {
        socket.off(refs);
        socket.disconnect();
        reject(new Error(`socket error before open: ${err && (err.message || err.type || err)}`));
      }),
    ];
    socket.connect();
  });
}

/** A phoenix Socket to gw (not yet connected) with short test timeouts. */
export function newSocket(gw, opts = {}) {
  const { token = gw.token(), ...rest } = opts;
  return new Socket(`${gw.wsURL}/socket`, {
    transport: WebSocket,
    params: { token },
    timeout: 5_000,
    reconnectAfterMs: () => 200,
    rejoinAfterMs: () => 500,
    ...rest,
  });
}

/**
 * Joins a channel and resolves with the outcome; never rejects.
 * @returns {Promise<{status: "ok"|"error"|"timeout", response?: any}>}
 */
export function join(channel) {
  return new Promise((resolve) => {
    channel
      .join()
      .receive("ok", (response) => resolve({ status: "ok", response }))
      .receive("error", (response) => resolve({ status: "error", response }))
      .receive("timeout", () => resolve({ status: "timeout" }));
  });
}

/** A channel push as a promise of {status, response}; never rejects. */
export function push(channel, event, payload) {
  return new Promise((resolve) => {
    channel
      .push(event, payload)
      .receive("ok", (response) => resolve({ status: "ok", response }))
      .receive("error", (response) => resolve({ status: "error", response }))
      .receive("timeout", () => resolve({ status: "timeout" }));
  });
}

/**
 * Records every session event a channel receives as {type, payload}, in arrival order.
 * Must be called before join() so replayed events are caught.
 * @returns {Inbox}
 */
export function recordEvents(channel, name = channel.topic) {
  const inbox = new Inbox(name);
  for (const type of EVENT_TYPES) channel.on(type, (payload) => inbox.push({ type, payload }));
  return inbox;
}

/**
 * Resolves with a snapshot of the items up to and including the first turn_completed
 * (or turn_failed, or turn_stopped) at or after index from.
 */
export function untilTurnEnds(inbox, from = 0) {
  return inbox.until((items) => {
    for (let i = from; i < items.length; i++) {
      const type = items[i].type;
      if (type === "turn_completed" || type === "turn_failed" || type === "turn_stopped") return items.slice(0, i + 1);
    }
    return null;
  }, "turn_completed");
}

/**
 * A raw V2 WebSocket: frames are arrays [join_ref, ref, topic, event, payload].
 * @typedef {object} RawSocket
 * @property {WebSocket} ws
 * @property {Inbox} frames decoded inbound text frames (undecodable ones as {raw})
 * @property {(frame: any[] | string | Buffer) => void} send arrays are JSON-encoded
 * @property {Promise<{code: number, reason: string}>} closed
 * @property {(ref: string, what?: string) => Promise<any[]>} reply waits for the phx_reply with that ref
 */

/**
 * Opens a raw socket to /socket/websocket?token=…&vsn=2.0.0 and resolves once open.
 * @returns {Promise<RawSocket>}
 */
export async function rawSocket(t, gw, { token = gw.token(), vsn = "2.0.0", maxPayload } = {}) {
  const url = `${gw.wsURL}/socket/websocket?token=${encodeURIComponent(token)}&vsn=${vsn}`;
  const ws = new WebSocket(url, maxPayload ? { maxPayload } : undefined);
  const frames = new Inbox(`raw ${url.replace(/token=[^&]*/, "token=…")}`);
  const closed = new Promise((resolve) => {
    ws.on("close", (code, reason) => resolve({ code, reason: reason.toString() }));
  });
  ws.on("error", (err) => frames.push({ error: String(err) }));
  ws.on("message", (data, isBinary) => {
    if (isBinary) {
      frames.push({ binary: Buffer.from(data).toString("hex") });
      return;
    }
    try {
      frames.push(JSON.parse(data.toString()));
    } catch {
      frames.push({ raw: data.toString() });
    }
  });
  t.after(() => {
    if (ws.readyState === WebSocket.OPEN || ws.readyState === WebSocket.CONNECTING) ws.terminate();
  });
  await new Promise((resolve, reject) => {
    ws.once("open", resolve);
    ws.once("error", reject);
    ws.once("unexpected-response", (_req, res) => reject(new Error(`upgrade refused: HTTP ${res.statusCode}`)));
  });
  return {
    ws,
    frames,
    closed,
    send(frame) {
      ws.send(Array.isArray(frame) ? JSON.stringify(frame) : frame);
    },
    reply(ref, what = `phx_reply ref ${ref}`) {
      return frames.until((items) => items.find((f) => Array.isArray(f) && f[1] === ref && f[3] === "phx_reply"), what);
    },
  };
}

/**
 * Tries a WebSocket upgrade and resolves with {opened:true} or {opened:false, status}
 * (the HTTP status of the refused upgrade).
 */
export function tryUpgrade(url, protocols) {
  return new Promise((resolve) => {
    const ws = new WebSocket(url, protocols);
    ws.once("open", () => {
      ws.terminate();
      resolve({ opened: true });
    });
    ws.once("unexpected-response", (_req, res) => {
      resolve({ opened: false, status: res.statusCode });
      res.resume();
      ws.terminate();
    });
    ws.once("error", (err) => resolve({ opened: false, status: 0, error: String(err) }));
  });
}
