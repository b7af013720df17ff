import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from "vitest";
import { EXIT } from "../../client/cli/exit-codes.js";
import { type Run, type RunStatus, SchedulerClient, WaitTimeoutError } from "../../client/index.js";
import { runCaptured } from "../support/cli-run.js";
import { rejection } from "../support/rejection.js";

/**
 * The clocks of the client's waits. A wait's timeout (and `runs watch --timeout`) is real time
 * elapsed, whatever the machine's wall clock does meanwhile (an NTP step, a VM resumed, a laptop
 * waking); what a wait compares with the API's time (a run's occurrence) is on the client's clock
 * (`retry.now`). A local server lists the job's runs (`history`, newest occurrence first, by
 * `from`, `limit` and `cursor`) and answers a run by its id; `onRequest` runs as each request
 * arrives, before it is answered.
 */
const JOB = "01JOBCLOCKS";
const HOUR = 3_600_000;
/** The machine's wall clock, as Date.now is before a case makes it step. */
const machine = Date.now.bind(Date);

let server: Server;
let baseUrl: string;
let history: Run[] = [];
/** Each request's path and query, in order. */
let requests: string[] = [];
let onRequest: (url: URL) => void = () => {};

beforeAll(async () => {
  server = createServer((request, response) => {
    const url = new URL(request.url ?? "/", baseUrl);
    request.resume();
    requests.push(`${url.pathname}${url.search}`);
    onRequest(url);
    const one = /^\/jobs\/[^/]+\/runs\/([^/]+)$/.exec(url.pathname);
    let body: unknown;
    if (one) body = history.find((run) => run.runId === one[1]);
    else {
      const from = Date.parse(url.searchParams.get("from") ?? "1970-01-01T00:00:00Z");
      const start = Number(url.searchParams.get("cursor") ?? 0);
      const end = start + Number(url.searchParams.get("limit") ?? 100);
      const listed = history.filter((run) => Date.parse(run.scheduledFor) >= from);
      body = {
        items: listed.slice(start, end),
        nextCursor: end < listed.length ? String(end) : null,
      };
    }
    response.writeHead(200, { "Content-Type": "application/json" }).end(JSON.stringify(body));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

beforeEach(() => {
  history = [];
  requests = [];
  onRequest = () => {};
});

afterEach(() => {
  vi.restoreAllMocks();
});

const runAt = (runId: string, scheduledFor: number, status: RunStatus): Run =>
  ({
    runId,
    jobId: JOB,
    status,
    scheduledFor: new Date(scheduledFor).toISOString(),
    finishedAt: status === "queued" ? null : new Date(machine()).toISOString(),
  }) as Run;

/** Date.now, from the `at`-th request on, `stepMs` off the machine's clock. */
function wallClockSteps(stepMs: number, at: number): void {
  vi.spyOn(Date, "now").mockImplementation(() =>
    requests.length >= at ? machine() + stepMs : machine(),
  );
}

/** The run `runId` ends (succeeded) once the server has received `after` requests. */
function endsAfter(runId: string, after: number): void {
  onRequest = () => {
    if (requests.length <= after) return;
    history = history.map((run) =>
      run.runId === runId ? runAt(runId, machine(), "succeeded") : run,
    );
  };
}

const clientOn = (now?: () => number) =>
  new SchedulerClient({
    baseUrl,
    auth: { kind: "bearer", key: "k" },
    ...(now === undefined ? {} : { retry: { now } }),
  });

describe("a wait's timeout, while the wall clock steps", () => {
  it("forward an hour: waitForRun goes on until the run ends", async () => {
    history = [runAt("r1", machine(), "queued")];
    endsAfter("r1", 3);
    wallClockSteps(HOUR, 1);
    const run = await clientOn().waitForRun(JOB, "r1", { pollMs: 10, timeoutMs: 60_000 });
    expect(run.status).toBe("succeeded");
  });

  it("back an hour: waitForRun still gives up after its timeout", async () => {
    history = [runAt("r1", machine(), "queued")];
    wallClockSteps(-HOUR, 1);
    const waited = clientOn().waitForRun(JOB, "r1", { pollMs: 10, timeoutMs: 300 });
    expect((await rejection(waited, WaitTimeoutError)).lastSeen?.status).toBe("queued");
  }, 10_000);

  it("forward an hour: runs watch --timeout goes on until --count runs ended", async () => {
    const id = "r-watched";
    history = [runAt(id, machine(), "queued")];
    endsAfter(id, 3);
    // The first poll reads before the watch takes its deadline; the second reads stepped.
    wallClockSteps(HOUR, 2);
    const { code, out, err } = await runCaptured([
      ...["--api", baseUrl, "--key", "k", "-o", "json", "runs", "watch", JOB],
      ...["--interval", "10", "--count", "1", "--timeout", "60"],
    ]);
    expect(err).toBe("");
    expect(code).toBe(EXIT.ok);
    expect(JSON.parse(out).runId).toBe(id);
  });
});

describe("JobHandle.waitForRun looks back on the client's clock (retry.now)", () => {
  /** Requests of each read of the runs: the first request of a read and the pages it followed. */
  const requestsPerRead = () => {
    const reads: number[] = [];
    for (const request of requests.filter((path) => /\/runs\?/.test(path))) {
      if (request.includes("cursor=")) reads[reads.length - 1] = (reads.at(-1) ?? 0) + 1;
      else reads.push(1);
    }
    return reads;
  };
  /** Runs `onLaterPoll` once, as the first read after the wait's first one arrives. */
  const atLaterPoll = (onLaterPoll: () => void) => {
    let done = false;
    onRequest = (url) => {
      if (done || !url.searchParams.has("from") || url.searchParams.has("cursor")) return;
      done = true;
      onLaterPoll();
    };
  };

  it("an hour behind the machine: the first poll reads every run of the look-back", async () => {
    const clock = () => machine() - HOUR;
    // 150 runs queued in the last 75 s of the API's time (a burst of triggers): two pages.
    const startedAt = clock();
    history = Array.from({ length: 150 }, (_, i) => runAt(`r${i}`, startedAt - i * 500, "queued"));
    // The oldest of them, on the second page, ends first.
    atLaterPoll(() => {
      history = history.map((run) =>
        run.runId === "r149" ? { ...run, status: "succeeded" } : run,
      );
    });
    const run = await clientOn(clock).jobs.handle(JOB).waitForRun({ pollMs: 10, timeoutMs: 3000 });
    expect(run.runId).toBe("r149");
  });

  it("an hour behind the machine: a later poll reads a run written at an occurrence before the newest", async () => {
    const clock = () => machine() - HOUR;
    const startedAt = clock();
    history = [runAt("r-before", startedAt - 10_000, "succeeded")];
    // Written between two polls, 30 s before the newest occurrence seen (a dependent's run, or a
    // trigger's stamped by an API instance whose clock runs behind).
    atLaterPoll(() => {
      history = [...history, runAt("r-late", startedAt - 40_000, "succeeded")];
    });
    const run = await clientOn(clock).jobs.handle(JOB).waitForRun({ pollMs: 10, timeoutMs: 3000 });
    expect(run.runId).toBe("r-late");
  });

  it("an hour ahead of the machine: each poll reads one page, not the hour before", async () => {
    const clock = () => machine() + HOUR;
    const startedAt = clock();
    // 400 runs 10 s apart, ended: the last 66 minutes of the API's time.
    history = Array.from({ length: 400 }, (_, i) =>
      runAt(`r${i}`, startedAt - 1000 - i * 10_000, "succeeded"),
    );
    let polls = 0;
    onRequest = (url) => {
      if (!url.searchParams.has("from") || url.searchParams.has("cursor")) return;
      polls += 1;
      if (polls === 2) history = [runAt("r-next", clock(), "succeeded"), ...history];
    };
    const run = await clientOn(clock).jobs.handle(JOB).waitForRun({ pollMs: 10, timeoutMs: 3000 });
    expect(run.runId).toBe("r-next");
    expect(requestsPerRead().filter((requests) => requests > 1)).toEqual([]);
  });
});
