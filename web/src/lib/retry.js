// Retry directives, as the gateway sends them.
//
// A push refused with {"reason":"retry","retry":{"after_ms":N,"budget_ms":M}} may be
// re-sent after N milliseconds; the client gives up once M milliseconds have passed since
// the first directive of that send. Any other refusal (or a timeout) is final: the client
// never invents a retry the server did not ask for.

/**
 * Returns the directive carried by a reply, or null.
 * @param {unknown} response the reply's response object
 * @returns {{afterMs: number, budgetMs: number} | null}
 */
export function retryDirective(response) {
  if (!response || typeof response !== "object" || response.reason !== "retry") return null;
  const r = response.retry;
  if (!r || typeof r !== "object") return null;
  const afterMs = Number(r.after_ms);
  const budgetMs = Number(r.budget_ms);
  if (!Number.isFinite(afterMs) || afterMs < 0 || !Number.isFinite(budgetMs) || budgetMs < 0) {
    return null;
  }
  return { afterMs, budgetMs };
}

/**
 * One channel push as a promise of its outcome; never rejects.
 * @param {import("phoenix").Channel} channel
 * @param {string} event
 * @param {object} payload
 * @param {number} [timeoutMs]
 * @returns {Promise<{status: "ok"|"error"|"timeout", response?: object}>}
 */
export function pushOnce(channel, event, payload, timeoutMs) {
  return new Promise((resolve) => {
    channel
      .push(event, payload, timeoutMs)
      .receive("ok", (response) => resolve({ status: "ok", response }))
      .receive("error", (response) => resolve({ status: "error", response }))
      .receive("timeout", () => resolve({ status: "timeout" }));
  });
}

const realSleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Sends with send() and follows retry directives until the send is accepted, refused
 * without a directive, times out, or the directive's budget would be exceeded.
 *
 * The result is the last attempt's outcome plus `attempts` (sends made). When the budget
 * runs out the status is "gave_up" and `response` is the last directive reply.
 *
 * @param {() => Promise<{status: string, response?: object}>} send one attempt
 * @param {{now?: () => number, sleep?: (ms: number) => Promise<void>,
 *          onRetry?: (info: {afterMs: number, budgetMs: number, attempt: number, remainingMs: number}) => void}} [opts]
 * @returns {Promise<{status: "ok"|"error"|"timeout"|"gave_up", response?: object, attempts: number}>}
 */
export async function sendWithRetry(send, opts = {}) {
  const now = opts.now || Date.now;
  const sleep = opts.sleep || realSleep;
  let deadline = null;
  for (let attempt = 1; ; attempt++) {
    const outcome = await send();
    const directive = outcome.status === "error" ? retryDirective(outcome.response) : null;
    if (!directive) return { ...outcome, attempts: attempt };
    const t = now();
    if (deadline === null) deadline = t + directive.budgetMs;
    if (t + directive.afterMs > deadline) {
      return { status: "gave_up", response: outcome.response, attempts: attempt };
    }
    if (opts.onRetry) {
      opts.onRetry({ ...directive, attempt, remainingMs: deadline - t });
    }
    await sleep(directive.afterMs);
  }
}
