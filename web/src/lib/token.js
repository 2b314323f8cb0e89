// Where the pages keep their bearer tokens.

const TOKEN_KEY = "relay.token";

/**
 * Returns the user's JWT: taken from "#token=…" in the URL (then remembered and removed
 * from the address bar), otherwise the remembered one, otherwise "".
 * @param {Location} loc
 * @param {Storage} storage
 * @param {History} [history]
 */
export function takeToken(loc, storage, history) {
  const hash = new URLSearchParams(loc.hash.replace(/^#/, ""));
  const fromHash = hash.get("token");
  if (fromHash) {
    storage.setItem(TOKEN_KEY, fromHash);
    if (history) history.replaceState(null, "", loc.pathname + loc.search);
    return fromHash;
  }
  return storage.getItem(TOKEN_KEY) || "";
}

/** Remembers (or, with "", forgets) the user's JWT. */
export function rememberToken(storage, token) {
  if (token) storage.setItem(TOKEN_KEY, token);
  else storage.removeItem(TOKEN_KEY);
}

/**
 * The claims of a JWT, decoded without verification (for display only), or null.
 * @param {string} jwt
 * @returns {{sub?: string, sessions?: string[], exp?: number} | null}
 */
export function peekClaims(jwt) {
  const part = String(jwt).split(".")[1];
  if (!part) return null;
  try {
    const b64 = part.replace(/-/g, "+").replace(/_/g, "/");
    const json = atob(b64 + "=".repeat((4 - (b64.length % 4)) % 4));
    const claims = JSON.parse(json);
    return claims && typeof claims === "object" ? claims : null;
  } catch {
    return null;
  }
}
