import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Browser } from "../support/browser.js";
import { apiAs, signedInConsole } from "../support/console-session.js";
import type { SandboxProcess } from "../support/sandbox-process.js";
import { waitFor } from "../support/wait.js";

/**
 * What the console shows of why a run ended as it did, in headless Chromium against `npm start`:
 * a dead run's `error` is its last attempt's, its `reason` says why it is dead ("gave up after 2
 * attempts: …", "non-retryable error: …") and quotes that error. The job page's Detail column and
 * the dead-letters page's Reason column show what the CLI's ERROR / REASON column does
 * (client/run-why.ts).
 */
const KEY = "run-reasons-key";

interface Job {
  id: string;
}
interface Run {
  runId: string;
  jobId: string;
  attempt: number;
  status: string;
  error: string | null;
  reason: string | null;
}

let sandbox: SandboxProcess;
let browser: Browser;
let page: Page;

const api = <T>(method: string, path: string, body?: unknown) =>
  apiAs<T>(sandbox.url, KEY, method, path, body);

const runsOf = async (job: Job) =>
  (await api<{ items: Run[] }>("GET", `/jobs/${job.id}/runs`)).items;

/** A one-off made of `body`, due now: it and its runs once `done` holds of them. */
async function oneOff(
  body: Record<string, unknown>,
  done: (runs: Run[]) => boolean,
): Promise<{ job: Job; runs: Run[] }> {
  const job = await api<Job>("POST", "/jobs", {
    ...body,
    schedule: { runAt: new Date().toISOString() },
  });
  const runs = await waitFor(
    "the job's runs",
    async () => {
      const read = await runsOf(job);
      return done(read) && read;
    },
    30_000,
    250,
  );
  return { job, runs };
}

/** The text of a run's cell in `column` (1-based, the row's header cell counted) on `on`. */
async function cellOf(on: Page, run: Run, column: number): Promise<string> {
  const row = on.locator(`tr[data-run-id="${run.runId}"]`);
  await row.waitFor();
  return (await row.locator(`:scope > :nth-child(${column})`).textContent()) ?? "";
}

/** The job page's Detail column and the dead-letters page's Reason column. */
const DETAIL = 6;
const DEAD_LETTER_REASON = 5;

beforeAll(async () => {
  ({ sandbox, browser, page } = await signedInConsole(KEY, "run-reasons-tenant", {
    tickSeconds: 1,
  }));
}, 180_000);

afterAll(async () => {
  await browser?.close();
  await sandbox?.stop();
});

describe("why a run ended, in the console", () => {
  let gaveUp: { job: Job; failed: Run; dead: Run };
  let notRetried: { job: Job; dead: Run };

  it("the job page shows a dead run's reason, which quotes its error, and a failed run's error", async () => {
    const retried = await oneOff(
      { type: "fail", retry: { maxAttempts: 2, initialDelaySeconds: 0 } },
      (runs) => runs.some((run) => run.status === "dead"),
    );
    const failed = retried.runs.find((run) => run.status === "failed");
    const dead = retried.runs.find((run) => run.status === "dead");
    if (failed === undefined || dead === undefined) throw new Error("no failed and dead runs");
    gaveUp = { job: retried.job, failed, dead };
    expect(dead.reason).toBe(`gave up after 2 attempts: ${dead.error}`);

    await page.goto(`${sandbox.url}/console/jobs/${retried.job.id}`);
    expect(await cellOf(page, dead, DETAIL)).toBe(`gave up after 2 attempts: ${dead.error}`);
    expect(await cellOf(page, failed, DETAIL)).toBe(failed.error);

    const once = await oneOff({ type: "fail", payload: { retryable: false } }, (runs) =>
      runs.some((run) => run.status === "dead"),
    );
    const [onceDead] = once.runs;
    if (onceDead === undefined) throw new Error("no dead run");
    notRetried = { job: once.job, dead: onceDead };
    await page.goto(`${sandbox.url}/console/jobs/${once.job.id}`);
    expect(await cellOf(page, onceDead, DETAIL)).toBe(`non-retryable error: ${onceDead.error}`);
  });

  it("the dead-letters page shows each dead letter's reason: one given up on and one never retried read apart", async () => {
    await page.getByRole("link", { name: "Dead letters" }).click();
    await page.getByRole("heading", { name: "Dead letters", level: 1 }).waitFor();
    expect(
      await page.locator("thead th").evaluateAll((cells) => cells.map((c) => c.textContent)),
    ).toContain("Reason");
    expect(await cellOf(page, gaveUp.dead, DEAD_LETTER_REASON)).toBe(gaveUp.dead.reason);
    expect(await cellOf(page, notRetried.dead, DEAD_LETTER_REASON)).toBe(notRetried.dead.reason);
  });

  it("a reason that does not quote the run's error is followed by it: a run whose handler failed as its cancel was asked", async () => {
    const job = await api<Job>("POST", "/jobs", {
      type: "noop",
      schedule: { runAt: new Date(Date.now() + 120_000).toISOString() },
    });
    const queued = await waitFor("its run queued", async () => (await runsOf(job))[0]);
    const cancelled = await api<Run>("POST", `/jobs/${job.id}/runs/${queued.runId}/cancel`);
    expect(cancelled).toMatchObject({ status: "cancelled", reason: "run cancelled", error: null });
    // A handler that fails while its cancel is asked keeps its error on the run ended cancelled
    // (shared/execution/run-endings.ts); no handler here can be made to fail at that moment, so
    // the page reads the run as such a one answers.
    const error = "sleep interrupted: run cancelled";
    await page.route(
      (url) => url.pathname === `/jobs/${job.id}/runs`,
      async (route) => {
        const answer = await route.fetch();
        const body = (await answer.json()) as { items: Run[] };
        const items = body.items.map((run) =>
          run.runId === cancelled.runId ? { ...run, error } : run,
        );
        await route.fulfill({ response: answer, json: { ...body, items } });
      },
    );
    await page.goto(`${sandbox.url}/console/jobs/${job.id}`);
    expect(await cellOf(page, cancelled, DETAIL)).toBe(`run cancelled (error: ${error})`);
  });
});
