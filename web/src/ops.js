// The ops page: polls GET /admin/node, /admin/sessions, /admin/viewers and /admin/muster
// (the dump in its text form, since JSON.parse would round the JSON form's 64-bit
// view_hash and incarnation; the pubsub counters from the JSON form) with the admin
// token (Authorization: Bearer …) and offers POST /admin/drain.
import "../static/style.css";
import { byId, bearer, fetchJSON, h } from "./lib/dom.js";

const TOKEN_KEY = "relay.admin_token";

const ui = {
  auth: byId("auth"),
  token: byId("admin-token"),
  interval: byId("interval"),
  forget: byId("forget"),
  status: byId("poll-status"),
  node: byId("node"),
  drain: byId("drain"),
  notice: byId("notice"),
  sessions: byId("sessions"),
  sessionCount: byId("session-count"),
  viewers: byId("viewers"),
  viewerCount: byId("viewer-count"),
  muster: byId("muster"),
};

let timer = null;
let polling = false;
let lastNode = null;

function notice(text, tone = "info") {
  ui.notice.hidden = !text;
  ui.notice.textContent = text || "";
  ui.notice.dataset.tone = tone;
}

function errorText(res) {
  const b = res.body;
  if (b && typeof b === "object") return `${res.status} ${b.error || ""}${b.message ? ` — ${b.message}` : ""}`;
  return `${res.status} ${typeof b === "string" ? b.slice(0, 120) : ""}`;
}

function cell(v) {
  if (v === null || v === undefined) return "";
  return typeof v === "object" ? JSON.stringify(v) : String(v);
}

/** One row per field; a nested object's fields get dotted names (cluster.status). */
function nodeRows(obj, prefix, rows) {
  for (const [k, v] of Object.entries(obj || {})) {
    const name = prefix + k;
    if (v && typeof v === "object" && !Array.isArray(v)) nodeRows(v, `${name}.`, rows);
    else rows.push(h("dt", { text: name }), h("dd", { text: Array.isArray(v) ? v.join(", ") : cell(v) }));
  }
  return rows;
}

function renderNode(node) {
  lastNode = node;
  const rows = nodeRows(node, "", []);
  ui.node.replaceChildren(...rows);
  ui.drain.disabled = !node || node.draining === true;
  if (node && node.draining) ui.drain.textContent = "Draining…";
}

/** Accepts an array of rows or an object holding one (e.g. {"sessions":[…]}). */
function rowsOf(body) {
  if (Array.isArray(body)) return body;
  if (body && typeof body === "object") {
    for (const v of Object.values(body)) if (Array.isArray(v)) return v;
  }
  return [];
}

function renderSessions(body) {
  const rows = rowsOf(body);
  ui.sessionCount.textContent = `(${rows.length})`;
  if (rows.length === 0) {
    ui.sessions.replaceChildren(h("tbody", {}, h("tr", {}, h("td", { class: "muted", text: "no sessions on this node" }))));
    return;
  }
  const objects = rows.map((r) => (r && typeof r === "object" ? r : { value: r }));
  const cols = [...new Set(objects.flatMap((r) => Object.keys(r)))];
  ui.sessions.replaceChildren(
    h("thead", {}, h("tr", {}, ...cols.map((c) => h("th", { text: c })))),
    h("tbody", {}, ...objects.map((r) => h("tr", {}, ...cols.map((c) => h("td", { class: "mono", text: cell(r[c]) }))))),
  );
}

/**
 * Renders GET /admin/viewers: sockets joined per session topic on this node and
 * across the cluster ({"local":{topic:n},"cluster":{topic:n},"peers":[…]}).
 */
function renderViewers(body) {
  const local = (body && body.local) || {};
  const cluster = (body && body.cluster) || {};
  const peers = (body && body.peers) || [];
  const topics = Object.keys(cluster).sort((a, b) => cluster[b] - cluster[a] || a.localeCompare(b));
  const total = topics.reduce((sum, t) => sum + cluster[t], 0);
  ui.viewerCount.textContent = `(${total} on ${peers.length + 1} node${peers.length ? "s" : ""})`;
  if (topics.length === 0) {
    ui.viewers.replaceChildren(h("tbody", {}, h("tr", {}, h("td", { class: "muted", text: "no viewers" }))));
    return;
  }
  ui.viewers.replaceChildren(
    h("thead", {}, h("tr", {}, h("th", { text: "topic" }), h("th", { text: "this node" }), h("th", { text: "cluster" }))),
    h(
      "tbody",
      {},
      ...topics.map((t) =>
        h("tr", {}, h("td", { class: "mono", text: t }), h("td", { text: String(local[t] || 0) }), h("td", { text: String(cluster[t]) })),
      ),
    ),
  );
}

/** The Muster dump's text form, then this node's pubsub counters from the JSON form. */
function musterText(text, body) {
  const counts = (body && body.pubsub) || {};
  const pubsub = Object.entries(counts)
    .map(([k, v]) => `${k} ${v}`)
    .join(", ");
  return `${typeof text === "string" ? text.trimEnd() : cell(text)}\npubsub: ${pubsub || "(none)"}\n`;
}

async function poll() {
  const token = ui.token.value.trim();
  if (!token || polling) return;
  polling = true;
  try {
    const [node, sessions, viewers, muster, dump] = await Promise.all(
      ["/admin/node", "/admin/sessions", "/admin/viewers", "/admin/muster", "/admin/muster?format=text"].map((u) =>
        fetchJSON(u, bearer(token)),
      ),
    );
    const failed = [node, sessions, viewers, muster, dump].find((r) => !r.ok);
    ui.status.textContent = failed
      ? `Last poll ${new Date().toLocaleTimeString()}: ${errorText(failed)}`
      : `Last poll ${new Date().toLocaleTimeString()}`;
    if (node.ok) renderNode(node.body);
    if (sessions.ok) renderSessions(sessions.body);
    if (viewers.ok) renderViewers(viewers.body);
    if (muster.ok && dump.ok) ui.muster.textContent = musterText(dump.body, muster.body);
  } finally {
    polling = false;
  }
}

function schedule() {
  clearInterval(timer);
  timer = null;
  const every = Number(ui.interval.value);
  if (every > 0 && ui.token.value.trim()) timer = setInterval(poll, every);
}

ui.auth.addEventListener("submit", (ev) => {
  ev.preventDefault();
  const token = ui.token.value.trim();
  if (!token) return;
  sessionStorage.setItem(TOKEN_KEY, token);
  poll();
  schedule();
});

ui.interval.addEventListener("change", schedule);

ui.forget.addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  ui.token.value = "";
  clearInterval(timer);
  ui.status.textContent = "Token forgotten; polling stopped.";
});

ui.drain.addEventListener("click", async () => {
  const name = (lastNode && lastNode.name) || "this node";
  if (!confirm(`Drain ${name}? It stops taking sockets and events and hands its sessions back; the process keeps running until it is stopped.`)) return;
  ui.drain.disabled = true;
  const res = await fetchJSON("/admin/drain", bearer(ui.token.value.trim(), { method: "POST" }));
  if (res.ok) notice(`Drain started on ${(res.body && res.body.node) || name}: it answers 503 draining until it is restarted.`, "warn");
  else {
    notice(`Drain refused: ${errorText(res)}`, "bad");
    ui.drain.disabled = false;
  }
  poll();
});

ui.token.value = sessionStorage.getItem(TOKEN_KEY) || "";
if (ui.token.value) {
  poll();
  schedule();
}
