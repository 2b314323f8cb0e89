// A tiny element builder shared by the pages; text is always set as text, never as HTML.

/**
 * Creates an element. attrs: "class", "text", "on<event>" handlers, everything else
 * as an attribute; children: nodes or strings (null/false skipped).
 * @param {string} tag
 * @param {Record<string, unknown>} [attrs]
 * @param {...(Node|string|null|false)} children
 * @returns {HTMLElement}
 */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") el.className = String(v);
    else if (k === "text") el.textContent = String(v);
    else if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    el.append(typeof c === "string" ? document.createTextNode(c) : c);
  }
  return el;
}

/** document.getElementById that throws when the page lacks the element. */
export function byId(id) {
  const el = document.getElementById(id);
  if (!el) throw new Error(`missing #${id}`);
  return el;
}

/** Builds "Authorization: Bearer …" fetch options around an optional init. */
export function bearer(token, init = {}) {
  return { ...init, headers: { ...(init.headers || {}), Authorization: `Bearer ${token}` } };
}

/**
 * fetch() returning {ok, status, body} with body parsed as JSON when it is JSON, else
 * the text; network failures come back as {ok:false, status:0, body:{error, message}}.
 */
export async function fetchJSON(url, init) {
  let res;
  try {
    res = await fetch(url, init);
  } catch (err) {
    return { ok: false, status: 0, body: { error: "network", message: String(err) } };
  }
  const text = await res.text();
  let body = text;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    // not JSON: keep the text
  }
  return { ok: res.ok, status: res.status, body };
}
