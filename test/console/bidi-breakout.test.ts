import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { boundedText } from "../../shared/storage/stored-text.js";
import { laidOut, lettersOf } from "../support/bidi-layout.js";
import type { Browser } from "../support/browser.js";
import { apiAs, signedInConsole } from "../support/console-session.js";
import type { SandboxProcess } from "../support/sandbox-process.js";

/**
 * A job's name (or a link's job id) laid out inside text the console writes around it: the name's
 * own bidirectional controls must not reorder the console's words. The console isolates it between
 * U+2068 and U+2069 (format.ts jobTitleInline), in a <bdi>, or in `main code` (unicode-bidi:
 * isolate); but a name that carries a U+2069 of its own, shown as written, closes that isolate
 * early, in each of the three (Chromium lays an isolating element out as if its text were wrapped
 * in those controls), and the U+202E after it then reverses the rest of the line: so the console
 * leaves out such a U+2069 (console/isolable.ts). Where the text is a native dialog the
 * test lays the dialog's own message out in a paragraph of the page.
 */
const KEY = "bidi-breakout-key";

let sandbox: SandboxProcess;
let browser: Browser;
let page: Page;

beforeAll(async () => {
  ({ sandbox, browser, page } = await signedInConsole(KEY, "bidi-tenant"));
}, 180_000);

afterAll(async () => {
  await browser?.close();
  await sandbox?.stop();
});

/** The question the job page shown asks when its "Cancel job" is clicked (the dialog dismissed). */
async function cancelQuestion(): Promise<string> {
  await page.getByRole("button", { name: "Cancel job" }).waitFor();
  const asked = new Promise<string>((resolve) => {
    page.once("dialog", (dialog) => {
      resolve(dialog.message());
      void dialog.dismiss();
    });
  });
  await page.getByRole("button", { name: "Cancel job" }).click();
  return asked;
}

describe("a job name that closes the console's isolate itself", () => {
  it("reverses none of the Cancel confirmation's own words after it", async () => {
    const job = await apiAs<{ id: string }>(sandbox.url, KEY, "POST", "/jobs", {
      name: "nightly report\u2069\u202E",
      type: "noop",
      schedule: { cron: "0 9 * * *", timezone: "UTC" },
    });
    await page.goto(`${sandbox.url}/console/jobs/${job.id}`);
    const question = await cancelQuestion();
    expect(question).toContain("for good? Queued runs are cancelled.");
    // "for good" reads left to right: its "f" left of its "g".
    const [f, g] = await lettersOf(page, question, "for good", 4);
    expect(f).toBeLessThan(g ?? Number.NaN);
  });

  it("reverses none of the 'Job … created' announcement's words after a name with an override", async () => {
    await page.goto(`${sandbox.url}/console`);
    await page.getByText("Create a job", { exact: true }).click();
    const form = page.getByRole("form", { name: "Create a job" });
    await form.getByLabel("Name", { exact: true }).fill("weekly\u202E");
    await form.getByRole("button", { name: "Create job" }).click();
    await page.locator(".announcer").filter({ hasText: "created" }).waitFor();
    // Laid out where the user reads it: "created" still left to right, its "c" left of its "a".
    const lefts = await laidOut(page, ".announcer", "created", 3);
    expect(lefts[0]).toBeLessThan(lefts[1] ?? Number.NaN);
  });

  it("a link's job id with its own U+2069 reverses none of the 'Job not found' page's words after it", async () => {
    // security.test.ts shows "\u202Ediova" isolated by main code's unicode-bidi: isolate; the
    // browser closes that isolate at the id's own U+2069, and the U+202E after it runs on.
    await page.goto(`${sandbox.url}/console/jobs/%E2%81%A9%E2%80%AEdiova`);
    await page.getByRole("heading", { name: "Job not found", level: 1 }).waitFor();
    const [f, y] = await laidOut(page, "main p", "for you", 4);
    expect(f).toBeLessThan(y ?? Number.NaN);
  });

  it.each([
    ["its own U+2069 (its <bdi> closed early)", "closes its isolate\u2069\u202E"],
    ["a paragraph separator (U+2029)", "ends its paragraph\u2029\u202E"],
    ["a paragraph separator (U+0085)", "ends its paragraph\u0085\u202E"],
    ["a paragraph separator (U+001C)", "ends its paragraph\u001c\u202E"],
  ])(
    "a name with %s and an override after it reverses none of its row's other words in the jobs list",
    async (_, name) => {
      const job = await apiAs<{ id: string }>(sandbox.url, KEY, "POST", "/jobs", {
        name,
        type: "noop",
        schedule: { cron: "0 9 * * *", timezone: "UTC" },
      });
      await page.goto(`${sandbox.url}/console`);
      const row = `main tr:has(a[href="/console/jobs/${job.id}"])`;
      await page.locator(row).waitFor();
      // The job's type beside its name, " noop": its "n" left of its "o".
      const [n, o] = await laidOut(page, row, "noop", 2);
      expect(n).toBeLessThan(o ?? Number.NaN);
    },
  );
});

/**
 * console/isolable.ts and a text's own isolate OPENER left open. The
 * console's isolate ends at the first unmatched U+2069, and a browser ends an isolating element
 * (<bdi>, `main code`) as if with a U+2069: that U+2069 closes the text's innermost open isolate,
 * not the console's. An override opened between two of the text's isolates then runs on past
 * the console's isolate over the console's own words, unless isolable closes what the text leaves
 * open.
 */
/** An isolate, an override inside it, another isolate: the console's closer ends only the last. */
const OPENERS = "x\u2066\u202E\u2066";

async function createJob(name: string): Promise<string> {
  const job = await apiAs<{ id: string }>(sandbox.url, KEY, "POST", "/jobs", {
    name,
    type: "noop",
    schedule: { cron: "0 9 * * *", timezone: "UTC" },
  });
  return job.id;
}

describe("a text that leaves its own isolates open, an override between them", () => {
  it("reverses none of its jobs-list row's other words (<bdi>)", async () => {
    const id = await createJob(`list ${OPENERS}`);
    await page.goto(`${sandbox.url}/console`);
    const row = `main tr:has(a[href="/console/jobs/${id}"])`;
    await page.locator(row).waitFor();
    const [n, o] = await laidOut(page, row, "noop", 2);
    expect(n).toBeLessThan(o ?? Number.NaN);
  });

  it("reverses none of the job page heading's status after the name (<bdi>)", async () => {
    const id = await createJob(`heading ${OPENERS}`);
    await page.goto(`${sandbox.url}/console/jobs/${id}`);
    await page.getByRole("button", { name: "Cancel job" }).waitFor();
    const [a, t] = await laidOut(page, "main h1", "active", 2);
    expect(a).toBeLessThan(t ?? Number.NaN);
  });

  it("reverses none of the Cancel confirmation's words (U+2068 … U+2069)", async () => {
    const id = await createJob(`confirm ${OPENERS}`);
    await page.goto(`${sandbox.url}/console/jobs/${id}`);
    const question = await cancelQuestion();
    const [f, g] = await lettersOf(page, question, "for good", 4);
    expect(f).toBeLessThan(g ?? Number.NaN);
  });

  it("a link's job id reverses none of the 'Job not found' page's words (main code)", async () => {
    await page.goto(`${sandbox.url}/console/jobs/${encodeURIComponent(`diova${OPENERS}`)}`);
    await page.getByRole("heading", { name: "Job not found", level: 1 }).waitFor();
    const [f, y] = await laidOut(page, "main p", "for you", 4);
    expect(f).toBeLessThan(y ?? Number.NaN);
  });

  it("reverses none of the 'Job … created' announcement's words", async () => {
    await page.goto(`${sandbox.url}/console`);
    await page.getByText("Create a job", { exact: true }).click();
    const form = page.getByRole("form", { name: "Create a job" });
    await form.getByLabel("Name", { exact: true }).fill(`announced ${OPENERS}`);
    await form.getByRole("button", { name: "Create job" }).click();
    await page.locator(".announcer").filter({ hasText: "created" }).waitFor();
    const lefts = await laidOut(page, ".announcer", "created", 3);
    expect(lefts[0]).toBeLessThan(lefts[1] ?? Number.NaN);
  });

  it("past the isolate depth limit (125): 130 isolates opened and closed, then an override, in a link's id", async () => {
    const id = `diova${"\u2066".repeat(130)}${"\u2069".repeat(130)}\u202E`;
    await page.goto(`${sandbox.url}/console/jobs/${encodeURIComponent(id)}`);
    await page.getByRole("heading", { name: "Job not found", level: 1 }).waitFor();
    const [f, y] = await laidOut(page, "main p", "for you", 4);
    expect(f).toBeLessThan(y ?? Number.NaN);
  });
});

describe("a third party's text in a run's Detail cell, with the console's words after it", () => {
  it("reverses none of the cut note boundedText adds to an async target's long error", async () => {
    // An async target's completion error (≤ 4096 characters, shared/api/schemas/async-runs.ts)
    // is stored as boundedText (shared/execution/async-runs.ts): 4096 bytes and the console's
    // " … [cut: N bytes in all]". Here two-byte letters, an override among them.
    const error = boundedText(`\u202E${"\u0436".repeat(4000)}`);
    expect(error).toMatch(/ … \[cut: 8003 bytes in all\]$/);
    const id = await createJob("long error");
    const run = await apiAs<{ runId: string }>(sandbox.url, KEY, "POST", `/jobs/${id}/trigger`);
    // No target here answers the run's completion: the page reads the run as such a one answers
    // (as run-reasons.test.ts does for an error it cannot make).
    await page.route(
      (url) => url.pathname === `/jobs/${id}/runs`,
      async (route) => {
        const answer = await route.fetch();
        const body = (await answer.json()) as { items: { runId: string }[] };
        const items = body.items.map((item) =>
          item.runId === run.runId ? { ...item, status: "failed", error } : item,
        );
        await route.fulfill({ response: answer, json: { ...body, items } });
      },
    );
    await page.goto(`${sandbox.url}/console/jobs/${id}`);
    const [b, t] = await laidOut(page, `tr[data-run-id="${run.runId}"] td.free-text`, "bytes", 2);
    expect(b).toBeLessThan(t ?? Number.NaN);
  });
});

describe("a name of invisible characters only", () => {
  it.each([
    ["U+200B", "\u200b"],
    ["U+2066 U+202E", "\u2066\u202E"],
  ])("leaves its jobs-list link some text to see (%s)", async (_, name) => {
    // jobTitle shows the id for a name that shows nothing, so the link has text; trim() kept these.
    const id = await createJob(name);
    await page.goto(`${sandbox.url}/console`);
    const link = page.locator(`main a[href="/console/jobs/${id}"]`);
    await link.waitFor({ state: "attached" });
    const width = (await link.boundingBox())?.width ?? 0;
    expect(width).toBeGreaterThan(0);
  });
});
