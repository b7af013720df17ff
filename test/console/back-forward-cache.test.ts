import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type LocalServer, startLocalServer } from "../../shared/api/local-server.js";
import type { ConsoleAssets } from "../../shared/console/assets.js";
import { buildConsoleAssets } from "../../shared/console/build.js";
import { jobTypeCatalog } from "../../shared/job-types/registry.js";
import { type Browser, launchBrowser } from "../support/browser.js";
import { apiAs } from "../support/console-session.js";
import { createEngineFixture, type EngineFixture } from "../support/engine-fixture.js";

/**
 * The console in a browser whose back/forward cache is on, as every user's is: Back to a page of
 * the console that was left for another document (the API reference, then the console again from
 * its link) restores that page as it was, with the tenant it showed. Its polls run once an hour
 * here (SCHEDULER_CONSOLE_POLL_MS): at the console's own 3 s, a poll overdue while the page sat in
 * the cache runs as it comes back and clears the last tenant's jobs before the checks, so they
 * would pass without the `pageshow` handler they guard. What each case waits for is the page's
 * first read, never a poll. The API and console are the
 * sandbox's server (startLocalServer) in this process: nothing here runs a job, so the sandbox's
 * process, its dispatcher passes and its workers' receives would be idle work.
 */
const KEY = "bfcache-key";
const OTHER_KEY = "bfcache-next-user";
const SECRET_NAME = "merger with Initech";
/** Far longer than a case: no poll runs between a page's first read and the checks after its restore. */
const POLL_MS = 3_600_000;

let fixture: EngineFixture;
let server: LocalServer;
let browser: Browser;
let page: Page;

const bodyText = async () => (await page.locator("body").textContent()) ?? "";
/** The page's document's own navigation: a page the cache restores keeps its first ("navigate"); a load by Back is "back_forward". */
const howThisDocumentCame = async () =>
  page.evaluate("performance.getEntriesByType('navigation')[0].type");

async function signIn(key: string): Promise<void> {
  await page.getByLabel("API key", { exact: true }).fill(key);
  await page.getByRole("button", { name: "Sign in" }).click();
}

/** Signed in as KEY, the jobs list shown, left for /docs and back to the console by its link. */
async function signedInTwice(): Promise<void> {
  await page.goto(`${server.url}/console`);
  await signIn(KEY);
  await page.getByText(SECRET_NAME).first().waitFor();
  await page.getByRole("link", { name: "API reference" }).click();
  await page.waitForURL(`${server.url}/docs`);
  await page.getByRole("link", { name: "/console" }).click();
  await page.getByText(SECRET_NAME).first().waitFor();
}

/** Back through the history to the first console page; `waitUntil: "commit"`, as a page the cache restores fires no load. */
async function backToFirstConsolePage(): Promise<void> {
  await page.goBack({ waitUntil: "commit" }); // the sign-out's own entry: /console, this page
  await page.goBack({ waitUntil: "commit" }); // /docs
  await page.waitForURL(`${server.url}/docs`, { waitUntil: "commit" });
  await page.goBack({ waitUntil: "commit" }); // the first console page
  await page.waitForURL(`${server.url}/console`, { waitUntil: "commit" });
}

beforeAll(async () => {
  let consoleAssets: ConsoleAssets;
  [fixture, consoleAssets, browser] = await Promise.all([
    createEngineFixture(),
    buildConsoleAssets(),
    launchBrowser({ backForwardCache: true }),
  ]);
  server = await startLocalServer({
    engine: fixture.engine,
    hostname: "127.0.0.1",
    jobTypes: jobTypeCatalog({ demoTypes: true }),
    env: {
      SCHEDULER_API_KEYS: `${KEY}=bf-tenant,${OTHER_KEY}=bf-next-tenant`,
      SCHEDULER_CONSOLE_POLL_MS: String(POLL_MS),
    },
    consoleAssets,
  });
  await apiAs(server.url, KEY, "POST", "/jobs", {
    name: SECRET_NAME,
    type: "noop",
    schedule: { runAt: "2031-01-01T00:00:00Z" },
  });
}, 180_000);

afterAll(async () => {
  await browser?.close();
  await server?.close();
  await fixture?.destroy();
});

describe("Back after Sign out, to a console page the browser kept", () => {
  it("shows the sign-in, not the last tenant's jobs (before its next poll too)", async () => {
    page = await browser.context.newPage();
    await signedInTwice();
    await page.getByRole("button", { name: /Sign out/ }).click();
    await page.getByRole("heading", { name: "Sign in", level: 1 }).waitFor();
    await backToFirstConsolePage();
    // Restored from the cache (a load would start signed out): what it shows at once.
    expect(await howThisDocumentCame()).not.toBe("back_forward");
    expect(await bodyText()).not.toContain(SECRET_NAME);
    await page.getByRole("heading", { name: "Sign in", level: 1 }).waitFor();
    await page.close();
  });

  it("signed in as someone else meanwhile: their jobs, not the last tenant's", async () => {
    page = await browser.context.newPage();
    await signedInTwice();
    await page.getByRole("button", { name: /Sign out/ }).click();
    await signIn(OTHER_KEY);
    await page.getByText("No jobs yet.").waitFor();
    await backToFirstConsolePage();
    // Restored from the cache (a load would start as the one signed in now): what it shows at once.
    expect(await howThisDocumentCame()).not.toBe("back_forward");
    expect(await bodyText()).not.toContain(SECRET_NAME);
    await page.getByText("No jobs yet.").waitFor();
    await page.close();
  });
});

describe("Back to a console page the browser kept, still signed in as the same tenant", () => {
  it("keeps what the user typed in the create form and the filter chosen (read the API reference, came back)", async () => {
    page = await browser.context.newPage();
    await page.goto(`${server.url}/console`);
    await signIn(KEY);
    await page.getByText(SECRET_NAME).first().waitFor();
    await page.getByText("Create a job").click();
    await page.getByLabel("Name", { exact: true }).fill("nightly export, half written");
    await page.getByLabel("Status", { exact: true }).selectOption("active");
    await page.getByRole("link", { name: "API reference" }).click();
    await page.waitForURL(`${server.url}/docs`);
    await page.goBack({ waitUntil: "commit" });
    await page.waitForURL(`${server.url}/console`, { waitUntil: "commit" });
    await page.getByText(SECRET_NAME).first().waitFor();
    expect(await page.getByLabel("Status", { exact: true }).inputValue()).toBe("active");
    expect(await page.getByLabel("Name", { exact: true }).inputValue()).toBe(
      "nightly export, half written",
    );
    await page.close();
  });
});
