import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import axe from "axe-core";
import { type BrowserContext, chromium, type Page } from "playwright-core";

/** Debian's chromium package; CHROMIUM_PATH overrides it. `.ci/run` installs it when missing. */
const CHROMIUM_PATH = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";

const FLAGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

export interface Browser {
  readonly context: BrowserContext;
  /** Every request the browser made, with the page it came from, to check what left the machine. */
  readonly requested: { readonly url: string; readonly from: string }[];
  /** Uncaught page errors and console errors. */
  readonly errors: string[];
  close(): Promise<void>;
}

/**
 * Headless Chromium with a fresh profile, driven over CDP by playwright-core. playwright-core
 * turns the back/forward cache off; `backForwardCache` keeps it, as every user's browser has it:
 * Back then restores a page as it was left, scripts and all, instead of loading it again.
 */
export async function launchBrowser(
  options: { readonly backForwardCache?: boolean } = {},
): Promise<Browser> {
  const profile = await mkdtemp(join(tmpdir(), "scheduler-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM_PATH,
    headless: true,
    args: FLAGS,
    ...(options.backForwardCache ? { ignoreDefaultArgs: ["--disable-back-forward-cache"] } : {}),
    viewport: { width: 1280, height: 900 },
    locale: "en-GB",
    timezoneId: "Europe/Berlin",
  });
  const requested: { url: string; from: string }[] = [];
  const errors: string[] = [];
  context.on("request", (request) => {
    let from = "";
    try {
      from = request.frame().url();
    } catch {
      // A service worker's request has no frame.
    }
    requested.push({ url: request.url(), from });
  });
  // Tests run offline: anything off this machine fails at once instead of waiting for a timeout.
  await context.route(
    (url) => !["127.0.0.1", "localhost", "[::1]"].includes(url.hostname),
    (route) => route.abort("blockedbyclient"),
  );
  context.on("page", (page) => {
    page.on("pageerror", (error) => errors.push(String(error)));
    page.on("console", (message) => {
      if (message.type() === "error") errors.push(message.text());
    });
  });
  return {
    context,
    requested,
    errors,
    close: async () => {
      await context.close();
      await rm(profile, { recursive: true, force: true });
    },
  };
}

/**
 * What axe-core (Deque's accessibility engine) finds against WCAG 2.1 A and AA
 * on the page as it is now: missing labels and names, contrast, landmarks,
 * ARIA misuse. Evaluated over the DevTools protocol, so the page's CSP does
 * not stop it.
 */
export async function accessibilityViolations(page: Page): Promise<string[]> {
  await page.evaluate(axe.source);
  const found: unknown = await page.evaluate(`axe
    .run(document, { runOnly: { type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"] } })
    .then((result) => result.violations.map((v) =>
      v.id + " (" + v.impact + "): " + v.nodes.map((n) => n.target.join(" ")).join(", ")))`);
  return Array.isArray(found) ? found.map(String) : [`axe returned ${String(found)}`];
}
