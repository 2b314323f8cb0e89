// The demo conversation page: one phoenix Socket, one session channel at a time.
//
// Joins "session:<id>" with the last event seen (so a rejoin after a reconnect resumes
// without a gap; an event past a gap makes it leave and rejoin, README "Gaps"), renders the streaming reply as deltas arrive, shows the (epoch, seq) of
// every event, which node serves the socket (join reply "node") and which owns the
// session (join reply "owner", refreshed from GET /api/sessions/{id}), and sends "message" pushes that follow the
// gateway's retry directives. Event types an agent passes through (tool_call, tool_result,
// reasoning, status, …) show as collapsible rows inside the reply, between its text.
// Who is watching the session, on any node, comes from phoenix's Presence.
import "../static/style.css";
import { Presence, Socket } from "phoenix";
import { byId, bearer, fetchJSON, h } from "./lib/dom.js";
import { describeAgentEvent, isLifecycleType, isSessionEvent } from "./lib/agent-events.js";
import { compareCursor, cursorOf, formatCursor, turnId, userText } from "./lib/events.js";
import { pushOnce, sendWithRetry } from "./lib/retry.js";
import { describeWatchers, watchersOf } from "./lib/watchers.js";
import { peekClaims, rememberToken, takeToken } from "./lib/token.js";

const SESSION_KEY = "relay.session";
const SESSION_ID = /^[A-Za-z0-9_.:-]{1,128}$/;

const ui = {
  connect: byId("connect"),
  token: byId("token"),
  session: byId("session"),
  who: byId("who"),
  socketState: byId("socket-state"),
  channelState: byId("channel-state"),
  node: byId("node"),
  owner: byId("owner"),
  cursor: byId("cursor"),
  watching: byId("watching"),
  messages: byId("messages"),
  events: byId("events"),
  compose: byId("compose"),
  text: byId("text"),
  send: byId("send"),
  stop: byId("stop"),
  multitask: byId("multitask"),
  ask: byId("ask"),
  notice: byId("notice"),
};

/** @type {Socket | null} */
let socket = null;
let socketToken = "";
/** The open session view, or null. */
let view = null;

function randomSessionId() {
  const bytes = crypto.getRandomValues(new Uint8Array(5));
  return "demo-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

function setPill(el, text, tone) {
  el.textContent = text;
  el.dataset.tone = tone;
}

function notice(text, tone = "info") {
  ui.notice.hidden = !text;
  ui.notice.textContent = text || "";
  ui.notice.dataset.tone = tone;
}

function describeClaims(token) {
  const c = peekClaims(token);
  if (!c) return token ? "The token is not a readable JWT." : "No token: open the link the gateway logs at start (…/#token=…).";
  const sessions = Array.isArray(c.sessions) ? c.sessions.join(", ") : "none";
  const exp = c.exp ? ` · expires ${new Date(c.exp * 1000).toLocaleString()}` : "";
  return `Signed in as ${c.sub || "?"} · sessions: ${sessions}${exp}`;
}

let tokenCheckedAt = 0;

/**
 * After a failed connect, asks the HTTP API whether the token is the reason (a browser
 * does not see the 403 of a refused WebSocket upgrade): a development gateway signs
 * with a new random secret at every start, so a remembered token stops working.
 */
async function checkToken(token) {
  if (!view || Date.now() - tokenCheckedAt < 5000) return;
  tokenCheckedAt = Date.now();
  const res = await fetchJSON(`/api/sessions/${encodeURIComponent(view.id)}`, bearer(token));
  if (res.status === 0) tokenCheckedAt = 0; // the gateway is down: ask again on the next failure
  if (token !== socketToken) return;
  if (res.status === 401) {
    ui.who.textContent = `${describeClaims(token)} · refused by the gateway`;
    notice("The gateway refuses this token. A restarted development gateway signs with a new secret: open the new URL it logged (…/#token=…) or paste its api_token.", "bad");
  } else if (res.status === 403) {
    notice("This token does not allow this session.", "bad");
  }
}

/** Opens (or reuses) the socket for the current token. */
function ensureSocket(token) {
  if (socket && socketToken === token) return socket;
  if (socket) socket.disconnect();
  socketToken = token;
  // Where WebSockets are blocked (some proxies), fall back to the LongPoll transport.
  socket = new Socket("/socket", { params: () => ({ token: socketToken }), longPollFallbackMs: 2500 });
  socket.onOpen(() => setPill(ui.socketState, "open", "ok"));
  socket.onError(() => {
    setPill(ui.socketState, "error · retrying", "bad");
    checkToken(token);
  });
  socket.onClose(() => setPill(ui.socketState, "disconnected · retrying", "warn"));
  setPill(ui.socketState, "connecting", "warn");
  socket.connect();
  return socket;
}

/** The {interrupt, value} of a history user message that answered an interrupt, or null. */
function answerOf(content) {
  try {
    const v = JSON.parse(content);
    return v && typeof v === "object" && typeof v.interrupt === "string" && "value" in v ? v : null;
  } catch {
    return null;
  }
}

/** One session: its channel, the events received, and their rendering. */
class SessionView {
  constructor(sock, id) {
    this.id = id;
    this.token = socketToken;
    this.cursor = null; // last event applied, {epoch, seq}
    this.received = []; // every event payload applied, in order
    this.replayLeft = 0; // events still to come from the join's replay
    this.bubble = null; // the assistant bubble being streamed
    this.running = ""; // the turn id "<epoch>-<seq>" streaming now ("" when none)
    this.closed = false;
    this.socket = sock;
    this.rejoins = 0; // rejoins after a seq gap (README "Gaps")
    this.rejoining = false;
    ui.messages.replaceChildren();
    ui.events.replaceChildren();
    document.body.dataset.rejoins = "0";
    this.joinChannel();
  }

  /** Joins the session topic on a new channel, from the last event applied. */
  joinChannel() {
    const ch = this.socket.channel(`session:${this.id}`, () => ({
      last_event: this.cursor || { epoch: 0, seq: 0 },
    }));
    this.channel = ch;
    // Viewers cluster-wide; above PRESENCE_MAX_LISTED the gateway sends counts only.
    this.presence = new Presence(ch);
    this.watchCount = null;
    const showWatchers = () => {
      if (!this.closed && ch === this.channel) ui.watching.textContent = describeWatchers(watchersOf(this.presence), this.watchCount);
    };
    this.presence.onSync(showWatchers);
    ch.on("presence_count", ({ count }) => {
      this.watchCount = count;
      showWatchers();
    });
    ui.watching.textContent = "—";
    // Every session event, whatever its type (agents add their own): the hook sees each
    // message before the channel's bindings. A channel left for a rejoin is ignored.
    ch.onMessage = (event, payload) => {
      if (ch === this.channel && isSessionEvent(event, payload)) this.onEvent(event, payload);
      return payload;
    };
    ch.onError(() => {
      if (ch !== this.channel) return;
      if (!this.closed) setPill(ui.channelState, "rejoining", "warn");
      enableCompose(false); // until the rejoin's reply (onJoined)
    });
    ch.onClose(() => {
      if (ch !== this.channel) return;
      if (!this.closed) setPill(ui.channelState, "closed by server", "bad");
      enableCompose(false);
    });
    setPill(ui.channelState, "joining", "warn");
    ch
      .join()
      .receive("ok", (reply) => this.onJoined(reply))
      .receive("error", (reply) => {
        setPill(ui.channelState, `refused: ${reply && reply.reason}`, "bad");
        enableCompose(false);
        if (reply && (reply.reason === "unauthorized" || reply.reason === "invalid_session_id")) {
          this.close(); // permanent: stop the client's rejoin loop
          notice(`Join refused: ${reply.reason}.`, "bad");
        }
      })
      .receive("timeout", () => setPill(ui.channelState, "join timed out · retrying", "warn"));
  }

  close() {
    this.closed = true;
    this.channel.leave();
  }

  /**
   * README "Gaps": an event whose seq is more than one past the last event held (same
   * epoch), or a new epoch's event that does not continue from it (its prev is after the
   * last event held, or it is not the epoch's first event, which carries prev), means
   * events were missed.
   */
  isGap(c, payload) {
    const last = this.cursor;
    if (!last || (last.epoch === 0 && last.seq === 0)) return false;
    if (c.epoch === last.epoch) return c.seq > last.seq + 1;
    const prev = payload.prev;
    if (!prev) return true;
    return compareCursor(last, cursorOf(prev)) < 0;
  }

  /** Leaves the topic and joins it again from the last contiguous event (the replay fills the gap). */
  rejoin(at) {
    if (this.rejoining || this.closed) return;
    this.rejoining = true;
    this.rejoins++;
    document.body.dataset.rejoins = String(this.rejoins);
    ui.events.prepend(
      h("tr", { class: "gap" }, h("td", { class: "mono", text: formatCursor(at) }), h("td", {}, h("span", { class: "type type-gap", text: "gap" })), h("td", { class: "data", text: `missed events after ${formatCursor(this.cursor)}: rejoining from there` })),
    );
    this.channel.leave();
    this.joinChannel();
  }

  onJoined(reply) {
    const r = reply || {};
    this.rejoining = false;
    const gaps = this.rejoins ? ` · ${this.rejoins} gap rejoin${this.rejoins > 1 ? "s" : ""}` : "";
    setPill(ui.channelState, `joined · replayed ${r.replayed ?? 0}${gaps}`, "ok");
    ui.node.textContent = r.node || "—";
    if (r.owner) ui.owner.textContent = r.owner;
    this.replayLeft = Number(r.replayed) || 0;
    enableCompose(true);
    if (r.recovered === false) {
      notice("The replay log no longer reaches back that far; loaded the history instead.");
      this.loadHistory();
    } else {
      this.refreshOwner();
    }
  }

  async fetchSession() {
    const res = await fetchJSON(`/api/sessions/${encodeURIComponent(this.id)}`, bearer(this.token));
    if (!res.ok) {
      const b = res.body || {};
      ui.owner.textContent = `? (${b.error || res.status})`;
      return null;
    }
    ui.owner.textContent = res.body.owner || "none";
    return res.body;
  }

  refreshOwner() {
    this.fetchSession();
  }

  /** Rebuilds the conversation from GET history, then re-applies newer events. */
  async loadHistory() {
    const s = await this.fetchSession();
    if (!s || this.closed) return;
    const base = { epoch: Number(s.epoch) || 0, seq: Number(s.seq) || 0 };
    ui.messages.replaceChildren();
    this.bubble = null;
    for (const m of s.history || []) {
      if (m.role === "interrupt") {
        try {
          this.addInterrupt(JSON.parse(m.content));
        } catch {
          this.addBubble("system", m.content, "done");
        }
      } else if (m.role === "user" && answerOf(m.content)) {
        const a = answerOf(m.content);
        this.markAnswered(a.interrupt, a.value);
      } else this.addBubble(m.role, m.content, m.stopped ? "stopped" : "done");
    }
    const newer = this.received.filter((e) => compareCursor(cursorOf(e), base) > 0);
    if (!this.cursor || compareCursor(base, this.cursor) > 0) this.setCursor(base);
    for (const e of newer) this.render(e.type, e);
  }

  setCursor(c) {
    this.cursor = c;
    ui.cursor.textContent = formatCursor(c);
  }

  onEvent(type, payload) {
    if (this.closed || !payload) return;
    const c = cursorOf(payload);
    if (this.cursor && compareCursor(c, this.cursor) <= 0) return; // seen already
    if (this.rejoining) return; // the rejoin's replay brings it
    if (this.isGap(c, payload)) {
      this.rejoin(c);
      return;
    }
    const replayed = this.replayLeft > 0;
    if (replayed) this.replayLeft--;
    this.setCursor(c);
    this.received.push({ ...payload, type });
    this.logEvent(type, payload, replayed);
    this.render(type, payload);
    // A live turn start: the session has an owner now (a new session's join had none).
    if (type === "turn_started" && !replayed) this.refreshOwner();
  }

  logEvent(type, payload, replayed) {
    const data = JSON.stringify(payload.data ?? {});
    const row = h(
      "tr",
      { class: replayed ? "replayed" : "", title: replayed ? "replayed" : "live" },
      h("td", { class: "mono", text: formatCursor(cursorOf(payload)) }),
      h("td", {}, h("span", { class: `type type-${type}`, text: type })),
      h("td", { class: "mono data", text: data.length > 80 ? data.slice(0, 77) + "…" : data }),
    );
    ui.events.prepend(row);
  }

  addBubble(role, text, state) {
    const body = h("div", { class: "body", text: text || "" });
    const li = h("li", { class: `msg ${role || "system"} ${state || ""}` }, h("div", { class: "role", text: role || "system" }), body);
    ui.messages.append(li);
    li.scrollIntoView({ block: "end" });
    // segments: the reply's text blocks, split by agent rows; text: all of it so far.
    // reasoning: the <pre> of the reasoning row further pieces join, or null.
    return { li, body, segments: [body], text: text || "", tools: new Map(), reasoning: null };
  }

  /** The assistant bubble of the running turn, created if needed. */
  streaming() {
    if (!this.bubble) this.bubble = this.addBubble("assistant", "", "streaming");
    return this.bubble;
  }

  appendText(t) {
    const b = this.streaming();
    b.body.textContent += t;
    b.text += t;
    b.li.scrollIntoView({ block: "end" });
  }

  /** Replaces the reply's text (a restart, or a final message that differs). */
  setText(t) {
    const b = this.streaming();
    for (const seg of b.segments) seg.textContent = "";
    b.reasoning = null;
    b.body.textContent = t;
    b.text = t;
  }

  /**
   * Shows an agent's own event as a collapsible row in the reply; a tool_result joins the
   * row of its tool_call. Later deltas go below the row.
   */
  addAgentEvent(type, data) {
    const b = this.streaming();
    const v = describeAgentEvent(type, data);
    // Reasoning streams in pieces (one event per chunk): while no reply text came after
    // the open reasoning row, a further piece joins that row instead of adding one.
    if (v.kind === "reasoning" && b.reasoning && b.body.textContent === "" && typeof (data && data.text) === "string") {
      b.reasoning.textContent += data.text;
      return;
    }
    b.reasoning = null;
    const call = v.kind === "tool_result" && v.id ? b.tools.get(v.id) : null;
    if (call) {
      call.summary.textContent = v.failed ? v.title : `${call.summary.textContent} ✓`;
      call.row.classList.toggle("failed", v.failed);
      call.row.append(h("div", { class: "agent-label", text: v.failed ? "Error" : "Result" }), h("pre", { class: "mono", text: v.detail }));
    } else {
      const summary = h("summary", { text: v.title });
      const row = v.detail
        ? h("details", { class: `agent-event agent-${v.kind}${v.failed ? " failed" : ""}` }, summary, h("pre", { class: "mono", text: v.detail }))
        : h("div", { class: `agent-event agent-${v.kind}` }, summary);
      b.li.append(row);
      if (v.kind === "tool_call" && v.id) b.tools.set(v.id, { row, summary });
      if (v.kind === "reasoning" && v.detail && typeof (data && data.text) === "string") b.reasoning = row.querySelector("pre");
      b.body = h("div", { class: "body" });
      b.segments.push(b.body);
      b.li.append(b.body);
    }
    b.li.scrollIntoView({ block: "end" });
  }

  setRunning(turn) {
    this.running = turn;
    ui.stop.hidden = !turn;
    ui.stop.disabled = false;
  }

  /** Shows an interrupt as a card with a button per choice. */
  addInterrupt(iv) {
    const p = iv.payload || {};
    const choices = Array.isArray(p.choices) ? p.choices : ["approve", "deny"];
    const buttons = choices.map((c) =>
      h("button", { type: "button", text: String(c), onclick: () => this.answer(iv.id, c) }),
    );
    const card = h(
      "li",
      { class: "msg interrupt", "data-interrupt": iv.id },
      h("div", { class: "role", text: `asks · ${iv.kind}` }),
      h("div", { class: "body", text: p.question || JSON.stringify(p) }),
      h("div", { class: "choices" }, ...buttons),
    );
    ui.messages.append(card);
    card.scrollIntoView({ block: "end" });
  }

  /** Marks an interrupt's card answered (by anyone) and disables its buttons. */
  markAnswered(id, value) {
    const card = ui.messages.querySelector(`[data-interrupt="${CSS.escape(id)}"]`);
    if (!card) return;
    for (const b of card.querySelectorAll("button")) b.disabled = true;
    card.classList.add("done");
    card.querySelector(".role").textContent += ` · answered ${JSON.stringify(value)}`;
  }

  render(type, e) {
    const data = e.data || {};
    switch (type) {
      case "user_event":
        if (data.type === "resume" && data.data) {
          this.markAnswered(data.data.interrupt, data.data.value);
          break;
        }
        this.addBubble("user", userText(data) || JSON.stringify(data), "done");
        break;
      case "interrupt":
        if (this.bubble) this.bubble.li.remove();
        this.bubble = null;
        this.setRunning("");
        this.addInterrupt(data);
        break;
      case "interrupt_expired": {
        const card = ui.messages.querySelector(`[data-interrupt="${CSS.escape(data.interrupt || "")}"]`);
        if (card) for (const b of card.querySelectorAll("button")) b.disabled = true;
        this.addBubble("system", `The question ${data.interrupt} expired.`, "failed");
        break;
      }
      case "turn_stopped":
        if (this.bubble) {
          this.bubble.body.textContent = data.partial ?? this.bubble.body.textContent;
          this.bubble.li.classList.replace("streaming", "stopped");
        }
        this.bubble = null;
        this.setRunning("");
        break;
      case "turn_started":
        // A restart (attempt > 1) replaces the partial reply of its turn.
        if (this.bubble && data.attempt > 1) this.setText("");
        else this.bubble = this.addBubble("assistant", "", "streaming");
        this.setRunning(turnId(data.turn));
        break;
      case "turn_resumed":
        // Another node continues the turn after the deltas already shown: it owns the
        // session now.
        if (!this.bubble) this.bubble = this.addBubble("assistant", "", "streaming");
        this.setRunning(turnId(data.turn));
        this.refreshOwner();
        break;
      case "delta":
        this.appendText(typeof data.text === "string" ? data.text : "");
        break;
      case "message":
        if (data.role && data.role !== "assistant") {
          this.addBubble(data.role, data.content, "done");
          break;
        }
        if (typeof data.content === "string" && data.content !== this.streaming().text) this.setText(data.content);
        break;
      case "turn_completed":
        if (this.bubble) this.bubble.li.classList.replace("streaming", "done");
        this.bubble = null;
        this.setRunning("");
        this.refreshOwner();
        break;
      case "turn_failed": {
        const why = data.message || data.reason || data.error || "turn failed";
        if (this.bubble) this.bubble.li.classList.replace("streaming", "failed");
        this.addBubble("system", `Turn failed: ${why}`, "failed");
        this.bubble = null;
        this.setRunning("");
        break;
      }
      default:
        if (!isLifecycleType(type)) this.addAgentEvent(type, data);
    }
  }

  /** Stops the running turn (push "stop"), following retry directives. */
  async stop() {
    if (!this.running) return;
    ui.stop.disabled = true;
    const out = await sendWithRetry(() => pushOnce(this.channel, "stop", { turn: this.running }), {
      onRetry: ({ afterMs }) => notice(`Session is moving: re-sending the stop in ${afterMs} ms.`, "warn"),
    });
    if (out.status === "ok" && out.response && out.response.stopped === false) {
      notice(`Nothing to stop: turn ${out.response.turn} is not running.`);
    } else if (out.status !== "ok") {
      const r = out.response || {};
      notice(`Stop refused: ${r.reason || out.status}`, "bad");
    }
    ui.stop.disabled = false;
  }

  /** Answers an interrupt (push "resume"), following retry directives. */
  async answer(id, value) {
    const payload = { interrupt: id, value, idempotency_key: crypto.randomUUID() };
    const out = await sendWithRetry(() => pushOnce(this.channel, "resume", payload), {
      onRetry: ({ afterMs }) => notice(`Session is moving: re-sending the answer in ${afterMs} ms.`, "warn"),
    });
    if (out.status !== "ok") {
      const r = out.response || {};
      notice(`Answer refused: ${r.reason || out.status}${r.message ? ` — ${r.message}` : ""}`, "bad");
    }
  }

  /** Sends the text as a "message" push, following retry directives. */
  async send(text, { multitask, ask } = {}) {
    const payload = { data: ask ? { text, ask: true } : { text }, idempotency_key: crypto.randomUUID() };
    // Always named: the session's first message sets the session's mode, which later
    // messages without multitask follow (README "Turn control").
    if (multitask) payload.multitask = multitask;
    notice("");
    const out = await sendWithRetry(() => pushOnce(this.channel, "message", payload), {
      onRetry: ({ afterMs, remainingMs }) =>
        notice(`Session is moving: re-sending in ${afterMs} ms (${remainingMs} ms of retry budget left).`, "warn"),
    });
    switch (out.status) {
      case "ok":
        notice(out.response && out.response.duplicate ? "Already accepted (duplicate)." : "");
        return true;
      case "gave_up":
        notice(`Not sent: the session kept moving and the retry budget ran out after ${out.attempts} attempts.`, "bad");
        return false;
      case "timeout":
        notice("Not confirmed: the gateway did not answer in time.", "bad");
        return false;
      default: {
        const r = out.response || {};
        const busy = r.reason === "session_busy_turn" ? ` (turn ${r.turn} is running)` : "";
        notice(`Refused: ${r.reason || "error"}${busy}${r.message ? ` — ${r.message}` : ""}`, "bad");
        return false;
      }
    }
  }
}

function enableCompose(on) {
  ui.text.disabled = !on;
  ui.send.disabled = !on;
}

function open() {
  const token = ui.token.value.trim();
  const id = ui.session.value.trim();
  ui.who.textContent = describeClaims(token);
  if (!token) {
    notice("A token is needed to connect.", "bad");
    return;
  }
  if (!SESSION_ID.test(id)) {
    notice("A session id is 1–128 characters of A–Z a–z 0–9 _ . : -", "bad");
    return;
  }
  rememberToken(localStorage, token);
  localStorage.setItem(SESSION_KEY, id);
  notice("");
  if (view) view.close();
  ui.node.textContent = "—";
  ui.owner.textContent = "—";
  ui.cursor.textContent = "—";
  view = new SessionView(ensureSocket(token), id);
}

// "#token=…&session=…" opens that session; the token is then kept out of the URL.
const linkedSession = new URLSearchParams(location.hash.replace(/^#/, "")).get("session");
ui.token.value = takeToken(location, localStorage, history);
ui.session.value = linkedSession || localStorage.getItem(SESSION_KEY) || randomSessionId();
ui.who.textContent = describeClaims(ui.token.value);

ui.connect.addEventListener("submit", (ev) => {
  ev.preventDefault();
  open();
});

ui.compose.addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const text = ui.text.value.trim();
  if (!text || !view) return;
  ui.send.disabled = true;
  const sent = await view.send(text, { multitask: ui.multitask.value, ask: ui.ask.checked });
  ui.send.disabled = false;
  if (sent) ui.text.value = "";
  ui.text.focus();
});

ui.text.addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey) {
    ev.preventDefault();
    ui.compose.requestSubmit();
  }
});

ui.stop.addEventListener("click", () => view && view.stop());

if (ui.token.value) open();
