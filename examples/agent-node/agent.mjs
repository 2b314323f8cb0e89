// A streaming agent for Relay's HTTP agent protocol (docs/AGENT_PROTOCOL.md), with Node's
// standard library only. For each turn it verifies the request's signature, then streams:
//
//   tool_call   {"id","name":"word_count","input":{"text"}}
//   tool_result {"id","name":"word_count","output":{"words"}}
//   delta       {"text":"<word> "}   one per word of the reply
//   message     {"content":<the whole reply>}
//
// The reply is "You said: <input text>" (or a note when the input has no text). A resumed turn
// (request.resume) skips the words the partial text already holds and repeats neither the
// tool call nor its result. The agent stops a turn's work when Relay closes the request (a
// stop, a fence, a drain or a shutdown: the next request's history tells a stop apart, with the
// partial reply marked "stopped":true).
//
// Human approval: an input {"text":…,"ask":true} ends the turn with a question instead:
//
//   interrupt   {"id":"ask-<turn>","kind":"approval","payload":{"question","choices":["approve","deny"],"text"}}
//
// and its continuation (request.answer) streams "You said: <text>" word by word when the
// answer's value is "approve", else the message "(not approved)", without a tool call.
import { createHmac, timingSafeEqual } from "node:crypto";
import { createServer } from "node:http";

/** How far a request's Relay-Timestamp may be from this machine's clock. */
export const TOLERANCE_SECONDS = 300;

/** The Relay-Signature value for body signed at timestamp with secret. */
export function sign(secret, timestamp, body) {
  const mac = createHmac("sha256", secret);
  mac.update(`${timestamp}.`);
  mac.update(body);
  return `v1=${mac.digest("hex")}`;
}

/**
 * Checks a request's signature headers against its raw body; returns null when valid, else the
 * reason.
 * @param {string} secret AGENT_SECRET
 * @param {import("node:http").IncomingHttpHeaders} headers
 * @param {Buffer} body the raw body bytes
 * @param {number} [nowSeconds]
 */
export function verify(secret, headers, body, nowSeconds = Math.floor(Date.now() / 1000)) {
  const ts = headers["relay-timestamp"];
  const sig = headers["relay-signature"];
  if (typeof ts !== "string" || !/^\d+$/.test(ts)) return "missing or malformed Relay-Timestamp";
  if (typeof sig !== "string") return "missing Relay-Signature";
  if (Math.abs(nowSeconds - Number(ts)) > TOLERANCE_SECONDS) return "Relay-Timestamp outside the replay window";
  const want = Buffer.from(sign(secret, ts, body));
  const got = Buffer.from(sig);
  if (got.length !== want.length || !timingSafeEqual(got, want)) return "Relay-Signature does not match";
  return null;
}

/** The kind of the example agent's interrupts. */
export const APPROVAL = "approval";

/** The reply's words for a turn request (a continuation: for its answer). */
function replyWords(req) {
  if (req.answer) {
    const text = req.answer.interrupt?.payload?.text;
    const reply = req.answer.value === "approve" && typeof text === "string" && text.trim() ? `You said: ${text.trim()}` : "(not approved)";
    return reply.split(/\s+/).filter(Boolean);
  }
  const text = typeof req.input?.data?.text === "string" ? req.input.data.text.trim() : "";
  const reply = text ? `You said: ${text}` : `I got a ${req.input?.type ?? "?"} event without text.`;
  return reply.split(/\s+/).filter(Boolean);
}

const sleep = (ms, signal) =>
  new Promise((resolve) => {
    if (ms <= 0 || signal.aborted) return resolve();
    const onAbort = () => {
      clearTimeout(t);
      resolve();
    };
    const t = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal.addEventListener("abort", onAbort, { once: true });
  });

/**
 * Creates the agent's HTTP server (not listening yet).
 * @param {object} opts
 * @param {string} opts.secret AGENT_SECRET, shared with Relay
 * @param {"sse"|"ndjson"} [opts.format] response format (default sse)
 * @param {number} [opts.delayMs] pause between deltas (default 0; the first delta is not delayed)
 * @param {(turn: {request: object, idempotencyKey: string, signature: string|null}) => void} [opts.onTurn]
 *   called for every request that passed verification (signature: null) or failed it (the reason)
 * @param {(turn: {request: object}) => void} [opts.onClose] called when Relay closed a request before
 *   the agent ended its response (a stop, a fence, a drain, a shutdown)
 */
export function createAgent({ secret, format = "sse", delayMs = 0, onTurn = () => {}, onClose = () => {} }) {
  if (!secret) throw new Error("createAgent: secret (AGENT_SECRET) is required");
  return createServer(async (req, res) => {
    if (req.method !== "POST") {
      res.writeHead(405, { Allow: "POST" }).end();
      return;
    }
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const body = Buffer.concat(chunks);
    const bad = verify(secret, req.headers, body);
    let request = null;
    try {
      request = JSON.parse(body.toString("utf8"));
    } catch {
      // refused below
    }
    onTurn({ request, idempotencyKey: req.headers["idempotency-key"], signature: bad });
    if (bad) {
      res.writeHead(401, { "Content-Type": "text/plain" }).end(bad);
      return;
    }
    if (!request || typeof request.turn !== "string") {
      res.writeHead(400, { "Content-Type": "text/plain" }).end("body is not a turn request");
      return;
    }

    // Relay closes the request when the turn is cancelled (a stop, a fence, a drain, a
    // shutdown). After the agent's own end (message, interrupt) a close is no news.
    const stop = new AbortController();
    let ended = false;
    const end = () => {
      ended = true;
      res.end();
    };
    res.on("close", () => {
      if (!ended && !res.writableFinished) {
        stop.abort();
        onClose({ request });
      }
    });

    const send =
      format === "ndjson"
        ? (type, data) => res.write(`${JSON.stringify({ type, data })}\n`)
        : (type, data) => res.write(`data: ${JSON.stringify({ type, data })}\n\n`);
    res.writeHead(200, {
      "Content-Type": format === "ndjson" ? "application/x-ndjson" : "text/event-stream",
      "Cache-Control": "no-cache",
    });

    if (!request.answer && request.input?.data?.ask === true) {
      const text = typeof request.input.data.text === "string" ? request.input.data.text : "";
      send("interrupt", {
        id: `ask-${request.turn}`,
        kind: APPROVAL,
        payload: { question: "Stream this reply?", choices: ["approve", "deny"], text },
      });
      end(); // the turn ends with the question; Relay reads nothing after it
      return;
    }

    const words = replyWords(request);
    const partial = request.resume?.text ?? "";
    const done = partial.split(/\s+/).filter(Boolean).length;
    if (!request.resume && !request.answer) {
      const id = `call_${request.turn}`;
      const text = request.input?.data?.text ?? "";
      send("tool_call", { id, name: "word_count", input: { text } });
      send("tool_result", { id, name: "word_count", output: { words: text.split(/\s+/).filter(Boolean).length } });
    }
    for (const [i, w] of words.slice(done).entries()) {
      if (i > 0) await sleep(delayMs, stop.signal);
      if (stop.signal.aborted) return;
      send("delta", { text: `${w} ` });
    }
    send("message", { content: words.map((w) => `${w} `).join("") });
    end();
  });
}
