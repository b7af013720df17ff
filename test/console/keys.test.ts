import type { Route } from "playwright-core";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { apiAs, signedInConsole } from "../support/console-session.js";

/**
 * The console in headless Chromium against `npm start`, its API calls' answers held or replaced
 * on the way. The job page's "Trigger now", its answer held while the page is left for the jobs
 * list: the key of a trigger whose outcome was unclear outlives the page, and an answer that comes
 * after the page was left is announced. A 403 answered as API Gateway answers a token without one
 * of the deployment's `jwtScopes` (a bare `{"message":"Forbidden"}`, which the sandbox never sends:
 * it explains itself in the API's shape), and API Gateway's other bare answers (its throttle's 429,
 * its payload limit's 413, the function's failure, 502, or timeout, 504): the page says what each
 * means and what to do.
 */
const KEY = "console-keys-key";

let session: Awaited<ReturnType<typeof signedInConsole>> | undefined;
/** The console's page, signed in; the sandbox and browser behind it. */
const opened = () => {
  if (session === undefined) throw new Error("the console did not start");
  return session;
};
const page = () => opened().page;

const api = <T>(method: string, path: string, body?: unknown) =>
  apiAs<T>(opened().sandbox.url, KEY, method, path, body);

/** A one-off job due far ahead, named `name`, and its page open, reached from the jobs list. */
async function jobNamed(name: string): Promise<{ id: string }> {
  const schedule = { runAt: "2030-01-01T00:00:00Z" };
  const job = await api<{ id: string }>("POST", "/jobs", { name, type: "noop", schedule });
  await page().reload();
  await openJob(name);
  return job;
}

const runsOf = async (job: { id: string }) =>
  (await api<{ items: unknown[] }>("GET", `/jobs/${job.id}/runs`)).items;

beforeAll(async () => {
  session = await signedInConsole(KEY, "console-keys-tenant");
}, 180_000);

afterAll(async () => {
  await session?.browser.close();
  await session?.sandbox.stop();
});

/** A function to call and the promise it resolves. */
function signal(): [() => void, Promise<void>] {
  let call = () => {};
  const called = new Promise<void>((resolve) => {
    call = resolve;
  });
  return [call, called];
}

/**
 * The page's triggers of `job`, each applied by the API and answered as `answer` says (the first
 * one held until `release`): the Idempotency-Key each carried.
 */
async function triggersOf(
  job: { id: string },
  answer: (route: Route, sent: number) => Promise<void>,
) {
  const keys: (string | null)[] = [];
  const [sent, firstSent] = signal();
  const [release, released] = signal();
  await page().route(
    (url) => url.pathname === `/jobs/${job.id}/trigger`,
    async (route) => {
      keys.push(await route.request().headerValue("idempotency-key"));
      sent();
      if (keys.length === 1) await released;
      await answer(route, keys.length);
    },
  );
  return { keys, firstSent, release };
}

/** The job's page, from the jobs list, as a user reaches it. */
async function openJob(name: string) {
  await page().getByRole("link", { name: "Jobs", exact: true }).click();
  await page().getByRole("link", { name }).click();
  await page().getByRole("heading", { name, level: 1 }).waitFor();
}

const leaveForJobsList = async () => {
  await page().getByRole("link", { name: "Jobs", exact: true }).click();
  await page().getByRole("heading", { name: "Jobs", level: 1 }).waitFor();
};

/** The status region (what screen readers read out) saying `text`. */
const announced = (text: string) => page().getByRole("status").filter({ hasText: text });
const UNCLEAR = "A trigger of this job got no clear answer";

describe("a trigger whose answer comes after its job's page was left", () => {
  it("unclear (a 502 of a trigger applied): announced; the page revisited offers the repeat, which sends the same key and queues no second run", async () => {
    const name = "keys: unclear trigger";
    const job = await jobNamed(name);
    const triggers = await triggersOf(job, async (route, sent) => {
      const applied = await route.fetch();
      if (sent > 1) return route.fulfill({ response: applied });
      return route.fulfill({ status: 502, json: { message: "Internal Server Error" } });
    });
    await page().getByRole("button", { name: "Trigger now" }).click();
    await triggers.firstSent;
    await leaveForJobsList();
    triggers.release();
    await announced(name).waitFor();

    await openJob(name);
    await page().getByText(UNCLEAR).waitFor();
    await page().getByRole("button", { name: "Trigger now" }).click();
    await page().getByText("Run queued").first().waitFor();
    expect(await page().getByText(UNCLEAR).count()).toBe(0);
    expect(triggers.keys).toHaveLength(2);
    expect(triggers.keys[1]).toBe(triggers.keys[0]);
    expect(await runsOf(job)).toHaveLength(1);
    // Answered: the page revisited offers nothing.
    await openJob(name);
    await page().getByRole("button", { name: "Trigger now" }).waitFor();
    expect(await page().getByText(UNCLEAR).count()).toBe(0);
    await page().unrouteAll();
  });

  it("answered: announced with the job's name; the page revisited offers no repeat", async () => {
    const name = "keys: late answer";
    const job = await jobNamed(name);
    const triggers = await triggersOf(job, (route) => route.continue());
    await page().getByRole("button", { name: "Trigger now" }).click();
    await triggers.firstSent;
    await leaveForJobsList();
    triggers.release();
    await announced(`Run queued: \u2068${name}\u2069`).waitFor();
    await openJob(name);
    await page().getByRole("button", { name: "Trigger now" }).waitFor();
    expect(await page().getByText(UNCLEAR).count()).toBe(0);
    await page().unrouteAll();
    // The browser logs the first case's 502 as an error: not a fault of the page.
    expect(opened().browser.errors.filter((error) => !error.includes("status of 502"))).toEqual([]);
  });
});

/** The jobs list's reads of the API (not the console's own page under /console). */
const jobsListing = (url: URL) => url.pathname === "/jobs";

describe("statuses answered in front of the API", () => {
  // Each case reloads the jobs list, whose read of /jobs the route answers.
  beforeEach(leaveForJobsList);

  it("API Gateway's {message: Forbidden} is explained: the token lacks a jwtScopes scope, sign in again or ask", async () => {
    await page().route(jobsListing, (route) =>
      route.fulfill({ status: 403, json: { message: "Forbidden" } }),
    );
    try {
      await page().reload();
      const alert = page().getByRole("alert").filter({ hasText: "403" });
      await alert.waitFor();
      const text = await alert.textContent();
      expect(text).toContain(
        "Forbidden (403), answered before the scheduler saw the request: this deployment requires every call's token to carry one of its scopes (its jwtScopes setting), and yours carries none.",
      );
      expect(text).toContain("Sign out and in again");
      expect(text).not.toContain(`${opened().sandbox.url}/jobs`);
    } finally {
      await page().unroute(jobsListing);
    }
  });

  /** API Gateway's own answers, in place of the API's, and what the page says of each. */
  const GATEWAY_ANSWERS: {
    readonly what: string;
    readonly status: number;
    readonly message: string;
    readonly headers: Record<string, string>;
    readonly says: string;
  }[] = [
    {
      what: "the throttle's 429",
      status: 429,
      message: "Too Many Requests",
      headers: {},
      says: "Too many requests (429): this deployment's rate limit, which every tenant's requests share (apiRateLimit), is spent for now, and API Gateway refused the request before the scheduler saw it. Wait and try again.",
    },
    {
      what: "a 429 with Retry-After",
      status: 429,
      message: "Too Many Requests",
      headers: { "Retry-After": "7" },
      says: "Wait and try again in 7 s.",
    },
    {
      what: "the payload limit's 413",
      status: 413,
      message: "Request Entity Too Large",
      headers: {},
      says: "Request too large (413): API Gateway refused it before the scheduler saw it. Send less (a smaller payload).",
    },
    {
      what: "the function's failure, 502",
      status: 502,
      message: "Internal Server Error",
      headers: {},
      says: "Bad gateway (502): the API's function failed before it answered. Try again; if it goes on, tell whoever runs the deployment.",
    },
    {
      what: "the function's timeout, 504",
      status: 504,
      message: "Service Unavailable",
      headers: {},
      says: "Gateway timeout (504): the API's function did not answer in time. Try again; if it goes on, tell whoever runs the deployment.",
    },
  ];

  it.each(GATEWAY_ANSWERS)(
    "API Gateway's $what says what it means and what to do",
    async ({ status, message, headers, says }) => {
      await page().route(jobsListing, (route) =>
        route.fulfill({ status, headers, json: { message } }),
      );
      try {
        await page().reload();
        const alert = page()
          .getByRole("alert")
          .filter({ hasText: String(status) });
        await alert.waitFor();
        const text = await alert.textContent();
        expect(text).toContain(says);
        expect(text).not.toContain(`${opened().sandbox.url}/jobs`);
      } finally {
        await page().unroute(jobsListing);
      }
    },
  );

  it.each([
    {
      status: 403,
      code: "forbidden",
      message: "the token carries none of the scopes scheduler/api",
      explanation: "jwtScopes setting",
    },
    {
      status: 429,
      code: "rate_limited",
      message: "too many requests for this tenant: try again in 1 s",
      explanation: "apiRateLimit",
    },
  ])(
    "the API's own $status, in its shape, keeps its own message",
    async ({ status, code, message, explanation }) => {
      await page().route(jobsListing, (route) =>
        route.fulfill({
          status,
          headers: { "Retry-After": "1" },
          json: { error: { code, message } },
        }),
      );
      try {
        await page().reload();
        const alert = page().getByRole("alert").filter({ hasText: message });
        await alert.waitFor();
        expect(await alert.textContent()).not.toContain(explanation);
      } finally {
        await page().unroute(jobsListing);
      }
      // The browser logs each status answered in place of the API's, and the trigger case's 502,
      // as errors: not faults of the page.
      const pageErrors = opened().browser.errors.filter(
        (error) => !/status of (403|413|429|502|504)\b/.test(error),
      );
      expect(pageErrors).toEqual([]);
    },
  );
});
