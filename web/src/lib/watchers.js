// Who is watching a session, from the official phoenix Presence (docs/PHOENIX.md §5.4):
// one entry per presence key (the token's subject) with the nodes its sockets are on.

/**
 * The watchers a Presence lists, sorted by key: [{key, nodes: [node, …], sockets}].
 * Each meta is {node, online_at, phx_ref}; nodes are sorted and unique.
 * @param {import("phoenix").Presence} presence
 * @returns {{key: string, nodes: string[], sockets: number}[]}
 */
export function watchersOf(presence) {
  return presence
    .list((key, { metas }) => ({
      key,
      nodes: [...new Set(metas.map((m) => String(m.node || "?")))].sort(),
      sockets: metas.length,
    }))
    .sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
}

/**
 * One line for the status panel: "alice (n1), bob (n2 ×2)"; above the gateway's
 * PRESENCE_MAX_LISTED the list is empty and count (presence_count) is shown instead.
 * @param {{key: string, nodes: string[], sockets: number}[]} watchers
 * @param {number | null} count the last presence_count, or null
 */
export function describeWatchers(watchers, count) {
  if (watchers.length === 0) return count ? `${count} watching (too many to list)` : "—";
  return watchers.map((w) => `${w.key} (${w.nodes.join(", ")}${w.sockets > 1 ? ` ×${w.sockets}` : ""})`).join(", ");
}
