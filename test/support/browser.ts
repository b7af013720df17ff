import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type BrowserContext, chromium } from "playwright-core";

/** Debian's chromium package; CHROMIUM_PATH overrides it. `.ci/run` installs it when missing. */
export const CHROMIUM_PATH = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";

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
  /** Every URL the browser requested, to check that nothing left the machine. */
  readonly requested: string[];
  /** Uncaught page errors and console errors. */
  readonly errors: string[];
  close(): Promise<void>;
}

/** Headless Chromium with a fresh profile, driven over CDP by playwright-core. */
export async function launchBrowser(): Promise<Browser> {
  const profile = await mkdtemp(join(tmpdir(), "scheduler-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM_PATH,
    headless: true,
    args: FLAGS,
    viewport: { width: 1280, height: 900 },
    locale: "en-GB",
    timezoneId: "Europe/Berlin",
  });
  const requested: string[] = [];
  const errors: string[] = [];
  context.on("request", (request) => requested.push(request.url()));
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
