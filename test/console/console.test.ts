import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sleep } from "../../shared/clock.js";
import { accessibilityViolations, type Browser, launchBrowser } from "../support/browser.js";
import { type SandboxProcess, spawnSandbox } from "../support/sandbox-process.js";
import { waitFor } from "../support/wait.js";

/**
 * The web console in headless Chromium against `npm start` (the sandbox CLI,
 * on the test run's DynamoDB Local and SQS emulator): what a user clicks, checked
 * against what the API says. With CONSOLE_SCREENSHOTS=<dir> each page is
 * also saved there (`npm run console:screenshots` writes docs/console/).
 */
const KEY = "console-key";
/** A second tenant's, whose many dead letters leave the first tenant's pages as they are. */
const MANY_DEAD_KEY = "console-many-dead-key";
/** A third tenant's, for jobs with odd names. */
const ODD_NAMES_KEY = "console-odd-names-key";
const MANY_JOBS_KEY = "console-many-jobs-key";
/** A fifth tenant's, whose 51 dead letters fill a first page and one more. */
const REPLAY_RACE_KEY = "console-replay-race-key";
/** A sixth tenant's, whose jobs change after an older page is read. */
const CHANGING_JOBS_KEY = "console-changing-jobs-key";
/** A seventh's and an eighth's, whose jobs change while a read is held. */
const HELD_OLDER_KEY = "console-held-older-key";
const HELD_POLL_KEY = "console-held-poll-key";
/** A ninth's, whose only paused job lies past the first page's reads. */
const FILTERED_KEY = "console-filtered-key";
/** A tenth's, whose job's runs timeline is filtered: its job stays off the first tenant's list. */
const FILTERED_RUNS_KEY = "console-filtered-runs-key";
/** An eleventh's, whose jobs run after one another: its jobs stay off the first tenant's list. */
const DEPENDENT_KEY = "console-dependent-key";
/** A twelfth's, whose jobs list is read over a network slower than the console's polls. */
const SLOW_NETWORK_KEY = "console-slow-network-key";
const SCREENSHOTS = process.env.CONSOLE_SCREENSHOTS;

interface Job {
  id: string;
  name: string;
  version: number;
  schedule: Record<string, string>;
}
interface Run {
  runId: string;
  status: string;
  attempt: number;
  replayedBy: string | null;
}
interface Preview {
  timezone: string;
  occurrences: { utc: string; local: string }[];
}

let sandbox: SandboxProcess;
let browser: Browser;
let page: Page;
/**
 * The runs filter's every-second job, created as the file starts: its first run is claimed and run
 * at the dispatcher's pace while the cases before it use the browser.
 */
let everySecond: Promise<Job>;
/**
 * The one-off case's page, opened as the file starts on a one-off due 6 s later, with the runs it
 * showed first and the navigations since: it waits for the run while the first case uses `page`.
 */
let oneOff: Promise<OneOffPage>;
interface OneOffPage {
  job: Job;
  on: Page;
  before: Map<string, string>;
  navigations: () => number;
}

async function api<T>(
  method: string,
  path: string,
  body?: unknown,
  headers = {},
  key = KEY,
): Promise<T> {
  const response = await fetch(`${sandbox.url}${path}`, {
    method,
    headers: {
      Authorization: `Bearer ${key}`,
      ...(body === undefined ? {} : { "Content-Type": "application/json" }),
      ...headers,
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await response.text();
  if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${text}`);
  // A 204 (a delete) answers no body.
  return (text === "" ? undefined : JSON.parse(text)) as T;
}

/** Each page is checked for accessibility where it is pictured. */
async function checkPage(name: string, fullPage = true, on = page): Promise<void> {
  expect(await accessibilityViolations(on), name).toEqual([]);
  await screenshot(name, fullPage, on);
}

async function screenshot(name: string, fullPage: boolean, on: Page): Promise<void> {
  if (!SCREENSHOTS) return;
  await mkdir(SCREENSHOTS, { recursive: true });
  await on.screenshot({ path: join(SCREENSHOTS, `${name}.png`), fullPage });
}

/** A noop job every second, once one of its runs has succeeded. */
async function everySecondJobThatRan(created: Promise<Job>): Promise<Job> {
  const job = await created;
  await waitFor(
    "a succeeded run",
    async () =>
      (await api<{ items: Run[] }>("GET", `/jobs/${job.id}/runs?status=succeeded`)).items[0],
    30_000,
  );
  return job;
}

/** A tenant's one-offs far ahead, created in batches of `sizes`: the jobs, newest first. */
async function createJobs(key: string, sizes: number[]): Promise<Job[]> {
  const created: Job[] = [];
  for (const size of sizes) {
    const jobs = Array.from({ length: size }, () => ({
      type: "noop",
      schedule: { runAt: "2030-01-01T00:00:00Z" },
    }));
    const answer = await api<{ results: { job: Job }[] }>("POST", "/jobs:batch", { jobs }, {}, key);
    created.push(...answer.results.map((result) => result.job));
  }
  // Job ids are ULIDs: GET /jobs lists the highest first.
  return created.sort((a, b) => (a.id < b.id ? 1 : -1));
}

/** A job's run ids as GET /jobs/{id}/runs lists them, every page read: newest first. */
async function runIdsOf(jobId: string): Promise<string[]> {
  const ids: string[] = [];
  let cursor: string | null = null;
  do {
    const next: { items: Run[]; nextCursor: string | null } = await api(
      "GET",
      `/jobs/${jobId}/runs?limit=100${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`,
    );
    ids.push(...next.items.map((run) => run.runId));
    cursor = next.nextCursor;
  } while (cursor !== null);
  return ids;
}

/** A second page, signed in with `key`, on the jobs list. */
async function signedInJobsPage(key: string): Promise<Page> {
  const other = await browser.context.newPage();
  await other.goto(`${sandbox.url}/console/jobs`);
  await other.getByLabel("API key", { exact: true }).fill(key);
  await other.getByRole("button", { name: "Sign in" }).click();
  await other.getByRole("heading", { name: "Jobs", level: 1 }).waitFor();
  return other;
}

/** A one-off due 6 s from now, on a page of its own that shows its runs: see `oneOff`. */
async function oneOffOnItsPage(): Promise<OneOffPage> {
  const on = await signedInJobsPage(KEY);
  const runAt = new Date(Date.now() + 6_000).toISOString();
  const job = await api<Job>("POST", "/jobs", {
    name: "one-off",
    type: "noop",
    schedule: { runAt },
  });
  await on.goto(`${sandbox.url}/console/jobs/${job.id}`);
  await on.getByRole("heading", { name: /one-off/, level: 1 }).waitFor();
  await on.getByRole("table").last().waitFor();
  const before = await runRows(on);
  let navigations = 0;
  on.on("framenavigated", () => navigations++);
  return { job, on, before, navigations: () => navigations };
}

/**
 * Holds the page's reads of GET /jobs that `match` picks (a slow network) until the function it
 * answers is called; each then reads the list as it is by then.
 */
async function held(on: Page, match: (url: URL) => boolean): Promise<() => void> {
  let release = () => {};
  const gate = new Promise<void>((resolve) => {
    release = resolve;
  });
  await on.route(
    (url) => url.pathname === "/jobs" && match(url),
    async (route) => {
      await gate;
      return route.fulfill({ response: await route.fetch() });
    },
  );
  return release;
}

/**
 * Runs of a job's table as the page shows them: run id → status text, read in one go. Read row by
 * row, a row the page took away between the count and its read (a poll that empties the table)
 * held the read for Playwright's 30 s wait for an element.
 */
async function runRows(on = page): Promise<Map<string, string>> {
  const rows = await on
    .locator("tr[data-run-id]")
    .evaluateAll((found) =>
      found.map((row) => [
        row.getAttribute("data-run-id"),
        row.querySelector(".status")?.textContent,
      ]),
    );
  const out = new Map<string, string>();
  for (const [id, status] of rows) {
    if (status === undefined) throw new Error(`run ${id} shows no status`);
    if (id) out.set(id, status ?? "");
  }
  return out;
}

/** Started and left to run: awaited by the case that uses it, which fails with its error. */
function started<T>(work: Promise<T>): Promise<T> {
  work.catch(() => undefined);
  return work;
}

beforeAll(async () => {
  [sandbox, browser] = await Promise.all([
    spawnSandbox({
      env: {
        SCHEDULER_API_KEYS: `${KEY}=console-tenant,${MANY_DEAD_KEY}=many-dead-tenant,${ODD_NAMES_KEY}=odd-names-tenant,${MANY_JOBS_KEY}=many-jobs-tenant,${REPLAY_RACE_KEY}=replay-race-tenant,${CHANGING_JOBS_KEY}=changing-jobs-tenant,${HELD_OLDER_KEY}=held-older-tenant,${HELD_POLL_KEY}=held-poll-tenant,${FILTERED_KEY}=filtered-tenant,${FILTERED_RUNS_KEY}=filtered-runs-tenant,${DEPENDENT_KEY}=dependent-tenant,${SLOW_NETWORK_KEY}=slow-network-tenant`,
        // The shortest lookahead: a per-second job's create claims its first three minutes of
        // runs, not seven.
        LOOKAHEAD_SECONDS: "60",
        // The live pages poll every second, not every 2 or 3 s: what a case waits for (a run
        // ending, a job cancelled elsewhere, a poll merged into the pages read) shows sooner. Not
        // much more often: a dozen pages polling tables of a hundred rows, side by side, load the
        // machine (at 250 ms the cases took twice as long, on a loaded machine).
        SCHEDULER_CONSOLE_POLL_MS: "1000",
      },
      tickSeconds: 1,
    }),
    launchBrowser(),
  ]);
  everySecond = started(
    api<Job>("POST", "/jobs", { name: "every second", type: "noop", schedule: { every: "PT1S" } }),
  );
  oneOff = started(oneOffOnItsPage());
  page = await browser.context.newPage();
  await page.goto(`${sandbox.url}/console`);
  await checkPage("sign-in");
  await page.getByLabel("API key", { exact: true }).fill(KEY);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("heading", { name: "Jobs", level: 1 }).waitFor();
}, 180_000);

afterAll(async () => {
  await browser?.close();
  await sandbox?.stop();
});

describe("web console", () => {
  it("creates a cron job through the form and shows its next runs in its zone", async () => {
    await page.getByText("Create a job", { exact: true }).click();
    const form = page.getByRole("form", { name: "Create a job" });
    await form.getByLabel("Name", { exact: true }).fill("nightly export");
    await form.getByLabel("Cron expression", { exact: true }).fill("30 2 * * *");
    await form.getByLabel("Time zone", { exact: true }).fill("America/New_York");
    // The form previews the schedule as it is typed.
    const previewed = form.locator(".preview li", { hasText: "America/New_York" });
    await previewed.nth(4).waitFor();
    expect(await previewed.first().textContent()).toContain("02:30:00 America/New_York");
    await checkPage("create-job");
    await form.getByRole("button", { name: "Create job" }).click();

    await page.waitForURL(/\/console\/jobs\/[0-9A-Z]+$/);
    const id = page.url().split("/").at(-1) ?? "";
    await page.getByRole("heading", { name: /nightly export/, level: 1 }).waitFor();
    const nextRuns = page.locator(".next-runs li");
    await nextRuns.nth(9).waitFor();
    const preview = await api<Preview>("GET", `/jobs/${id}/preview?count=10`);
    expect(preview.timezone).toBe("America/New_York");
    const shown = await nextRuns
      .locator("time")
      .evaluateAll((times) => times.map((t) => t.getAttribute("datetime")));
    expect(shown).toEqual(preview.occurrences.map((o) => o.utc));
    expect(await nextRuns.first().textContent()).toContain("02:30:00 America/New_York");
    const job = await api<Job>("GET", `/jobs/${id}`);
    expect(job.schedule).toEqual({ cron: "30 2 * * *", timezone: "America/New_York" });
    expect(job.name).toBe("nightly export");
    await checkPage("job");

    await page.getByRole("link", { name: "Jobs", exact: true }).click();
    const row = page.getByRole("row", { name: /nightly export/ });
    await row.waitFor();
    expect(await row.textContent()).toContain("At 02:30 (America/New_York)");
  });

  it("shows a one-off's run appear and finish without a reload", async () => {
    const { job, on, before, navigations } = await oneOff;
    try {
      expect([...before.values()]).not.toContain("succeeded");
      const row = on.locator("tr[data-run-id]", { has: on.locator(".status-succeeded") });
      await row.waitFor({ timeout: 30_000 });
      expect(navigations()).toBe(0);
      const runs = await api<{ items: Run[] }>("GET", `/jobs/${job.id}/runs`);
      const succeeded = runs.items.find((r) => r.status === "succeeded");
      expect(await row.getAttribute("data-run-id")).toBe(succeeded?.runId);
      await checkPage("job-runs", true, on);
    } finally {
      await on.close();
    }
  });

  it("cancels a queued run from its row: the run ends cancelled and its button goes", async () => {
    const job = await api<Job>("POST", "/jobs", {
      name: "to cancel",
      type: "noop",
      schedule: { runAt: new Date(Date.now() + 120_000).toISOString() },
    });
    const [queued] = (await api<{ items: Run[] }>("GET", `/jobs/${job.id}/runs`)).items;
    expect(queued?.status).toBe("queued");
    await page.goto(`${sandbox.url}/console/jobs/${job.id}`);
    const row = page.locator(`tr[data-run-id="${queued?.runId}"]`);
    await row.getByRole("button", { name: "Cancel" }).click();
    await row.locator(".status-cancelled").waitFor();
    expect(await row.getByRole("button", { name: "Cancel" }).count()).toBe(0);
    const run = await api<Run & { cancelledBy: string }>(
      "GET",
      `/jobs/${job.id}/runs/${queued?.runId}`,
    );
    expect([run.status, run.cancelledBy]).toEqual(["cancelled", "api"]);
  });

  it("the runs filter asks the server: finished runs of an every-second job are not buried", async () => {
    const job = await everySecondJobThatRan(everySecond);
    await page.goto(`${sandbox.url}/console/jobs/${job.id}`);
    await page.getByRole("heading", { name: /every second/, level: 1 }).waitFor();
    await page.locator("tr[data-run-id]").first().waitFor();
    // The lookahead's queued occurrences fill the first page of the unfiltered timeline.
    expect(new Set((await runRows()).values())).toEqual(new Set(["queued"]));
    await page.getByLabel("queued", { exact: true }).uncheck();
    await page
      .locator("tr[data-run-id]", { has: page.locator(".status-succeeded") })
      .first()
      .waitFor();
    expect([...(await runRows()).values()]).not.toContain("queued");
    await api("POST", `/jobs/${job.id}/cancel`);
  });

  it("Load older runs reads each older page once: every run of the job shows once, and the button goes at the end", async () => {
    // The lookahead's queued occurrences: more than the timeline's first page of 50.
    const job = await api<Job>("POST", "/jobs", {
      name: "many runs",
      type: "noop",
      schedule: { every: "PT1S" },
    });
    // Cancelled, the job's history holds still: its queued runs end cancelled, none is added.
    await api("POST", `/jobs/${job.id}/cancel`);
    const every = await waitFor("the history to hold still", async () => {
      const before = await runIdsOf(job.id);
      await sleep(1_000);
      const after = await runIdsOf(job.id);
      return JSON.stringify(before) === JSON.stringify(after) ? after : undefined;
    });
    // More than the timeline's first page of 50.
    expect(every.length).toBeGreaterThan(50);

    await page.goto(`${sandbox.url}/console/jobs/${job.id}`);
    await page.getByRole("heading", { name: /many runs/, level: 1 }).waitFor();
    await page.locator("tr[data-run-id]").first().waitFor();
    const older = page.getByRole("button", { name: "Load older runs" });
    for (let click = 0; click < 6 && (await older.count()) > 0; click++) {
      const shown = await page.locator("tr[data-run-id]").count();
      await older.click();
      // A page read again adds no row: past 5 s the button stands, and the check below says so.
      await waitFor(
        "the older page",
        async () =>
          (await older.count()) === 0 || (await page.locator("tr[data-run-id]").count()) > shown,
        5_000,
      ).catch(() => undefined);
    }
    expect(await older.count()).toBe(0);
    const rows = await page
      .locator("tr[data-run-id]")
      .evaluateAll((found) => found.map((row) => row.getAttribute("data-run-id")));
    expect(rows).toEqual(every);
  });

  it("Load older runs under a status filter: a run that leaves the filter goes from the page, read older or not", async () => {
    const job = await api<Job>("POST", "/jobs", {
      name: "queued then cancelled",
      type: "noop",
      schedule: { every: "PT1S" },
    });
    await page.goto(`${sandbox.url}/console/jobs/${job.id}`);
    await page.getByRole("heading", { name: /queued then cancelled/, level: 1 }).waitFor();
    for (const status of ["running", "succeeded", "failed", "dead", "skipped", "cancelled"])
      await page.getByLabel(status, { exact: true }).uncheck();
    // The lookahead's queued occurrences: more than the first page of 50.
    const older = page.getByRole("button", { name: "Load older runs" });
    await older.waitFor();
    await older.click();
    await waitFor("the older page", async () => (await runRows()).size > 50);
    // Cancelled, the job's queued runs end cancelled: none is queued any more.
    await api("POST", `/jobs/${job.id}/cancel`);
    await waitFor(
      "no queued run",
      async () =>
        (await api<{ items: Run[] }>("GET", `/jobs/${job.id}/runs?status=queued`)).items.length ===
        0,
    );
    // The first page polled again lists none; the runs read before it showed go with it.
    await waitFor(
      "the page to list no run",
      async () => (await runRows()).size === 0,
      10_000,
    ).catch(() => undefined);
    expect([...(await runRows()).values()]).toEqual([]);
    // Nothing is left to read: no button reads an older page the list no longer has.
    expect(await older.count()).toBe(0);
  }, 90_000);

  it("Load older runs: a run that came after the older read, then newer ones pushed off the first page, still shows", async () => {
    const job = await api<Job>("POST", "/jobs", {
      name: "triggered many times",
      type: "noop",
      schedule: { cron: "0 0 1 1 *", timezone: "UTC" },
    });
    const trigger = async (times: number) => {
      const runs: Run[] = [];
      for (let i = 0; i < times; i++) runs.push(await api<Run>("POST", `/jobs/${job.id}/trigger`));
      return runs;
    };
    await trigger(55);
    await page.goto(`${sandbox.url}/console/jobs/${job.id}`);
    await page.getByRole("heading", { name: /triggered many times/, level: 1 }).waitFor();
    await page.locator("tr[data-run-id]").nth(49).waitFor();
    await page.getByRole("button", { name: "Load older runs" }).click();
    await page.locator("tr[data-run-id]").nth(54).waitFor();
    // Ten more, shown on the polled first page; then fifty more push them off it.
    const between = await trigger(10);
    for (const run of between) await page.locator(`tr[data-run-id="${run.runId}"]`).waitFor();
    const newest = (await trigger(50)).at(-1);
    await page.locator(`tr[data-run-id="${newest?.runId}"]`).waitFor();
    const rows = await page
      .locator("tr[data-run-id]")
      .evaluateAll((found) => found.map((row) => row.getAttribute("data-run-id")));
    expect(rows).toEqual(await runIdsOf(job.id));
    await api("POST", `/jobs/${job.id}/cancel`);
  }, 90_000);

  /**
   * Side by side, a test's time includes its neighbours': "pages the dead letters" took 21 s of the
   * default 30 under load 10 (5 s one after another, at rest).
   */
  const SIDE_BY_SIDE_TIMEOUT_MS = 90_000;
  /**
   * Each on a page of its own, signed in as a tenant of its own (a tab's key is its own
   * sessionStorage), reading and writing only that tenant's jobs: side by side they wait for their
   * polls and dead letters together (vitest's maxConcurrency, 5 at a time). One after another they
   * took 40 s of the file's 90 s, most of it waiting for a poll. The longer ones start first:
   * "edits a job after other jobs", one of the longest, was the last to start and ended the block
   * 10 s after the others.
   */
  describe.concurrent("other tenants' pages, side by side", () => {
    it(
      "edits a job after other jobs as one: its upstreams and `on` shown and kept, changed as asked, its preview saying it has no times of its own; the create form makes one too",
      async ({ expect }) => {
        const other = await signedInJobsPage(DEPENDENT_KEY);
        const call = <T>(method: string, path: string, body?: unknown) =>
          api<T>(method, path, body, {}, DEPENDENT_KEY);
        try {
          const daily = { cron: "0 2 * * *", timezone: "UTC" };
          const exporter = await call<Job>("POST", "/jobs", {
            name: "export",
            type: "noop",
            schedule: daily,
          });
          const importer = await call<Job>("POST", "/jobs", {
            name: "import",
            type: "noop",
            schedule: daily,
          });
          const after = { jobs: [exporter.id], on: "failure" };
          const dependent = await call<Job>("POST", "/jobs", {
            name: "alert",
            type: "noop",
            schedule: { after },
          });
          await other.goto(`${sandbox.url}/console/jobs/${dependent.id}`);
          const nextRuns = other.getByRole("region", { name: "Next runs", exact: true });
          const inWords = `No times of its own: it runs once for each run of ${exporter.id} that fails for good: ends dead (failure).`;

          const openForm = async () => {
            await other.getByRole("button", { name: "Edit job" }).click();
            return other.getByRole("form", { name: "Edit job" });
          };
          let form = await openForm();
          const checkedKind = () =>
            form.locator('input[name="scheduleKind"]:checked').getAttribute("value");
          const upstreams = form.getByLabel("Upstream job ids");
          const on = form.getByLabel("Runs when an upstream run");
          const preview = form.getByRole("region", { name: "Next runs of this schedule" });
          expect(await checkedKind()).toBe("after");
          expect(await upstreams.inputValue()).toBe(exporter.id);
          expect(await on.inputValue()).toBe("failure");
          // What the previews say: the form's once the API took the schedule, the job page's at once.
          await preview.locator("p").waitFor();
          expect(await preview.locator("p").textContent()).toBe(inWords);
          expect(await preview.locator("li").count()).toBe(0);
          await nextRuns.locator("p").waitFor();
          expect(await nextRuns.locator("p").textContent()).toBe(inWords);
          expect(await accessibilityViolations(other)).toEqual([]);

          // A rename sends the name alone: the schedule stays as it was.
          await form.getByLabel("Name", { exact: true }).fill("failure alert");
          await form.getByRole("button", { name: "Save changes" }).click();
          await other.getByRole("heading", { name: /failure alert/, level: 1 }).waitFor();
          expect(await call<Job>("GET", `/jobs/${dependent.id}`)).toMatchObject({
            name: "failure alert",
            version: 2,
            schedule: { after },
          });

          // Its upstreams, typed in another order, and `on` change; the API sorts the ids.
          form = await openForm();
          await upstreams.fill(`${importer.id}, ${exporter.id}`);
          await on.selectOption("completion");
          await preview.getByText(`${exporter.id} or ${importer.id} that ends`).waitFor();
          await form.getByRole("button", { name: "Save changes" }).click();
          await other.getByRole("button", { name: "Edit job" }).waitFor();
          const both = { jobs: [exporter.id, importer.id].sort(), on: "completion" };
          expect(await call<Job>("GET", `/jobs/${dependent.id}`)).toMatchObject({
            version: 3,
            schedule: { after: both },
          });

          // An id of no job of the tenant: the preview and the save name the field; nothing is written.
          form = await openForm();
          await upstreams.fill("01JD3Q6Z8Y0000000000000000");
          await preview.getByText("no job 01JD3Q6Z8Y0000000000000000 of this tenant").waitFor();
          await form.getByRole("button", { name: "Save changes" }).click();
          await form.getByRole("link", { name: /^schedule\.after\.jobs: / }).waitFor();
          expect(await call<Job>("GET", `/jobs/${dependent.id}`)).toMatchObject({
            version: 3,
            schedule: { after: both },
          });
          await form.getByRole("button", { name: "Close without saving" }).click();

          // The create form offers a schedule after other jobs.
          await other.goto(`${sandbox.url}/console`);
          await other.getByText("Create a job", { exact: true }).click();
          const create = other.getByRole("form", { name: "Create a job" });
          await create.getByLabel("Name", { exact: true }).fill("after import");
          await create.getByRole("radio", { name: "After other jobs" }).check();
          await create.getByLabel("Upstream job ids").fill(importer.id);
          await create
            .getByText(
              `No times of its own: it runs once for each run of ${importer.id} that succeeds`,
            )
            .waitFor();
          await create.getByRole("button", { name: "Create job" }).click();
          await other.waitForURL(/\/console\/jobs\/[0-9A-Z]+$/);
          const created = await call<Job>("GET", `/jobs/${other.url().split("/").at(-1) ?? ""}`);
          expect(created).toMatchObject({
            name: "after import",
            schedule: { after: { jobs: [importer.id], on: "success" } },
          });

          // A job of times edited into one after another job.
          await other.goto(`${sandbox.url}/console/jobs/${importer.id}`);
          form = await openForm();
          await form.getByRole("radio", { name: "After other jobs" }).check();
          await upstreams.fill(exporter.id);
          await form.getByRole("button", { name: "Save changes" }).click();
          await other.getByRole("button", { name: "Edit job" }).waitFor();
          expect(await call<Job>("GET", `/jobs/${importer.id}`)).toMatchObject({
            version: 2,
            schedule: { after: { jobs: [exporter.id], on: "success" } },
          });
        } finally {
          await other.close();
        }
      },
      SIDE_BY_SIDE_TIMEOUT_MS,
    );

    it(
      "a runs filter whose first page read no match but has more says so, not 'No runs yet.', and Load older runs finds the match",
      async ({ expect }) => {
        const job = await api<Job>(
          "POST",
          "/jobs",
          {
            name: "filtered runs",
            type: "noop",
            schedule: { cron: "0 0 1 1 *", timezone: "UTC" },
            // Two runs under way at once are both run, not the second recorded skipped.
            overlapPolicy: "allow",
          },
          {},
          FILTERED_RUNS_KEY,
        );
        const trigger = () =>
          api<Run>("POST", `/jobs/${job.id}/trigger`, undefined, {}, FILTERED_RUNS_KEY);
        const succeeded = async () =>
          (
            await api<{ items: Run[] }>(
              "GET",
              `/jobs/${job.id}/runs?status=succeeded`,
              undefined,
              {},
              FILTERED_RUNS_KEY,
            )
          ).items.length;
        // Triggered one after the other, so the second is the newer, and run side by side. The page
        // signs in meanwhile: its jobs list is not what this case reads.
        const [other, [oldest, newest]] = await Promise.all([
          signedInJobsPage(FILTERED_RUNS_KEY),
          (async () => {
            const first = await trigger();
            const second = await trigger();
            await waitFor("both runs to succeed", async () => (await succeeded()) === 2, 30_000);
            return [first, second] as const;
          })(),
        ]);
        // A filtered page gives up after ten reads (6,550 runs at the console's limit of 50), empty
        // with a cursor when none of them matched. The sandbox's table is out of this test's reach
        // and thousands of runs through the API take minutes, so the first filtered page is answered
        // as the server answers then: no run, and the server's own cursor past the newest run (read
        // with limit=1), standing in for the runs of other statuses read before the match.
        const runsPath = `/jobs/${job.id}/runs`;
        const firstFiltered = (url: URL) =>
          url.pathname === runsPath &&
          url.searchParams.has("status") &&
          !url.searchParams.has("cursor");
        await other.route(firstFiltered, async (route) => {
          const url = new URL(route.request().url());
          url.searchParams.set("limit", "1");
          const answer = await route.fetch({ url: url.toString() });
          const read = (await answer.json()) as { items: Run[]; nextCursor: string | null };
          if (read.items[0]?.runId !== newest.runId || read.nextCursor === null)
            throw new Error(`unexpected first page: ${JSON.stringify(read)}`);
          return route.fulfill({ json: { items: [], nextCursor: read.nextCursor } });
        });
        try {
          await other.goto(`${sandbox.url}/console/jobs/${job.id}`);
          await other.getByRole("heading", { name: /filtered runs/, level: 1 }).waitFor();
          await other.locator("tr[data-run-id]").first().waitFor();
          for (const status of ["queued", "running", "failed", "dead", "skipped", "cancelled"])
            await other.getByLabel(status, { exact: true }).uncheck();
          const runs = other.getByRole("region", { name: "Runs", exact: true });
          const empty = runs.locator("p").filter({ hasText: /^No / });
          await empty.waitFor();
          expect(await empty.textContent()).toBe(
            "No succeeded runs among the newest read: Load older runs reads older ones.",
          );
          expect(await other.locator("tr[data-run-id]").count()).toBe(0);
          const older = other.getByRole("button", { name: "Load older runs" });
          await older.click();
          await other.locator(`tr[data-run-id="${oldest.runId}"]`).waitFor({ timeout: 10_000 });
          expect(await older.count()).toBe(0);
          expect(await empty.count()).toBe(0);
          // Past the last page, as the server answers it: none of the filter's statuses, no button.
          // Waits for a poll's read under way in the handler: unrouted beneath it, its fulfil threw
          // "Route is already handled!", an unhandled rejection that failed the file.
          await other.unrouteAll({ behavior: "wait" });
          await other.getByLabel("failed", { exact: true }).check();
          await other.getByLabel("succeeded", { exact: true }).uncheck();
          await empty.waitFor();
          expect(await empty.textContent()).toBe("No failed runs.");
          expect(await older.count()).toBe(0);
        } finally {
          await other.close();
        }
      },
      SIDE_BY_SIDE_TIMEOUT_MS,
    );

    it(
      "pages the dead letters: one past the first hundred is shown and replayed after Load more",
      async ({ expect }) => {
        const asOther = <T>(method: string, path: string, body?: unknown) =>
          api<T>(method, path, body, {}, MANY_DEAD_KEY);
        const failing = (index: number) => ({
          name: `dead ${index}`,
          type: "fail",
          payload: { retryable: false },
          schedule: { runAt: new Date().toISOString() },
        });
        // The first job dies first, so it is the oldest dead letter: the last a listing reaches.
        const first = await asOther<Job>("POST", "/jobs", failing(0));
        const firstDead = await waitFor(
          "the first job's dead letter",
          async () =>
            (await asOther<{ items: Run[] }>("GET", `/jobs/${first.id}/runs?status=dead`)).items[0],
          30_000,
          250,
        );
        // The other 100, to take the first one past the first hundred (the page read no more, once),
        // in four batches at once: which of them dies first does not matter.
        await Promise.all(
          [0, 1, 2, 3].map(async (batch) => {
            const jobs = Array.from({ length: 25 }, (_, i) => failing(1 + batch * 25 + i));
            const answered = await asOther<{ results: { status: number }[] }>(
              "POST",
              "/jobs:batch",
              { jobs },
            );
            expect(answered.results.map((r) => r.status)).toEqual(jobs.map(() => 201));
          }),
        );
        await waitFor(
          "101 dead letters",
          async () => {
            let count = 0;
            let cursor: string | null | undefined;
            do {
              const page = await asOther<{ items: Run[]; nextCursor: string | null }>(
                "GET",
                `/dead-letters?limit=100${cursor ? `&cursor=${cursor}` : ""}`,
              );
              count += page.items.length;
              cursor = page.nextCursor;
            } while (cursor);
            return count === 101 ? count : undefined;
          },
          60_000,
          500,
        );

        const other = await browser.context.newPage();
        try {
          await other.goto(`${sandbox.url}/console/dead-letters`);
          await other.getByLabel("API key", { exact: true }).fill(MANY_DEAD_KEY);
          await other.getByRole("button", { name: "Sign in" }).click();
          await other.getByRole("heading", { name: "Dead letters", level: 1 }).waitFor();
          await other.locator("tr[data-run-id]").first().waitFor();
          const row = other.locator(`tr[data-run-id="${firstDead.runId}"]`);
          const rows = other.locator("tr[data-run-id]");
          for (let more = 0; more < 5 && (await row.count()) === 0; more++) {
            // Each click's page is awaited before the next: on a loaded machine a read outlasted a
            // fixed half second, the next click went to the read under way, and its landing took
            // the button away while the loop waited for it.
            const shown = await rows.count();
            await other
              .getByRole("button", { name: "Load more dead letters" })
              .click({ timeout: 5_000 });
            await waitFor("the older page", async () => (await rows.count()) > shown, 10_000);
          }
          await row.waitFor({ timeout: 5_000 });
          expect(await rows.count()).toBe(101);
          // That was the last page: no button reads one again.
          expect(await other.getByRole("button", { name: "Load more dead letters" }).count()).toBe(
            0,
          );
          await row.getByRole("button", { name: /^Replay/ }).click();
          await other
            .getByText(/Replayed: attempt 2/)
            .first()
            .waitFor();
          await row.waitFor({ state: "detached" });
          const replayed = await asOther<Run>("GET", `/jobs/${first.id}/runs/${firstDead.runId}`);
          expect(replayed.replayedBy).not.toBeNull();
          // One on the first page replayed elsewhere (the CLI, another tab) goes from this page too,
          // though older pages were read since that page was.
          const elsewhere = await other
            .locator("tr[data-run-id]")
            .nth(9)
            .getAttribute("data-run-id");
          await asOther("POST", `/dead-letters/${elsewhere}/replay`);
          const gone = other.locator(`tr[data-run-id="${elsewhere}"]`);
          await gone.waitFor({ state: "detached", timeout: 10_000 }).catch(() => undefined);
          expect(await gone.count()).toBe(0);
        } finally {
          await other.close();
        }
      },
      SIDE_BY_SIDE_TIMEOUT_MS,
    );

    it(
      "a dead letter replayed while Load more dead letters is reading is not shown again when that page lands",
      async ({ expect }) => {
        const asOther = <T>(method: string, path: string, body?: unknown) =>
          api<T>(method, path, body, {}, REPLAY_RACE_KEY);
        await Promise.all(
          [0, 1, 2].map((batch) => {
            const jobs = Array.from({ length: 17 }, (_, i) => ({
              name: `race ${batch * 17 + i}`,
              type: "fail",
              payload: { retryable: false },
              schedule: { runAt: new Date().toISOString() },
            }));
            return asOther("POST", "/jobs:batch", { jobs });
          }),
        );
        await waitFor(
          "51 dead letters",
          async () => {
            const first = await asOther<{ items: Run[]; nextCursor: string | null }>(
              "GET",
              "/dead-letters?limit=50",
            );
            if (first.nextCursor === null) return undefined;
            const second = await asOther<{ items: Run[] }>(
              "GET",
              `/dead-letters?limit=50&cursor=${first.nextCursor}`,
            );
            return second.items.length === 1 ? true : undefined;
          },
          60_000,
          500,
        );
        const other = await browser.context.newPage();
        try {
          await other.goto(`${sandbox.url}/console/dead-letters`);
          await other.getByLabel("API key", { exact: true }).fill(REPLAY_RACE_KEY);
          await other.getByRole("button", { name: "Sign in" }).click();
          await other.getByRole("heading", { name: "Dead letters", level: 1 }).waitFor();
          await other.locator("tr[data-run-id]").nth(49).waitFor();
          // The older page's answer is slow (a cold API function): held until the replay is done.
          let release = () => {};
          const held = new Promise<void>((resolve) => {
            release = resolve;
          });
          const olderPage = (url: URL) =>
            url.pathname === "/dead-letters" && url.searchParams.has("cursor");
          await other.route(olderPage, async (route) => {
            const response = await route.fetch();
            await held;
            return route.fulfill({ response });
          });
          const answered = other.waitForResponse((r) => olderPage(new URL(r.url())));
          await other.getByRole("button", { name: "Load more dead letters" }).click();
          const row = other.locator("tr[data-run-id]").first();
          const runId = await row.getAttribute("data-run-id");
          await row.getByRole("button", { name: /^Replay/ }).click();
          await other
            .getByText(/Replayed: attempt 2/)
            .first()
            .waitFor();
          await other.locator(`tr[data-run-id="${runId}"]`).waitFor({ state: "detached" });
          release();
          await answered;
          await other
            .getByRole("button", { name: "Load more dead letters" })
            .waitFor({ state: "detached" });
          await other.waitForTimeout(500);
          // Its replay (attempt 2) may die too, as a dead letter of its own: the replayed one stays gone.
          expect(await other.locator(`tr[data-run-id="${runId}"]`).count()).toBe(0);
        } finally {
          await other.close();
        }
      },
      SIDE_BY_SIDE_TIMEOUT_MS,
    );

    it(
      "says why Load more jobs read nothing (a 429), reads the next page when asked again, and shows each job once: no button past the last page, none lost to a newer job, none left by one deleted elsewhere",
      async ({ expect }) => {
        await createJobs(MANY_JOBS_KEY, [25, 25, 1]);
        const other = await signedInJobsPage(MANY_JOBS_KEY);
        try {
          const button = other.getByRole("button", { name: "Load more jobs" });
          await button.waitFor();
          expect(await other.locator("tbody tr").count()).toBe(50);
          // The quota's refusal, which the sandbox gives only to a tenant over its requestsPerSecond.
          const limited = "too many requests for this tenant: try again in 1 s";
          await other.route(/\/jobs\?.*cursor=/, (route) =>
            route.fulfill({
              status: 429,
              headers: { "Content-Type": "application/json", "Retry-After": "1" },
              body: JSON.stringify({ error: { code: "rate_limited", message: limited } }),
            }),
          );
          await button.click();
          await other.getByRole("alert").filter({ hasText: limited }).waitFor({ timeout: 5_000 });
          await other.unroute(/\/jobs\?.*cursor=/);
          // Each date formatter the page makes from here on is counted: the older page's rows are
          // in the zone the first page's were (UTC), whose formatter the page has made already.
          // Made again for every time shown, they were most of what a poll of 100 rows cost. The
          // create form (closed) previews its schedule 300 ms after it mounts, in the browser's
          // zone, with a formatter of its own: counted only if it landed after this, so waited for.
          await other.locator(".create .preview time").first().waitFor({ state: "attached" });
          await other.evaluate(
            "(() => { const Made = Intl.DateTimeFormat; window.formattersMade = 0; Intl.DateTimeFormat = new Proxy(Made, { construct(target, args) { window.formattersMade += 1; return Reflect.construct(target, args); } }); })()",
          );
          await button.click();
          await other.locator("tbody tr").nth(50).waitFor({ timeout: 5_000 });
          expect(await other.evaluate("window.formattersMade")).toBe(0);
          expect(await other.getByRole("alert").filter({ hasText: limited }).count()).toBe(0);
          // That was the last page: no button reads one again, and each job shows once, in the order
          // GET /jobs lists them.
          expect(await button.count()).toBe(0);
          const listed = async () =>
            (
              await api<{ items: Job[]; nextCursor: string | null }>(
                "GET",
                "/jobs?limit=100",
                undefined,
                {},
                MANY_JOBS_KEY,
              )
            ).items.map((job) => job.id);
          const shown = () =>
            other
              .locator("tbody tr th a")
              .evaluateAll((links) =>
                links.map((link) => link.getAttribute("href")?.split("/").at(-1)),
              );
          expect(await shown()).toEqual(await listed());
          // A job created now pushes the first page's last job off the polled page: it is still shown,
          // between the first page and the older one.
          await api(
            "POST",
            "/jobs",
            { type: "noop", schedule: { runAt: "2030-01-01T00:00:00Z" } },
            {},
            MANY_JOBS_KEY,
          );
          await other.locator("tbody tr").nth(51).waitFor({ timeout: 10_000 });
          expect(await shown()).toEqual(await listed());
          expect(await button.count()).toBe(0);
          // One on the first page deleted elsewhere (the CLI, another tab) goes from this page too,
          // though an older page was read since that page was.
          const deleted = (await shown())[9];
          await api("DELETE", `/jobs/${deleted}`, undefined, {}, MANY_JOBS_KEY);
          const gone = other.locator(`tbody tr th a[href$="/${deleted}"]`);
          await gone.waitFor({ state: "detached", timeout: 10_000 }).catch(() => undefined);
          expect(await gone.count()).toBe(0);
          expect(await shown()).toEqual(await listed());
        } finally {
          await other.close();
        }
      },
      SIDE_BY_SIDE_TIMEOUT_MS,
    );

    it(
      "a status filter whose first page read no match but has more says so, not 'No jobs yet.', and Load more jobs finds the match",
      async ({ expect }) => {
        // A filtered page reads at most 100 jobs: the paused one, the oldest of 101, lies past them.
        const jobs = await createJobs(FILTERED_KEY, [25, 25, 25, 25, 1]);
        const oldest = jobs.at(-1);
        if (oldest === undefined) throw new Error("no job created");
        await api("POST", `/jobs/${oldest.id}/pause`, {}, {}, FILTERED_KEY);
        const other = await signedInJobsPage(FILTERED_KEY);
        try {
          await other.getByLabel("Status").selectOption("paused");
          // What the page says once the filtered first page landed: it is empty, and has a cursor.
          const empty = other.locator("section p").filter({ hasText: /^No / });
          await empty.waitFor();
          expect(await empty.textContent()).toBe(
            "No paused jobs among the newest read: Load more jobs reads older ones.",
          );
          expect(await other.locator("tbody tr").count()).toBe(0);
          const button = other.getByRole("button", { name: "Load more jobs" });
          await button.click();
          await other.locator(`tbody tr th a[href$="/${oldest.id}"]`).waitFor({ timeout: 10_000 });
          expect(await button.count()).toBe(0);
        } finally {
          await other.close();
        }
      },
      SIDE_BY_SIDE_TIMEOUT_MS,
    );

    it(
      "a job cancelled after Load more jobs, then pushed off the polled page by newer jobs, is shown cancelled, not as it was before",
      async ({ expect }) => {
        const [newest] = await createJobs(CHANGING_JOBS_KEY, [25, 25, 1]);
        if (newest === undefined) throw new Error("no job created");
        const other = await signedInJobsPage(CHANGING_JOBS_KEY);
        try {
          await other.getByRole("button", { name: "Load more jobs" }).click();
          await other.locator("tbody tr").nth(50).waitFor({ timeout: 5_000 });
          const row = other.locator("tbody tr", {
            has: other.locator(`a[href="/console/jobs/${newest.id}"]`),
          });
          await api("POST", `/jobs/${newest.id}/cancel`, {}, {}, CHANGING_JOBS_KEY);
          await row.locator(".status-cancelled").waitFor({ timeout: 10_000 });
          // Fifty newer jobs push it off the polled first page: it is shown from what was kept.
          await createJobs(CHANGING_JOBS_KEY, [25, 25]);
          await other.locator("tbody tr").nth(100).waitFor({ timeout: 10_000 });
          expect(await row.locator(".status").textContent()).toBe("cancelled");
        } finally {
          await other.close();
        }
      },
      SIDE_BY_SIDE_TIMEOUT_MS,
    );

    it(
      "a job cancelled and pushed off the polled page while Load more jobs is reading is shown cancelled when that page lands",
      async ({ expect }) => {
        const [newest] = await createJobs(HELD_OLDER_KEY, [25, 25, 1]);
        if (newest === undefined) throw new Error("no job created");
        const other = await signedInJobsPage(HELD_OLDER_KEY);
        try {
          const row = other.locator("tbody tr", {
            has: other.locator(`a[href="/console/jobs/${newest.id}"]`),
          });
          await row.locator(".status-active").waitFor();
          // The older page's answer is slow: held while the job is cancelled, and fifty newer jobs,
          // which a poll shows, push it off the first page.
          const release = await held(other, (url) => url.searchParams.has("cursor"));
          const answered = other.waitForResponse((r) =>
            new URL(r.url()).searchParams.has("cursor"),
          );
          await other.getByRole("button", { name: "Load more jobs" }).click();
          await api("POST", `/jobs/${newest.id}/cancel`, {}, {}, HELD_OLDER_KEY);
          await row.locator(".status-cancelled").waitFor({ timeout: 10_000 });
          await createJobs(HELD_OLDER_KEY, [25, 25]);
          await row.waitFor({ state: "detached", timeout: 10_000 });
          release();
          await answered;
          await other.locator("tbody tr").nth(100).waitFor({ timeout: 10_000 });
          expect(await row.locator(".status").textContent()).toBe("cancelled");
        } finally {
          await other.close();
        }
      },
      SIDE_BY_SIDE_TIMEOUT_MS,
    );

    it(
      "a job cancelled and pushed off the first page between two polls is shown cancelled by Load more jobs, not as the last poll to list it showed it",
      async ({ expect }) => {
        // The first page's last job (the oldest is on the second page): one newer job pushes it off.
        const last = (await createJobs(HELD_POLL_KEY, [25, 25, 1]))[49];
        if (last === undefined) throw new Error("no job created");
        const other = await signedInJobsPage(HELD_POLL_KEY);
        try {
          const row = other.locator("tbody tr", {
            has: other.locator(`a[href="/console/jobs/${last.id}"]`),
          });
          await row.locator(".status-active").waitFor();
          // Polls are held (a slow network) while it is cancelled and one newer job pushes it off.
          const release = await held(other, (url) => !url.searchParams.has("cursor"));
          await api("POST", `/jobs/${last.id}/cancel`, {}, {}, HELD_POLL_KEY);
          await createJobs(HELD_POLL_KEY, [1]);
          release();
          await row.waitFor({ state: "detached", timeout: 10_000 });
          await other.getByRole("button", { name: "Load more jobs" }).click();
          await row.waitFor({ timeout: 10_000 });
          expect(await row.locator(".status").textContent()).toBe("cancelled");
        } finally {
          await other.close();
        }
      },
      SIDE_BY_SIDE_TIMEOUT_MS,
    );

    it(
      "shows the jobs list over a network whose answers take longer than the console's polls",
      async ({ expect }) => {
        const [job] = await createJobs(SLOW_NETWORK_KEY, [1]);
        if (job === undefined) throw new Error("no job created");
        const other = await browser.context.newPage();
        try {
          // Each answer to GET /jobs takes longer than a poll (1 s, the sandbox's setting above).
          await other.route(
            (url) => url.pathname === "/jobs",
            async (route) => {
              const response = await route.fetch();
              await sleep(1_500);
              return route.fulfill({ response });
            },
          );
          await other.goto(`${sandbox.url}/console/jobs`);
          await other.getByLabel("API key", { exact: true }).fill(SLOW_NETWORK_KEY);
          await other.getByRole("button", { name: "Sign in" }).click();
          await other.getByRole("heading", { name: "Jobs", level: 1 }).waitFor();
          await other.locator(`tbody tr th a[href$="/${job.id}"]`).waitFor({ timeout: 10_000 });
          expect(await other.locator("tbody tr").count()).toBe(1);
        } finally {
          await other.close();
        }
      },
      SIDE_BY_SIDE_TIMEOUT_MS,
    );

    it(
      "a job named with nothing but spaces, 200 characters without one, or a right-to-left override: a link to follow, no page wider than the window, nothing beside the name reversed",
      async ({ expect }) => {
        const create = (name: string) =>
          api<Job>(
            "POST",
            "/jobs",
            { name, type: "noop", schedule: { every: "PT1H" } },
            {},
            ODD_NAMES_KEY,
          );
        const blank = await create("  ");
        const long = await create("x".repeat(200));
        // U+202E (right-to-left override) reverses what follows it, up to the end of its paragraph.
        const reversing = await create("\u202Ereversed");
        const other = await browser.context.newPage();
        /** How far the page is wider than its window: a name must wrap, not push the page sideways. */
        const overflow = async () =>
          Number(await other.evaluate("document.documentElement.scrollWidth - window.innerWidth"));
        /** Each status badge's height in lines of its text (a string: the tests compile without the DOM's types). */
        const statusLines = (): Promise<number[]> =>
          other.evaluate(
            "Array.from(document.querySelectorAll('main .status'), (badge) => Math.round(badge.getBoundingClientRect().height / parseFloat(getComputedStyle(badge).lineHeight)))",
          );
        try {
          await other.goto(`${sandbox.url}/console`);
          await other.getByLabel("API key", { exact: true }).fill(ODD_NAMES_KEY);
          await other.getByRole("button", { name: "Sign in" }).click();
          await other.getByRole("heading", { name: "Jobs", level: 1 }).waitFor();
          await other.locator("tbody tr").nth(1).waitFor();
          expect(await overflow()).toBeLessThanOrEqual(0);
          // The long name takes the squeeze: a status stays on one line ("active", not "acti / ve").
          const onJobsPage = await statusLines();
          expect(onJobsPage.length).toBeGreaterThanOrEqual(3);
          expect(onJobsPage.filter((lines) => lines !== 1)).toEqual([]);
          // A name's direction stays inside it: the type beside it still reads "noop", not "poon".
          const letterLefts: number[] = await other.evaluate(
            `(() => { const text = document.querySelector('tr:has(a[href="/console/jobs/${reversing.id}"]) .hint').lastChild; const at = (i) => { const range = document.createRange(); range.setStart(text, i); range.setEnd(text, i + 1); return range.getBoundingClientRect().left; }; const start = text.data.indexOf("noop"); return [at(start), at(start + 3)]; })()`,
          );
          expect(letterLefts[0]).toBeLessThan(letterLefts[1] ?? Number.NaN);
          expect(await accessibilityViolations(other)).toEqual([]);
          // The blank-named job's link says which job it is, and leads there.
          await other.getByRole("link", { name: blank.id }).click();
          await other.getByRole("heading", { name: blank.id, level: 1 }).waitFor();

          await other.goto(`${sandbox.url}/console/jobs/${long.id}`);
          await other.getByRole("heading", { name: /^x{200}/, level: 1 }).waitFor();
          expect(await overflow()).toBeLessThanOrEqual(0);
          // The job's status beside its name, its last run's, and any in its runs table.
          const onJobPage = await statusLines();
          expect(onJobPage.length).toBeGreaterThanOrEqual(2);
          expect(onJobPage.filter((lines) => lines !== 1)).toEqual([]);
        } finally {
          await other.close();
        }
      },
      SIDE_BY_SIDE_TIMEOUT_MS,
    );
  });

  /** A one-off that fails for good, and its dead letter once listed. */
  async function deadLetterOf(name: string) {
    const job = await api<Job>("POST", "/jobs", {
      name,
      type: "fail",
      payload: { retryable: false },
      schedule: { runAt: new Date().toISOString() },
    });
    const dead = await waitFor(
      "the run to be a dead letter",
      async () =>
        (await api<{ items: (Run & { jobId: string })[] }>("GET", "/dead-letters")).items.find(
          (r) => r.jobId === job.id,
        ),
      30_000,
      250,
    );
    return { job, dead };
  }

  it("replays a dead letter from the dead-letters page", async () => {
    const { job, dead } = await deadLetterOf("always fails");
    await page.getByRole("link", { name: "Dead letters" }).click();
    const row = page.locator(`tr[data-run-id="${dead.runId}"]`);
    await row.waitFor();
    expect(await row.textContent()).toContain("fail: attempt 1");
    await checkPage("dead-letters");
    await row.getByRole("button", { name: /^Replay/ }).click();

    await page
      .getByText(/Replayed: attempt 2/)
      .first()
      .waitFor();
    await row.waitFor({ state: "detached" });
    const replayed = await api<Run>("GET", `/jobs/${job.id}/runs/${dead.runId}`);
    expect(replayed.replayedBy).not.toBeNull();
    const runs = await api<{ items: Run[] }>("GET", `/jobs/${job.id}/runs`);
    expect(runs.items.find((r) => r.runId === replayed.replayedBy)?.attempt).toBe(2);
  });

  it("a double click on Replay is one replay: both answers name its run, and no error shows", async () => {
    const { job, dead } = await deadLetterOf("fails, replayed twice over");
    await page.getByRole("link", { name: "Dead letters" }).click();
    const row = page.locator(`tr[data-run-id="${dead.runId}"]`);
    await row.waitFor();
    const answers: number[] = [];
    const onResponse = (response: { url(): string; status(): number }) => {
      if (response.url().endsWith(`/dead-letters/${dead.runId}/replay`))
        answers.push(response.status());
    };
    page.on("response", onResponse);
    try {
      await row.getByRole("button", { name: /^Replay/ }).dblclick();
      await waitFor("both replays answered", () => answers.length >= 2, 10_000, 50);
    } finally {
      page.off("response", onResponse);
    }
    expect(answers.sort()).toEqual([200, 202]);
    await page
      .getByText(/Replayed: attempt 2/)
      .first()
      .waitFor();
    expect(await page.getByRole("alert").count()).toBe(0);
    const runs = await api<{ items: Run[] }>("GET", `/jobs/${job.id}/runs`);
    expect(runs.items.filter((r) => r.attempt === 2)).toHaveLength(1);
  });

  it("a double click on Trigger now queues one run: the button waits for the first trigger's answer", async () => {
    // A one-off far ahead: its only run is the one a trigger queues.
    const job = await api<Job>("POST", "/jobs", {
      name: "triggered by a double click",
      type: "noop",
      schedule: { runAt: "2030-01-01T00:00:00Z" },
    });
    try {
      await page.goto(`${sandbox.url}/console/jobs/${job.id}`);
      const triggers: string[] = [];
      const onRequest = (request: { url(): string; method(): string }) => {
        if (request.method() === "POST" && request.url().endsWith(`/jobs/${job.id}/trigger`))
          triggers.push(request.url());
      };
      page.on("request", onRequest);
      try {
        await page.getByRole("button", { name: "Trigger now" }).dblclick();
        await page.getByText("Run queued").first().waitFor();
        // The button is back, and only then could a second trigger have been sent.
        await page.locator('button[aria-disabled="false"]', { hasText: "Trigger now" }).waitFor();
      } finally {
        page.off("request", onRequest);
      }
      expect(triggers).toHaveLength(1);
      expect((await api<{ items: Run[] }>("GET", `/jobs/${job.id}/runs`)).items).toHaveLength(1);
    } finally {
      // Off the tenant's list, which the last case counts.
      await api("DELETE", `/jobs/${job.id}`);
    }
  });

  it("Create job, and Trigger now, pressed again after an answer that was lost (a 502 of a request applied) make one job and one run", async () => {
    const name = "created once, answered 502";
    const namedSo = async () =>
      (await api<{ items: Job[] }>("GET", "/jobs?limit=100")).items.filter((j) => j.name === name);
    /**
     * The page's POSTs to `pathname`, each applied by the API; the first one's answer is lost on
     * the way back, as with API Gateway's 502 or 504 after the function wrote. Gives the
     * Idempotency-Key each carried, and the function that ends the routing.
     */
    const firstAnswerLost = async (pathname: string) => {
      const keys: (string | null)[] = [];
      const matches = (url: URL) => url.pathname === pathname;
      await page.route(matches, async (route) => {
        if (route.request().method() !== "POST") return route.fallback();
        keys.push(await route.request().headerValue("idempotency-key"));
        const answer = await route.fetch();
        if (keys.length > 1) return route.fulfill({ response: answer });
        return route.fulfill({ status: 502, json: { message: "Internal Server Error" } });
      });
      return { keys, end: () => page.unroute(matches) };
    };
    const errorsBefore = browser.errors.length;
    try {
      const creates = await firstAnswerLost("/jobs");
      try {
        await page.goto(`${sandbox.url}/console`);
        await page.getByText("Create a job", { exact: true }).click();
        const form = page.getByRole("form", { name: "Create a job" });
        await form.getByLabel("Name", { exact: true }).fill(name);
        await form.getByLabel("Cron expression", { exact: true }).fill("0 3 * * *");
        await form.getByLabel("Time zone", { exact: true }).fill("UTC");
        await form.getByRole("button", { name: "Create job" }).click();
        await form.getByRole("alert").waitFor();
        await form.getByRole("button", { name: "Create job" }).click();
        await page.waitForURL(/\/console\/jobs\/[0-9A-Z]+$/);
      } finally {
        await creates.end();
      }
      const created = await namedSo();
      const id = page.url().split("/").at(-1) ?? "";
      expect(created.map((j) => j.id)).toEqual([id]);
      expect(creates.keys).toHaveLength(2);
      expect(creates.keys[0]).toBe(creates.keys[1]);

      const runsBefore = (await api<{ items: Run[] }>("GET", `/jobs/${id}/runs`)).items.length;
      const triggers = await firstAnswerLost(`/jobs/${id}/trigger`);
      try {
        const button = page.getByRole("button", { name: "Trigger now" });
        await button.click();
        await page.getByRole("alert").waitFor();
        await button.click();
        await page.getByText("Run queued").first().waitFor();
      } finally {
        await triggers.end();
      }
      const runs = (await api<{ items: Run[] }>("GET", `/jobs/${id}/runs`)).items;
      expect(runs.length - runsBefore).toBe(1);
      expect(triggers.keys).toHaveLength(2);
      expect(triggers.keys[0]).toBe(triggers.keys[1]);
    } finally {
      // Off the tenant's list, which the last case counts.
      for (const job of await namedSo()) await api("DELETE", `/jobs/${job.id}`);
      // The browser logs each 502 this case answered as an error; the last case counts the others.
      const others = browser.errors
        .splice(errorsBefore)
        .filter((e) => !e.includes("status of 502"));
      browser.errors.push(...others);
    }
  });

  it("the cancel confirmation names the job on one line, its direction kept inside it: a name cannot rewrite the question", async () => {
    // A name that answers the question itself, then pushes the real question out of the dialog.
    const name = `nightly export for good?\n\nNothing is cancelled: this only pauses it.${"\n".repeat(30)}\u202Edesrever`;
    const spoofing = await api<Job>(
      "POST",
      "/jobs",
      { name, type: "noop", schedule: { every: "PT1H" } },
      {},
      ODD_NAMES_KEY,
    );
    const other = await browser.context.newPage();
    const asked: string[] = [];
    other.on("dialog", (dialog) => {
      asked.push(dialog.message());
      void dialog.dismiss();
    });
    try {
      await other.goto(`${sandbox.url}/console`);
      await other.getByLabel("API key", { exact: true }).fill(ODD_NAMES_KEY);
      await other.getByRole("button", { name: "Sign in" }).click();
      await other.getByRole("heading", { name: "Jobs", level: 1 }).waitFor();
      await other.goto(`${sandbox.url}/console/jobs/${spoofing.id}`);
      await other.getByRole("button", { name: "Cancel job" }).click();
      await waitFor("the confirmation", () => asked.length === 1);
      // Line breaks and runs of spaces as one space; the override closed at the name's end (U+202C,
      // isolable), and U+2068 (first strong isolate) and U+2069 (pop directional isolate) around
      // the name, so the question after it reads forward.
      expect(asked).toEqual([
        "Cancel \u2068nightly export for good? Nothing is cancelled: this only pauses it. \u202Edesrever\u202C\u2069 for good? Queued runs are cancelled.",
      ]);
      // Dismissed: the job is as it was.
      expect(
        (
          await api<Job & { status: string }>(
            "GET",
            `/jobs/${spoofing.id}`,
            undefined,
            {},
            ODD_NAMES_KEY,
          )
        ).status,
      ).toBe("active");
    } finally {
      await other.close();
    }
  });

  it("explains a conflict when the job changed since the edit form was opened, then applies the edit", async () => {
    const job = await api<Job>("POST", "/jobs", {
      name: "report",
      type: "noop",
      schedule: { cron: "0 9 * * 1-5", timezone: "Europe/Berlin" },
    });
    await page.goto(`${sandbox.url}/console/jobs/${job.id}`);
    await page.getByRole("button", { name: "Edit job" }).click();
    const form = page.getByRole("form", { name: "Edit job" });
    await form.getByLabel("Name", { exact: true }).fill("weekday report");

    // Someone else moves the schedule meanwhile: version 1 → 2.
    await api(
      "PATCH",
      `/jobs/${job.id}`,
      { schedule: { cron: "30 9 * * 1-5", timezone: "Europe/Berlin" } },
      {
        "If-Match": '"1"',
      },
    );
    await form.getByRole("button", { name: "Save changes" }).click();

    const conflict = page.getByRole("alert").filter({ hasText: "changed while you were editing" });
    await conflict.waitFor();
    const text = (await conflict.textContent()) ?? "";
    expect(text).toContain("You opened it at version 1; it is now at version 2");
    expect(text).toContain("412");
    expect(text).toMatch(/Changed meanwhile by someone else\s*schedule: \{"cron":"30 9 \* \* 1-5"/);
    expect(text).toMatch(/Your changes\s*name: weekday report/);
    await checkPage("edit-conflict");
    expect((await api<Job>("GET", `/jobs/${job.id}`)).name).toBe("report");

    await conflict.getByRole("button", { name: "Apply my changes to version 2" }).click();
    await page.getByRole("heading", { name: /weekday report/, level: 1 }).waitFor();
    const edited = await api<Job>("GET", `/jobs/${job.id}`);
    expect(edited).toMatchObject({
      name: "weekday report",
      version: 3,
      schedule: { cron: "30 9 * * 1-5", timezone: "Europe/Berlin" },
    });
  });

  it("an edit of a webhook's URL keeps the target's headers, timeout and mode, which the form does not show, and an edit conflict does not show the header values", async () => {
    const target = {
      url: "http://127.0.0.1:2/hook-old",
      headers: { Authorization: "Bearer receiver-key" },
      timeoutSeconds: 20,
      mode: "async",
    };
    const job = await api<Job>("POST", "/jobs", {
      name: "hook with headers",
      type: "http",
      target,
      schedule: { cron: "0 9 1 1 *", timezone: "UTC" },
    });
    await page.goto(`${sandbox.url}/console/jobs/${job.id}`);
    await page.getByRole("button", { name: "Edit job" }).click();
    const form = page.getByRole("form", { name: "Edit job" });
    await form.getByLabel("Webhook URL").fill("http://127.0.0.1:2/hook-new");
    // Someone else renames it meanwhile: the conflict lists the target, its header values hidden.
    await api("PATCH", `/jobs/${job.id}`, { name: "renamed" }, { "If-Match": '"1"' });
    await form.getByRole("button", { name: "Save changes" }).click();
    const conflict = page.getByRole("alert").filter({ hasText: "changed while you were editing" });
    await conflict.waitFor();
    const text = (await conflict.textContent()) ?? "";
    expect(text).toContain('"headers":{"Authorization":"…"}');
    expect(text).not.toContain("receiver-key");

    await conflict.getByRole("button", { name: "Apply my changes to version 2" }).click();
    await page.getByRole("button", { name: "Edit job" }).waitFor();
    const edited = await api<Job & { target: unknown }>("GET", `/jobs/${job.id}`);
    expect(edited).toMatchObject({ name: "renamed", version: 3 });
    expect(edited.target).toEqual({ ...target, url: "http://127.0.0.1:2/hook-new" });
  });

  it("an edit conflict applies my URL over the target as it now is: a header rotated meanwhile is kept, not put back", async () => {
    const target = {
      url: "http://127.0.0.1:2/hook-old",
      headers: { Authorization: "Bearer old-key" },
      timeoutSeconds: 20,
    };
    const job = await api<Job>("POST", "/jobs", {
      name: "hook rotated meanwhile",
      type: "http",
      target,
      schedule: { cron: "0 9 1 1 *", timezone: "UTC" },
    });
    await page.goto(`${sandbox.url}/console/jobs/${job.id}`);
    await page.getByRole("button", { name: "Edit job" }).click();
    const form = page.getByRole("form", { name: "Edit job" });
    await form.getByLabel("Webhook URL").fill("http://127.0.0.1:2/hook-new");
    // Someone else rotates the receiver's credential and lengthens the timeout meanwhile.
    const rotated = { ...target, headers: { Authorization: "Bearer new-key" }, timeoutSeconds: 25 };
    await api("PATCH", `/jobs/${job.id}`, { target: rotated }, { "If-Match": '"1"' });
    await form.getByRole("button", { name: "Save changes" }).click();
    const conflict = page.getByRole("alert").filter({ hasText: "changed while you were editing" });
    await conflict.waitFor();
    await conflict.getByRole("button", { name: "Apply my changes to version 2" }).click();
    await page.getByRole("button", { name: "Edit job" }).waitFor();
    const edited = await api<Job & { target: unknown }>("GET", `/jobs/${job.id}`);
    expect(edited).toMatchObject({ version: 3 });
    expect(edited.target).toEqual({ ...rotated, url: "http://127.0.0.1:2/hook-new" });
  });

  it("pauses and resumes a job with the keyboard alone", async () => {
    const job = await api<Job>("POST", "/jobs", {
      name: "keyboard",
      type: "noop",
      schedule: { every: "PT1H" },
    });
    await page.goto(`${sandbox.url}/console/jobs/${job.id}`);
    await page.getByRole("button", { name: "Pause" }).waitFor();
    /** Tabs forward until the button named `name` has focus, then presses Enter on it. */
    const press = async (name: string) => {
      for (let tab = 0; tab < 30; tab++) {
        await page.keyboard.press("Tab");
        const focused = await page.evaluate(
          "document.activeElement && document.activeElement.textContent",
        );
        if (focused === name) {
          await page.keyboard.press("Enter");
          return;
        }
      }
      throw new Error(`no focusable ${name} within 30 tabs`);
    };
    await press("Pause");
    await page.getByRole("heading", { name: /keyboard\s*paused/, level: 1 }).waitFor();
    expect((await api<{ status: string }>("GET", `/jobs/${job.id}`)).status).toBe("paused");
    await press("Resume");
    await page.getByRole("heading", { name: /keyboard\s*active/, level: 1 }).waitFor();
    expect((await api<{ status: string }>("GET", `/jobs/${job.id}`)).status).toBe("active");
  });

  it("serves the API reference at /docs from the OpenAPI document", async () => {
    const document = await api<{ paths: Record<string, Record<string, { operationId: string }>> }>(
      "GET",
      "/openapi.json",
    );
    await page.goto(`${sandbox.url}/docs`);
    const operations = Object.values(document.paths).flatMap((item) =>
      Object.values(item).map((op) => op.operationId),
    );
    expect(operations.length).toBeGreaterThan(10);
    // Rendered on the server, without a script: the page as loaded is the whole reference. Read in
    // one go: a wait per operation cost a round trip to the browser each, seconds on a loaded machine.
    const titled = await page
      .locator("section[id]")
      .evaluateAll((sections) =>
        sections.filter((section) => section.querySelector("h3")).map((section) => section.id),
      );
    expect(operations.filter((id) => !titled.includes(id))).toEqual([]);
    expect(await page.locator("section#schema-Job").textContent()).toContain("nextRunAt");
    await checkPage("docs", false);
  });

  it("lists every job created above with its status, and loaded nothing from outside the machine", async () => {
    await page.goto(`${sandbox.url}/console`);
    await page.locator("tbody tr").nth(12).waitFor();
    expect(await page.locator("tbody tr").count()).toBe(13);
    // A one-off whose run was cancelled has nothing left to run.
    expect(await page.getByRole("row", { name: /to cancel/ }).textContent()).toContain("completed");
    for (const name of [
      /every second/,
      /many runs/,
      /queued then cancelled/,
      /triggered many times/,
    ])
      expect(await page.getByRole("row", { name }).textContent()).toContain("cancelled");
    for (const name of [/always fails/, /fails, replayed twice over/])
      expect(await page.getByRole("row", { name }).textContent()).toContain("completed");
    await checkPage("jobs");

    const origin = new URL(sandbox.url).origin;
    const elsewhere = browser.requested
      .map((request) => request.url)
      .filter((url) => new URL(url).origin !== origin);
    expect(elsewhere).toEqual([]);
    expect(browser.errors.filter((e) => !e.includes("status of 4"))).toEqual([]);
  });

  it("answers a link to a job with a broken escape as no such job, not a blank page", async () => {
    const errorsBefore = browser.errors.length;
    await page.goto(`${sandbox.url}/console/jobs/%E0%A4%A`);
    await page.getByRole("heading", { name: "Job not found", level: 1 }).waitFor();
    expect(await page.locator("main code").textContent()).toBe("%E0%A4%A");
    await page.getByRole("link", { name: "All jobs" }).click();
    await page.getByRole("heading", { name: "Jobs", level: 1 }).waitFor();
    const errors = browser.errors.slice(errorsBefore);
    expect(errors.filter((e) => !e.includes("status of 4"))).toEqual([]);
  });

  // After the jobs list's count above: this job is the first tenant's fourteenth.
  it("shows a payload's 64-bit id as written in the edit form, and an edit of the payload's other field keeps it", async () => {
    const id64 = "12345678901234567890";
    // As text: JSON.stringify (the api() helper's) would send the id changed.
    const jobText = async (method: string, path: string, body?: string): Promise<string> => {
      const response = await fetch(`${sandbox.url}${path}`, {
        method,
        headers: { Authorization: `Bearer ${KEY}`, "Content-Type": "application/json" },
        ...(body === undefined ? {} : { body }),
      });
      return response.text();
    };
    const job = JSON.parse(
      await jobText(
        "POST",
        "/jobs",
        `{"name":"exact payload","type":"noop","schedule":{"runAt":"2030-01-01T00:00:00Z"},"payload":{"id":${id64},"note":"a"}}`,
      ),
    ) as Job;
    await page.goto(`${sandbox.url}/console/jobs/${job.id}`);
    await page.getByRole("button", { name: "Edit job" }).click();
    const form = page.getByRole("form", { name: "Edit job" });
    const box = form.getByLabel("Payload (JSON)", { exact: true });
    const shown = await box.inputValue();
    expect(shown).toContain(`"id": ${id64},`);
    await box.fill(shown.replace('"note": "a"', '"note": "b"'));
    await form.getByRole("button", { name: "Save changes" }).click();
    const edited = await waitFor("the edit saved", async () => {
      const text = await jobText("GET", `/jobs/${job.id}`);
      return text.includes('"version":2') && text;
    });
    expect(edited).toContain(`"payload":{"id":${id64},"note":"b"}`);
  });
});
