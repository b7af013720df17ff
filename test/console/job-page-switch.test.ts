import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Browser } from "../support/browser.js";
import { apiAs, signedInConsole } from "../support/console-session.js";
import type { SandboxProcess } from "../support/sandbox-process.js";

/**
 * The job page in headless Chromium against `npm start`, moved from one job's page straight to
 * another's (the back button's history list) while an action on the first awaits its answer: the
 * second job's page starts afresh, and the first one's answer changes nothing on it.
 */
const KEY = "job-page-switch-key";

interface Job {
  id: string;
}
interface Run {
  runId: string;
}

let sandbox: SandboxProcess;
let browser: Browser;
let page: Page;

const api = <T>(method: string, path: string, body?: unknown) =>
  apiAs<T>(sandbox.url, KEY, method, path, body);

/** A function to call and the promise it resolves. */
function signal(): [() => void, Promise<void>] {
  let call = () => {};
  const called = new Promise<void>((resolve) => {
    call = resolve;
  });
  return [call, called];
}

const oneOffNamed = (name: string) =>
  api<Job>("POST", "/jobs", { name, type: "noop", schedule: { runAt: "2030-01-01T00:00:00Z" } });

beforeAll(async () => {
  ({ sandbox, browser, page } = await signedInConsole(KEY, "job-page-switch-tenant"));
}, 180_000);

afterAll(async () => {
  await browser?.close();
  await sandbox?.stop();
});

describe("the job page, left for another job's while an action awaits its answer", () => {
  it("the other job's buttons are ready and it is the one shown; the first job's answer, a refusal, is not shown on it", async () => {
    const b = await oneOffNamed("job B");
    const a = await oneOffNamed("job A");
    const heading = (name: string) => page.getByRole("heading", { name, level: 1 });
    // History: the list, B, the list, A; B is two entries back.
    await page.reload();
    await page.getByRole("link", { name: "job B" }).click();
    await heading("job B").waitFor();
    await page.getByRole("link", { name: "Jobs", exact: true }).click();
    await page.getByRole("link", { name: "job A" }).click();
    await heading("job A").waitFor();

    // A's trigger is held on the way (a slow network), then refused.
    const [sent, triggerSent] = signal();
    const [release, gate] = signal();
    const [refused, answered] = signal();
    const refusal = "job A may not be triggered now";
    await page.route(
      (url) => url.pathname === `/jobs/${a.id}/trigger`,
      async (route) => {
        sent();
        await gate;
        await route.fulfill({
          status: 409,
          json: { error: { code: "illegal_transition", message: refusal } },
        });
        refused();
      },
    );
    await page.getByRole("button", { name: "Trigger now" }).click();
    await triggerSent;

    await page.evaluate("history.go(-2)");
    await heading("job B").waitFor();
    const trigger = page.getByRole("button", { name: "Trigger now" });
    expect(await trigger.getAttribute("aria-disabled")).toBe("false");

    release();
    await answered;
    // B's own trigger, sent once A's refusal has reached the page, is queued on B.
    await trigger.click();
    await page.getByText("Run queued").first().waitFor();
    expect((await api<{ items: Run[] }>("GET", `/jobs/${b.id}/runs`)).items).toHaveLength(1);
    await heading("job B").waitFor();
    expect(await page.getByRole("alert").allTextContents()).not.toContain(refusal);
    // The browser logs the refusal's 409 as an error: not a fault of the page.
    expect(browser.errors.filter((error) => !error.includes("status of 409"))).toEqual([]);
  });
});
