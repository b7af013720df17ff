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
 * waking). A local server lists the job's runs (`history`, newest occurrence first, by `from`,
 * `limit` and `cursor`) and answers a run by its id; `onRequest` runs as each request arrives,
 * before it is answered.
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
    const { code, out, err } = await runCaptured(
      ["--api", baseUrl, "--key", "k", "-o", "json", "runs", "watch", JOB].concat([
        "--interval",
        "10",
        "--count",
        "1",
        "--timeout",
        "60",
      ]),
    );
    expect(err).toBe("");
    expect(code).toBe(EXIT.ok);
    expect(JSON.parse(out).runId).toBe(id);
  });
});
