// Headless Chromium for the browser tests, driven by playwright-core (no bundled
// browsers: Debian's `chromium` package, at $CHROMIUM_PATH or /usr/bin/chromium).
//
// launchBrowser() starts Chromium with a fresh profile directory (removed by close());
// a missing binary throws an error that says how to install it, so the tests fail, never
// skip. screenshot(page, name) writes e2e/artifacts/screenshots/<name>.png (gitignored;
// CI keeps the directory as an artifact).
import { existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";
import { dump } from "./gateway.mjs";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");

/** The Chromium binary: $CHROMIUM_PATH, else Debian's /usr/bin/chromium. */
export const CHROMIUM = process.env.CHROMIUM_PATH || "/usr/bin/chromium";

/** Where screenshots go: $SCREENSHOT_DIR, else e2e/artifacts/screenshots. */
export const SCREENSHOTS = process.env.SCREENSHOT_DIR || join(ROOT, "e2e", "artifacts", "screenshots");

/**
 * Launches headless Chromium on a fresh profile directory (playwright's persistent
 * context is how it takes a --user-data-dir).
 * @returns {Promise<{context: import("playwright-core").BrowserContext, close: () => Promise<void>}>}
 */
export async function launchBrowser() {
  if (!existsSync(CHROMIUM)) {
    throw new Error(
      `Chromium not found at ${CHROMIUM}: the browser tests need it. Install Debian's package ` +
        "(`apt-get install -y chromium`; `make e2e` does this when it can) or set CHROMIUM_PATH.",
    );
  }
  const profile = mkdtempSync(join(tmpdir(), "relay-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1360, height: 900 },
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
  return {
    context,
    async close() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

/** Saves a full-page PNG as <SCREENSHOTS>/<name>.png and returns its path. */
export async function screenshot(page, name) {
  mkdirSync(SCREENSHOTS, { recursive: true });
  const path = join(SCREENSHOTS, `${name}.png`);
  await page.screenshot({ path, fullPage: true });
  return path;
}

/** Collects the page's console errors and uncaught exceptions (for failure messages). */
export function pageErrors(page) {
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => {
    if (m.type() === "error") errors.push(m.text());
  });
  return errors;
}

/**
 * A test body on a fresh page of browser(): on failure it keeps a screenshot
 * (`<prefix>-failure-<test name>`) and prints every gateway's log and the page's
 * errors. browser and gws are read when the test runs (suites set them in before()).
 * @param {() => {context: import("playwright-core").BrowserContext}} browser
 * @param {() => import("./gateway.mjs").Gateway[]} gws
 * @param {string} prefix
 * @param {(page: import("playwright-core").Page, t: any) => Promise<void>} fn
 * @param {(page: import("playwright-core").Page) => void} [setup] called on the new page first
 */
export function withPage(browser, gws, prefix, fn, setup) {
  return async (t) => {
    const page = await browser().context.newPage();
    const errors = pageErrors(page);
    if (setup) setup(page);
    try {
      await fn(page, t);
    } catch (err) {
      await screenshot(page, `${prefix}-failure-${t.name.replace(/\W+/g, "-").slice(0, 40)}`).catch(() => {});
      for (const gw of gws()) console.error(`--- ${gw.nodeName}\n${dump(gw.logs)}`);
      console.error(`--- page errors\n${errors.join("\n")}`);
      throw err;
    } finally {
      await page.close();
    }
  };
}
