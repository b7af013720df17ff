import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Browser } from "../support/browser.js";
import { signedInConsole } from "../support/console-session.js";
import type { SandboxProcess } from "../support/sandbox-process.js";

/**
 * The console in headless Chromium against `npm start`, its API calls answered 403 as API Gateway
 * answers a token without one of the deployment's `jwtScopes` (a bare `{"message":"Forbidden"}`,
 * which the sandbox never sends: it explains itself in the API's shape): the page says what the
 * 403 means and what to do, not a bare "403".
 */
const KEY = "gateway-forbidden-key";

let sandbox: SandboxProcess;
let browser: Browser;
let page: Page;

beforeAll(async () => {
  ({ sandbox, browser, page } = await signedInConsole(KEY, "gateway-forbidden-tenant"));
}, 180_000);

afterAll(async () => {
  await browser?.close();
  await sandbox?.stop();
});

/** The jobs list's reads of the API (not the console's own page under /console). */
const jobsListing = (url: URL) => url.pathname === "/jobs";

describe("a 403 answered in front of the API", () => {
  it("API Gateway's {message: Forbidden} is explained: the token lacks a jwtScopes scope, sign in again or ask", async () => {
    await page.route(jobsListing, (route) =>
      route.fulfill({ status: 403, json: { message: "Forbidden" } }),
    );
    try {
      await page.reload();
      const alert = page.getByRole("alert").filter({ hasText: "403" });
      await alert.waitFor();
      const text = await alert.textContent();
      expect(text).toContain(
        "Forbidden (403), answered before the scheduler saw the request: this deployment requires every call's token to carry one of its scopes (its jwtScopes setting), and yours carries none.",
      );
      expect(text).toContain("Sign out and in again");
      expect(text).not.toContain(`${sandbox.url}/jobs`);
    } finally {
      await page.unroute(jobsListing);
    }
  });

  it("the API's own 403, in its shape, keeps its own message", async () => {
    const message = "the token carries none of the scopes scheduler/api";
    await page.route(jobsListing, (route) =>
      route.fulfill({ status: 403, json: { error: { code: "forbidden", message } } }),
    );
    try {
      await page.reload();
      const alert = page.getByRole("alert").filter({ hasText: message });
      await alert.waitFor();
      expect(await alert.textContent()).not.toContain("jwtScopes setting");
    } finally {
      await page.unroute(jobsListing);
    }
    // The browser logs each 403 as an error: not a fault of the page.
    expect(browser.errors.filter((error) => !error.includes("status of 403"))).toEqual([]);
  });
});
