// The ops page. With the admin token (Authorization: Bearer …) it polls this node's
// GET /admin/cluster (every node's status, published over NATS), /admin/stats (charts),
// /admin/sessions, /admin/viewers and /admin/muster?format=text, looks sessions up
// (GET /admin/sessions/{id}) and drains or undrains any node
// (POST /admin/nodes/{node}/drain|undrain). The admin API sends 64-bit ids (incarnations,
// view hashes) as strings, so nothing here goes through a JavaScript number that could
// round them. A 401 clears every panel and stops polling until a new token is given.
import "../static/style.css";
import { byId, bearer, fetchJSON, h } from "./lib/dom.js";
import { LineChart, quantile, rates } from "./lib/stats.js";

const TOKEN_KEY = "relay.admin_token";

const ui = {
  auth: byId("auth"),
  token: byId("admin-token"),
  interval: byId("interval"),
  forget: byId("forget"),
  status: byId("poll-status"),
  servedBy: byId("served-by"),
  notice: byId("notice"),
  cluster: byId("cluster"),
  nodeCount: byId("node-count"),
  sessions: byId("sessions"),
  sessionCount: byId("session-count"),
  viewers: byId("viewers"),
  viewerCount: byId("viewer-count"),
  muster: byId("muster"),
  lookup: byId("lookup"),
  lookupId: byId("lookup-id"),
  lookupResult: byId("lookup-result"),
};

const charts = {
  delivered: new LineChart(byId("chart-delivered"), {
    title: "Messages delivered",
    unit: "/s",
    series: [{ key: "delivered", label: "to sockets", color: "#3056d3" }],
  }),
  accepted: new LineChart(byId("chart-accepted"), {
    title: "Events accepted",
    unit: "/s",
    series: [{ key: "accepted", label: "owned here", color: "#1f8a4c" }],
  }),
  latency: new LineChart(byId("chart-latency"), {
    title: "Event accept latency",
    unit: "ms",
    series: [
      { key: "p50", label: "p50", color: "#b7791f" },
      { key: "p99", label: "p99", color: "#c53030" },
    ],
  }),
};

let timer = null;
let polling = false;
let prevStats = null;
/** The node serving this page (GET /admin/cluster "node"). */
let self = "";

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

function empty(table, text) {
  table.replaceChildren(h("tbody", {}, h("tr", {}, h("td", { class: "muted", text }))));
}

const TONE = { ready: "ok", not_ready: "bad", draining: "warn", drained: "warn" };

function pill(text, tone) {
  return h("span", { class: "pill", "data-tone": tone, text });
}

function ageText(ms) {
  if (!ms) return "now";
  return ms < 1000 ? `${ms} ms ago` : `${(ms / 1000).toFixed(1)} s ago`;
}

/** One row per node of GET /admin/cluster, with its drain or undrain button. */
function renderCluster(body) {
  const nodes = (body && body.nodes) || [];
  self = (body && body.node) || "";
  ui.servedBy.textContent = self ? `· served by ${self}` : "";
  ui.nodeCount.textContent = `(${nodes.length} node${nodes.length === 1 ? "" : "s"})`;
  const hashes = new Set(nodes.filter((n) => n.muster).map((n) => n.muster.view_hash));
  const head = [
    ["node"],
    ["status"],
    ["owner", "lease owner identity: <node>/<incarnation in base 36>"],
    ["incarnation", "process incarnation (decimal)"],
    ["sockets", "", "num"],
    ["sessions", "", "num"],
    ["leases", "held now · taken over · handed back by a drain", "num"],
    ["muster", "routing view status"],
    ["view hash", "Muster view hash: nodes agree on routing when every one is ready with the same hash"],
    ["seen", "when this node last received the status"],
    [""],
  ];
  ui.cluster.replaceChildren(
    h("thead", {}, h("tr", {}, ...head.map(([c, title, cls]) => h("th", { text: c, title: title || null, class: cls || null })))),
    h(
      "tbody",
      {},
      ...nodes.map((n) => {
        const m = n.muster;
        const action =
          n.status === "draining"
            ? h("button", { type: "button", class: "secondary small-btn", disabled: true, text: "Draining…" })
            : n.status === "drained"
              ? h("button", { type: "button", class: "secondary small-btn", "data-op": "undrain", text: "Undrain", onclick: () => nodeOp(n.name, "undrain") })
              : h("button", { type: "button", class: "danger small-btn", "data-op": "drain", text: "Drain…", onclick: () => nodeOp(n.name, "drain") });
        return h(
          "tr",
          { "data-node": n.name, class: n.name === self ? "self" : "" },
          h("td", { "data-field": "name" }, h("strong", { text: n.name }), n.name === self ? h("span", { class: "muted small", text: " (this page)" }) : null),
          h("td", { "data-field": "status", "data-status": n.status, title: (n.reasons || []).join("; ") }, pill(n.status, TONE[n.status] || "")),
          h("td", { class: "mono", "data-field": "owner", text: n.owner }),
          h("td", { class: "mono", "data-field": "incarnation", text: n.incarnation }),
          h("td", { class: "num", "data-field": "sockets", text: String(n.sockets) }),
          h("td", { class: "num", "data-field": "sessions", text: String(n.sessions) }),
          h("td", { class: "num", "data-field": "leases", text: `${n.leases.held} · ${n.leases.takeovers} · ${n.leases.handbacks}` }),
          h("td", { "data-field": "muster" }, m ? pill(m.status, m.ready ? "ok" : "warn") : h("span", { class: "muted", text: "—" })),
          h("td", { class: `mono${hashes.size > 1 ? " differs" : ""}`, "data-field": "view_hash", title: hashes.size > 1 ? "nodes disagree on the view" : "", text: m ? m.view_hash : "" }),
          h("td", { class: "muted small", "data-field": "age", text: ageText(n.age_ms) }),
          h("td", {}, action),
        );
      }),
    ),
  );
}

async function nodeOp(name, op) {
  if (op === "drain" && !confirm(`Drain ${name}? It stops taking sockets and events and hands its sessions to the other nodes; the process keeps running and can be undrained.`)) return;
  const res = await fetchJSON(`/admin/nodes/${encodeURIComponent(name)}/${op}`, bearer(ui.token.value.trim(), { method: "POST" }));
  if (res.ok) notice(op === "drain" ? `Drain started on ${name}.` : `${name} undrained: it rejoins the cluster.`, op === "drain" ? "warn" : "info");
  else if (res.status === 401) unauthorized();
  else notice(`${op} refused: ${errorText(res)}`, "bad");
  poll();
}

/** Adds a chart point from two reads of /admin/stats. */
function renderStats(cur) {
  const r = rates(prevStats, cur);
  if (r) {
    charts.delivered.push({ delivered: r.relay_deliveries_total });
    charts.accepted.push({ accepted: r.relay_events_accepted_total });
    const p50 = quantile(0.5, prevStats.accept_latency, cur.accept_latency);
    const p99 = quantile(0.99, prevStats.accept_latency, cur.accept_latency);
    charts.latency.push({ p50: p50 === null ? null : p50 * 1000, p99: p99 === null ? null : p99 * 1000 });
  }
  prevStats = cur;
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
  if (rows.length === 0) return empty(ui.sessions, "no session actors on this node");
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
  if (topics.length === 0) return empty(ui.viewers, "no viewers");
  ui.viewers.replaceChildren(
    h("thead", {}, h("tr", {}, h("th", { text: "topic" }), h("th", { text: "this node" }), h("th", { text: "cluster" }))),
    h(
      "tbody",
      {},
      ...topics.map((t) =>
        h("tr", {}, h("td", { class: "mono", text: t }), h("td", { class: "num", text: String(local[t] || 0) }), h("td", { class: "num", text: String(cluster[t]) })),
      ),
    ),
  );
}

/** The session looked up last; every poll refreshes it. */
let lookedUp = "";

/** GET /admin/sessions/{id}: lease, position and viewers per node. */
async function lookup() {
  const id = lookedUp;
  if (!id) return;
  const res = await fetchJSON(`/admin/sessions/${encodeURIComponent(id)}`, bearer(ui.token.value.trim()));
  if (res.status === 401) return unauthorized();
  if (!res.ok) {
    ui.lookupResult.replaceChildren(h("p", { class: "notice", "data-tone": "bad", text: `Lookup failed: ${errorText(res)}` }));
    return;
  }
  const s = res.body;
  if (id !== lookedUp) return; // another lookup started meanwhile
  const kv = [
    ["session", s.session],
    ["owner", s.owner || "none (no live lease)"],
    ["owner node", s.owner_node || "—"],
    ["lease epoch", s.lease_epoch || "—"],
    ["lease left", s.owner ? `${(s.lease_left_ms / 1000).toFixed(1)} s` : "—"],
    ["last event (epoch · seq)", `${s.epoch} · ${s.seq}`],
    ["turn", s.running ? `running, ${s.pending} pending` : `idle, ${s.pending} pending`],
  ];
  const viewers = Object.entries(s.viewers || {}).sort(([a], [b]) => a.localeCompare(b));
  ui.lookupResult.replaceChildren(
    h("dl", { class: "kv", "data-session": s.session }, ...kv.flatMap(([k, v]) => [h("dt", { text: k }), h("dd", { "data-field": k.replace(/\W+/g, "_"), text: String(v) })])),
    h(
      "table",
      { class: "viewers-by-node" },
      h("thead", {}, h("tr", {}, h("th", { text: "node" }), h("th", { text: `subscribers (total ${s.viewers_total})` }))),
      h("tbody", {}, ...viewers.map(([n, k]) => h("tr", { "data-node": n }, h("td", { class: "mono", text: n + (n === s.owner_node ? " (owner)" : "") }), h("td", { class: "num", text: String(k) })))),
    ),
  );
}

/** Clears every panel: what they showed came with a token the node now refuses. */
function clearAll() {
  ui.cluster.replaceChildren();
  ui.nodeCount.textContent = "";
  ui.servedBy.textContent = "";
  ui.sessions.replaceChildren();
  ui.sessionCount.textContent = "";
  ui.viewers.replaceChildren();
  ui.viewerCount.textContent = "";
  ui.muster.textContent = "";
  ui.lookupResult.replaceChildren();
  lookedUp = "";
  for (const c of Object.values(charts)) c.clear();
  prevStats = null;
}

function unauthorized() {
  clearTimeout(timer);
  timer = null;
  clearAll();
  document.body.dataset.auth = "refused";
  ui.status.textContent = `Refused at ${new Date().toLocaleTimeString()}: 401 unauthorized.`;
  notice("The node refused the admin token (401). The data shown before was cleared and polling stopped; enter a valid token.", "bad");
}

async function poll() {
  const token = ui.token.value.trim();
  if (!token || polling) return;
  polling = true;
  try {
    const urls = ["/admin/cluster", "/admin/stats", "/admin/sessions", "/admin/viewers", "/admin/muster?format=text"];
    const [cluster, stats, sessions, viewers, dump] = await Promise.all(urls.map((u) => fetchJSON(u, bearer(token))));
    const all = [cluster, stats, sessions, viewers, dump];
    if (all.some((r) => r.status === 401)) return unauthorized();
    document.body.dataset.auth = "ok";
    const failed = all.find((r) => !r.ok);
    ui.status.textContent = failed
      ? `Last poll ${new Date().toLocaleTimeString()}: ${errorText(failed)}`
      : `Last poll ${new Date().toLocaleTimeString()}`;
    if (cluster.ok) renderCluster(cluster.body);
    if (stats.ok) renderStats(stats.body);
    if (sessions.ok) renderSessions(sessions.body);
    if (viewers.ok) renderViewers(viewers.body);
    if (dump.ok) ui.muster.textContent = typeof dump.body === "string" ? dump.body : cell(dump.body);
    await lookup();
  } finally {
    polling = false;
  }
  schedule();
}

/** Polls again after the chosen interval (none while paused). */
function schedule() {
  clearTimeout(timer);
  timer = null;
  const every = Number(ui.interval.value);
  if (every > 0 && ui.token.value.trim() && document.body.dataset.auth !== "refused") timer = setTimeout(poll, every);
}

function start() {
  document.body.dataset.auth = "";
  notice("");
  clearAll();
  poll();
}

ui.auth.addEventListener("submit", (ev) => {
  ev.preventDefault();
  const token = ui.token.value.trim();
  if (!token) return;
  sessionStorage.setItem(TOKEN_KEY, token);
  start();
});

ui.interval.addEventListener("change", schedule);

ui.forget.addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  ui.token.value = "";
  clearTimeout(timer);
  timer = null;
  clearAll();
  ui.status.textContent = "Token forgotten; polling stopped.";
});

ui.lookup.addEventListener("submit", (ev) => {
  ev.preventDefault();
  lookedUp = ui.lookupId.value.trim();
  lookup();
});

ui.token.value = sessionStorage.getItem(TOKEN_KEY) || "";
if (ui.token.value) start();
