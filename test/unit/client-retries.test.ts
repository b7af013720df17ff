import { mkdtempSync, writeFileSync } from "node:fs";
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from "vitest";
import { EXIT } from "../../client/cli/exit-codes.js";
import {
  RequestTimeoutError,
  type RetryOptions,
  SchedulerApiError,
  SchedulerClient,
} from "../../client/index.js";
import { runCaptured } from "../support/cli-run.js";
import { rejection } from "../support/rejection.js";

/**
 * The client's retries of 429 and 503, against a local HTTP server that answers each request
 * from a script: which requests are sent again, after how long, and what the caller gets when the
 * retries run out (the CLI's exit code too).
 */
interface Answer {
  readonly status: number;
  readonly headers?: Record<string, string>;
  readonly body: unknown;
  /** Not answered: the connection is destroyed once the request came (it is done all the same). */
  readonly reset?: true;
  /** Not answered: done, and held until the client gives up on it (its timeout). */
  readonly held?: true;
}

interface Received {
  readonly method: string;
  readonly path: string;
  readonly body: string;
  readonly idempotencyKey: string | undefined;
}

const ok = (body: unknown): Answer => ({ status: 200, body });
const refused = (status: 429 | 503, retryAfter?: string): Answer => ({
  status,
  ...(retryAfter === undefined ? {} : { headers: { "Retry-After": retryAfter } }),
  body: {
    error: {
      code: status === 429 ? "rate_limited" : "busy",
      message: status === 429 ? "over the requests per second" : "busy",
    },
  },
});

let server: Server;
let baseUrl: string;
/** The answers still to give, in order; once empty, every request is answered with `always`. */
let script: Answer[] = [];
let always: Answer = ok({ status: "ok" });
let received: Received[] = [];

const bodyOf = (request: IncomingMessage) =>
  new Promise<string>((resolve) => {
    let text = "";
    request.setEncoding("utf8");
    request.on("data", (chunk: string) => {
      text += chunk;
    });
    request.on("end", () => resolve(text));
  });

beforeAll(async () => {
  server = createServer((request, response) => {
    void bodyOf(request).then((body) => {
      received.push({
        method: request.method ?? "",
        path: request.url ?? "",
        body,
        idempotencyKey: request.headers["idempotency-key"]?.toString(),
      });
      const answer = script.shift() ?? always;
      // A client that gave up waiting has closed the connection: nothing to answer.
      if (answer.held || request.socket.destroyed) return;
      if (answer.reset) {
        request.socket.destroy();
        return;
      }
      response
        .writeHead(answer.status, { "Content-Type": "application/json", ...answer.headers })
        .end(JSON.stringify(answer.body));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

beforeEach(() => {
  script = [];
  always = ok({ status: "ok" });
  received = [];
});

afterEach(() => {
  vi.useRealTimers();
});

/**
 * Fakes setTimeout, which the client's timeout is: it passes only when a case passes it
 * (timeOutHeld). A real timeout of 50 or 100 ms raced the server beside it: on a loaded machine
 * it fired before the request reached the server (which had it during the next case), or before
 * an answer was read (and the client sent the request again).
 */
function fakeTimeouts(): void {
  vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
}

/** Passes `ms` of fake time once the server has the request it holds (the first). */
async function timeOutHeld(ms: number): Promise<void> {
  while (received.length === 0) await new Promise((resolve) => setImmediate(resolve));
  await vi.advanceTimersByTimeAsync(ms);
}

/** A client whose waits are recorded, not slept. */
function clientWith(retry: RetryOptions = {}, options: { timeoutMs?: number } = {}) {
  const waits: number[] = [];
  const client = new SchedulerClient({
    baseUrl,
    auth: { kind: "bearer", key: "k" },
    ...options,
    retry: {
      sleep: async (ms) => {
        waits.push(ms);
      },
      ...retry,
    },
  });
  return { client, waits };
}

const job = { id: "01JOB", version: 1, status: "active" };
const newJob = { type: "noop", schedule: { runAt: "2030-01-01T00:00:00Z" } } as const;

describe("the client retries a 429 or 503 of a request safe to repeat", () => {
  it("a GET answered 429 then 200 waits the Retry-After and answers the 200", async () => {
    script = [refused(429, "2")];
    const { client, waits } = clientWith();
    expect(await client.health()).toEqual({ status: "ok" });
    expect(waits).toEqual([2000]);
    expect(received.map((r) => `${r.method} ${r.path}`)).toEqual(["GET /health", "GET /health"]);
  });

  it("a listing's signal aborting in the wait before a retry throws its AbortError at once; nothing more is sent", async () => {
    always = refused(503, "5");
    const interrupt = new AbortController();
    const client = new SchedulerClient({
      baseUrl,
      auth: { kind: "bearer", key: "k" },
      // A wait of the caller's own that never ends: only the abort ends it.
      retry: { sleep: () => new Promise<void>(() => undefined) },
    });
    const listing = client.runs.list("01JOB", { signal: interrupt.signal }).next();
    await vi.waitFor(() => expect(received).toHaveLength(1));
    interrupt.abort();
    expect((await rejection(listing, DOMException)).name).toBe("AbortError");
    // The default wait, a timer, ends with the abort too.
    const waiting = new AbortController();
    const defaultWait = new SchedulerClient({ baseUrl, auth: { kind: "bearer", key: "k" } });
    const started = Date.now();
    const jobs = defaultWait.jobs.list({ signal: waiting.signal }).next();
    await vi.waitFor(() => expect(received).toHaveLength(2));
    waiting.abort();
    expect((await rejection(jobs, DOMException)).name).toBe("AbortError");
    expect(Date.now() - started).toBeLessThan(4000);
    expect(received.map((r) => r.path)).toEqual(["/jobs/01JOB/runs", "/jobs"]);
  });

  it("a 503 without Retry-After waits 0.5 s, then twice as long each retry", async () => {
    script = [refused(503), refused(503), refused(503)];
    const { client, waits } = clientWith();
    expect(await client.health()).toEqual({ status: "ok" });
    expect(waits).toEqual([500, 1000, 2000]);
    expect(received).toHaveLength(4);
  });

  it("a Retry-After given as an HTTP date waits until then, by the injected clock", async () => {
    const now = Date.parse("2030-01-01T00:00:00Z");
    script = [refused(429, new Date(now + 3000).toUTCString())];
    const { client, waits } = clientWith({ now: () => now });
    await client.health();
    expect(waits).toEqual([3000]);
  });

  it("a Retry-After that is no delay-seconds (-3, 1.5, 1e3, 0x10) is no Retry-After: the base wait, no retryAfterSeconds", async () => {
    // Date.parse reads "-3" and "1.5" as dates in 2001: a wait of 0 ms.
    script = [refused(503, "-3"), refused(503, "1.5"), refused(429, "1e3")];
    always = refused(429, "0x10");
    const { client, waits } = clientWith();
    const error = await rejection(client.health(), SchedulerApiError);
    expect(waits).toEqual([500, 1000, 2000]);
    expect(error.retryAfterSeconds).toBeUndefined();
    for (const value of ["-3", "1.5"]) {
      script = [refused(429, value)];
      const once = clientWith({ attempts: 0 }).client;
      expect((await rejection(once.health(), SchedulerApiError)).retryAfterSeconds).toBeUndefined();
    }
  });

  it("an error's retryAfterSeconds of an HTTP date is counted by the client's clock", async () => {
    const at = Date.parse("2030-01-01T00:01:00Z");
    let now = at - 60_000;
    script = [refused(503, new Date(at).toUTCString())];
    const { client, waits } = clientWith({ now: () => now, maxDelayMs: 5_000 });
    expect((await rejection(client.health(), SchedulerApiError)).retryAfterSeconds).toBe(60);
    expect(waits).toEqual([]);
    // The DELETE of a job builds its error apart from the other requests.
    now = at - 30_500;
    script = [refused(503, new Date(at).toUTCString())];
    const refusal = await rejection(client.jobs.handle("01JOB").delete(), SchedulerApiError);
    expect(refusal.retryAfterSeconds).toBe(31);
    // So do the API classes' requests and a job handle's others.
    for (const request of [() => client.jobs.page(), () => client.jobs.handle("01JOB").get()]) {
      script = [refused(503, new Date(at).toUTCString())];
      expect((await rejection(request(), SchedulerApiError)).retryAfterSeconds).toBe(31);
    }
  });

  it("gives up after `attempts` retries: the caller gets the last answer's error with its Retry-After", async () => {
    always = refused(429, "1");
    const { client, waits } = clientWith({ attempts: 2 });
    const error = await rejection(client.health(), SchedulerApiError);
    expect([error.status, error.code, error.retryAfterSeconds]).toEqual([429, "rate_limited", 1]);
    expect(waits).toEqual([1000, 1000]);
    expect(received).toHaveLength(3);
  });

  it("three retries by default", async () => {
    always = refused(503, "0");
    const { client } = clientWith();
    expect((await rejection(client.health(), SchedulerApiError)).code).toBe("busy");
    expect(received).toHaveLength(4);
  });

  it("`attempts: 0` sends each request once", async () => {
    script = [refused(429, "1")];
    const { client, waits } = clientWith({ attempts: 0 });
    expect((await rejection(client.health(), SchedulerApiError)).code).toBe("rate_limited");
    expect(waits).toEqual([]);
    expect(received).toHaveLength(1);
  });

  it("a Retry-After longer than maxDelayMs is not waited for: the error says how long to wait", async () => {
    script = [refused(429, "30")];
    const { client, waits } = clientWith({ maxDelayMs: 5_000 });
    const error = await rejection(client.health(), SchedulerApiError);
    expect([error.code, error.retryAfterSeconds]).toEqual(["rate_limited", 30]);
    expect(waits).toEqual([]);
    expect(received).toHaveLength(1);
  });

  it("a Retry-After given as an HTTP date too far off is not waited for: the error says how long, in seconds", async () => {
    script = [refused(503, new Date(Date.now() + 60_000).toUTCString())];
    const { client, waits } = clientWith({ maxDelayMs: 5_000 });
    const error = await rejection(client.health(), SchedulerApiError);
    expect(error.code).toBe("busy");
    expect(error.retryAfterSeconds).toBeGreaterThanOrEqual(55);
    expect(error.retryAfterSeconds).toBeLessThanOrEqual(60);
    expect(waits).toEqual([]);
  });

  it("a create carries a key of the client's own, the same on its retry, with the same body; each call its own", async () => {
    script = [refused(503, "1"), { status: 201, body: job }];
    const { client, waits } = clientWith();
    expect((await client.jobs.create(newJob)).created).toBe(true);
    expect(waits).toEqual([1000]);
    const [first, second] = received.map((r) => r.idempotencyKey);
    expect(first).toMatch(/^create-[\x21-\x7E]{1,190}$/);
    expect(second).toBe(first);
    expect(received.map((r) => JSON.parse(r.body))).toEqual([newJob, newJob]);

    received = [];
    script = [{ status: 201, body: job }];
    await client.jobs.create(newJob);
    expect(received[0]?.idempotencyKey).not.toBe(first);
  });

  it("a create sends the caller's key, given as an option or in the body, and is sent again with it", async () => {
    script = [refused(503, "1"), { status: 201, body: job }];
    const { client } = clientWith();
    const handle = await client.jobs.create(newJob, { idempotencyKey: "key-1" });
    expect(handle.id).toBe(job.id);
    expect(received.map((r) => [r.method, r.idempotencyKey])).toEqual([
      ["POST", "key-1"],
      ["POST", "key-1"],
    ]);

    received = [];
    script = [refused(503, "0"), ok(job)];
    const inBody = { ...newJob, idempotencyKey: "key-in-body" };
    // A 200 under the caller's key may answer an earlier call's create: not said to be this one's.
    expect((await client.jobs.create(inBody)).created).toBe(false);
    expect(received.map((r) => r.idempotencyKey)).toEqual(["key-in-body", "key-in-body"]);
    expect(received.map((r) => JSON.parse(r.body))).toEqual([inBody, inBody]);
  });

  it("a DELETE is retried; other answers (500, 400) are not", async () => {
    script = [refused(429, "0"), { status: 204, body: "" }];
    const { client } = clientWith();
    expect(await client.jobs.handle(job.id).delete()).toBe("deleted");
    expect(received.map((r) => r.method)).toEqual(["DELETE", "DELETE"]);

    received = [];
    script = [{ status: 500, body: { error: { code: "internal", message: "boom" } } }];
    expect((await rejection(client.health(), SchedulerApiError)).code).toBe("internal");
    expect(received).toHaveLength(1);
  });
});

describe("the client retries API Gateway's 502 and 504 of a request safe to repeat", () => {
  /** What API Gateway answers when the API's function crashed (502) or ran out of time (504). */
  const gateway = (status: 502 | 504): Answer => ({
    status,
    body: { message: status === 502 ? "Internal server error" : "Endpoint request timed out" },
  });

  it("a GET answered 502 then 504 then 200 answers the 200, after the doubling waits", async () => {
    script = [gateway(502), gateway(504)];
    const { client, waits } = clientWith();
    expect(await client.health()).toEqual({ status: "ok" });
    expect(waits).toEqual([500, 1000]);
    expect(received).toHaveLength(3);
  });

  it("a POST with an Idempotency-Key, its own or the client's, is sent again with the same key", async () => {
    script = [gateway(504), { status: 201, body: job }];
    const { client } = clientWith();
    expect((await client.jobs.create(newJob, { idempotencyKey: "key-2" })).id).toBe(job.id);
    expect(received.map((r) => r.idempotencyKey)).toEqual(["key-2", "key-2"]);

    received = [];
    const run = { runId: `${job.id}-20300101T000000000-1`, jobId: job.id, status: "queued" };
    script = [gateway(502), { status: 200, body: run }];
    expect(await client.jobs.handle(job.id).trigger()).toEqual(run);
    const [first, second] = received.map((r) => r.idempotencyKey);
    expect(first).toMatch(/^trigger-/);
    expect(second).toBe(first);
  });

  it("from the CLI: a pause answered 504 until the retries ran out exits 8 (run it again); a trigger, 1", async () => {
    always = gateway(504);
    const paused = await runCaptured(["--api", baseUrl, "jobs", "pause", job.id]);
    expect(paused.code, paused.err).toBe(EXIT.busy);
    expect(received.map((r) => `${r.method} ${r.path}`)).toEqual(
      Array(4).fill(`POST /jobs/${job.id}/pause`),
    );
    received = [];
    // Retried under one key, and still maybe applied: run again, the command would make another.
    const triggered = await runCaptured(["--api", baseUrl, "jobs", "trigger", job.id]);
    expect(triggered.code, triggered.err).toBe(EXIT.failed);
    expect(received).toHaveLength(4);
    expect(new Set(received.map((r) => r.idempotencyKey)).size).toBe(1);
  });
});

describe("a create or trigger that declines a key (idempotencyKey: false, --no-idempotency-key)", () => {
  const timedOut: Answer = { status: 504, body: { message: "Endpoint request timed out" } };
  const run = { runId: `${job.id}-20300101T000000000-1`, jobId: job.id, status: "queued" };

  it("is sent without an Idempotency-Key, and answered at once", async () => {
    script = [
      { status: 201, body: job },
      { status: 202, body: run },
    ];
    const { client } = clientWith();
    expect((await client.jobs.create(newJob, { idempotencyKey: false })).created).toBe(true);
    expect(await client.jobs.handle(job.id).trigger({ idempotencyKey: false })).toEqual(run);
    expect(received.map((r) => [r.path, r.idempotencyKey])).toEqual([
      ["/jobs", undefined],
      [`/jobs/${job.id}/trigger`, undefined],
    ]);
    expect(received.map((r) => r.body)).toEqual([JSON.stringify(newJob), ""]);
  });

  it("is not retried after a 504: the 504 is thrown, the request sent once", async () => {
    always = timedOut;
    const { client, waits } = clientWith();
    const create = await rejection(
      client.jobs.create(newJob, { idempotencyKey: false }),
      SchedulerApiError,
    );
    expect(create.status).toBe(504);
    const trigger = await rejection(
      client.jobs.handle(job.id).trigger({ idempotencyKey: false }),
      SchedulerApiError,
    );
    expect(trigger.status).toBe(504);
    expect(received.map((r) => [r.path, r.idempotencyKey])).toEqual([
      ["/jobs", undefined],
      [`/jobs/${job.id}/trigger`, undefined],
    ]);
    expect(waits).toEqual([]);
  });

  it("a create timed out is not retried and may have been applied", async () => {
    fakeTimeouts();
    always = { ...ok(job), held: true };
    const { client } = clientWith({}, { timeoutMs: 50 });
    const creating = rejection(
      client.jobs.create(newJob, { idempotencyKey: false }),
      RequestTimeoutError,
    );
    await timeOutHeld(50);
    const error = await creating;
    expect(error.message).toContain("it may have been applied");
    expect(error.repeatable).toBe(false);
    expect(received).toHaveLength(1);
  });

  it("a body carrying an idempotencyKey is refused before anything is sent", async () => {
    const { client } = clientWith();
    const error = await rejection(
      client.jobs.create({ ...newJob, idempotencyKey: "k-1" }, { idempotencyKey: false }),
      TypeError,
    );
    expect(error.message).toContain("declines a key");
    expect(received).toEqual([]);
  });

  it("from the CLI: sent once without a key, a 504 exits 1 (it may have been applied)", async () => {
    always = timedOut;
    const createFlags = ["--type", "noop", "--run-at", newJob.schedule.runAt];
    const created = await runCaptured([
      ...["--api", baseUrl, "jobs", "create", ...createFlags],
      "--no-idempotency-key",
    ]);
    expect(created.code, created.err).toBe(EXIT.failed);
    const triggered = await runCaptured([
      "--api",
      baseUrl,
      "jobs",
      "trigger",
      job.id,
      "--no-idempotency-key",
    ]);
    expect(triggered.code, triggered.err).toBe(EXIT.failed);
    expect(received.map((r) => [`${r.method} ${r.path}`, r.idempotencyKey])).toEqual([
      ["POST /jobs", undefined],
      [`POST /jobs/${job.id}/trigger`, undefined],
    ]);
  });

  it("from the CLI: with a --body carrying an idempotencyKey, a usage error before any request", async () => {
    const { code, err } = await runCaptured([
      "--api",
      baseUrl,
      "jobs",
      "create",
      "--body",
      JSON.stringify({ ...newJob, idempotencyKey: "k-2" }),
      "--no-idempotency-key",
    ]);
    expect(code).toBe(EXIT.usage);
    expect(err).toContain("--no-idempotency-key");
    expect(received).toEqual([]);
  });
});

describe("a request that timed out is retried within maxDelayMs, as an answer without Retry-After is", () => {
  it("a doubling wait longer than maxDelayMs is not waited: the timeout is thrown", async () => {
    const waits: number[] = [];
    const silent = createServer(() => undefined);
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
    try {
      const client = new SchedulerClient({
        baseUrl: `http://127.0.0.1:${(silent.address() as AddressInfo).port}`,
        auth: { kind: "bearer", key: "k" },
        timeoutMs: 50,
        retry: {
          attempts: 5,
          maxDelayMs: 1_000,
          sleep: async (ms) => {
            waits.push(ms);
          },
        },
      });
      await rejection(client.health(), RequestTimeoutError);
      expect(waits).toEqual([500, 1000]);
    } finally {
      silent.closeAllConnections();
      await new Promise<void>((resolve) => silent.close(() => resolve()));
    }
  });
});

describe("a DELETE whose retry finds the job gone", () => {
  const notFound: Answer = {
    status: 404,
    body: { error: { code: "not_found", message: `job ${job.id} not found` } },
  };
  // The client's timeout is 100 ms of fake time, passed only once the server has the request it
  // holds: no answer races it, however long a loaded machine takes to read one.
  beforeEach(fakeTimeouts);
  /** Done, but answered only after the client gave up on it. */
  const lateDone: Answer = { status: 204, body: "", held: true };
  const gateway504: Answer = { status: 504, body: { message: "Endpoint request timed out" } };
  const timingOut = () => clientWith({}, { timeoutMs: 100 }).client;

  it("is gone after an attempt that timed out or was answered 502 or 504: that attempt may have deleted it", async () => {
    const gateway502: Answer = { status: 502, body: { message: "Internal server error" } };
    for (const first of [lateDone, gateway504, gateway502]) {
      received = [];
      script = [first, notFound];
      const deleting = timingOut().jobs.handle(job.id).delete();
      if (first.held) await timeOutHeld(100);
      expect(await deleting).toBe("gone");
      expect(received.map((r) => `${r.method} ${r.path}`)).toEqual(
        Array(2).fill(`DELETE /jobs/${job.id}`),
      );
    }
  });

  it("is gone after an attempt whose connection broke once the request was sent", async () => {
    script = [{ status: 204, body: "", reset: true }, notFound];
    const { client, waits } = clientWith();
    expect(await client.jobs.handle(job.id).delete()).toBe("gone");
    expect(received.map((r) => r.method)).toEqual(["DELETE", "DELETE"]);
    expect(waits).toEqual([500]);
  });

  it("a connection refused is thrown at once: nothing was sent", async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, "127.0.0.1", resolve));
    const { port } = closed.address() as AddressInfo;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    const waits: number[] = [];
    const client = new SchedulerClient({
      baseUrl: `http://127.0.0.1:${port}`,
      auth: { kind: "bearer", key: "k" },
      retry: {
        sleep: async (ms) => {
          waits.push(ms);
        },
      },
    });
    const error = await rejection(client.jobs.handle(job.id).delete(), TypeError);
    expect(error.message).toBe("fetch failed");
    expect(waits).toEqual([]);
  });

  it("is not_found on a first attempt, and after a 429 or 503, which did nothing", async () => {
    for (const before of [[], [refused(429, "0")], [refused(503, "0")]]) {
      script = [...before, notFound];
      const error = await rejection(timingOut().jobs.handle(job.id).delete(), SchedulerApiError);
      expect(error.code).toBe("not_found");
    }
  });

  it("from the CLI: exit 0 after a timed-out attempt, 4 (not found) for a first attempt's 404", async () => {
    const cliDelete = () =>
      runCaptured(
        ["--api", baseUrl, "--request-timeout", "0.1", "-o", "json", "jobs", "delete", job.id],
        {},
        // The wait before the retry, a setTimeout too, is not the case's.
        { retrySleep: async () => undefined },
      );
    script = [lateDone, notFound];
    const retrying = cliDelete();
    await timeOutHeld(100);
    const retried = await retrying;
    expect(retried.code, retried.err).toBe(EXIT.ok);
    expect(JSON.parse(retried.out)).toEqual({ id: job.id, gone: true });
    expect(received).toHaveLength(2);

    script = [notFound];
    expect((await cliDelete()).code).toBe(EXIT.notFound);
  });

  it("from the CLI: a POST whose connection broke once sent is not said to be unreachable", async () => {
    script = [{ ...ok({}), reset: true }];
    // A batch with a job without a key: sent once (a trigger or create has a key, and is retried).
    const file = join(mkdtempSync(join(tmpdir(), "retries-")), "batch.json");
    writeFileSync(file, JSON.stringify([newJob]));
    const batch = await runCaptured(["--api", baseUrl, "jobs", "create-batch", "--file", file]);
    expect(received.map((r) => r.method)).toEqual(["POST"]);
    expect(batch.err).toMatch(/^error: the connection to the API broke .*may have been applied/);
    expect(batch.err).not.toMatch(/cannot reach/);
  });
});

describe("a webhook secret rotation", () => {
  const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

  it("carries a key of its own, so a 503 is retried with the same key and answers the secret", async () => {
    script = [refused(503, "0"), ok({ secret })];
    const { client } = clientWith();
    expect(await client.webhookSecret.rotate()).toBe(secret);
    expect(received.map((r) => `${r.method} ${r.path}`)).toEqual(
      Array(2).fill("POST /webhook-secret/rotate"),
    );
    const [first, second] = received.map((r) => r.idempotencyKey);
    expect(first).toMatch(/^[\x21-\x7E]{1,200}$/);
    expect(second).toBe(first);

    // Each rotation its own key: a second rotation is not a repeat of the first.
    received = [];
    script = [ok({ secret })];
    await client.webhookSecret.rotate();
    expect(received[0]?.idempotencyKey).not.toBe(first);
  });

  it("sends the caller's key when it gives one", async () => {
    script = [refused(429, "0"), ok({ secret })];
    const { client } = clientWith();
    expect(await client.webhookSecret.rotate({ idempotencyKey: "rotate-2030-01" })).toBe(secret);
    expect(received.map((r) => r.idempotencyKey)).toEqual(["rotate-2030-01", "rotate-2030-01"]);
  });

  it("from the CLI, goes through the client: retried, and --idempotency-key is sent", async () => {
    const rotateWith = async (...flags: string[]) => {
      const { code, out } = await runCaptured([
        "--api",
        baseUrl,
        "webhook-secret",
        "rotate",
        ...flags,
      ]);
      return { code, out };
    };
    script = [refused(503, "0"), ok({ secret })];
    expect(await rotateWith()).toEqual({ code: EXIT.ok, out: `${secret}\n` });
    expect(received).toHaveLength(2);
    expect(received[1]?.idempotencyKey).toBe(received[0]?.idempotencyKey);
    received = [];
    script = [ok({ secret })];
    expect((await rotateWith("--idempotency-key", "cli-rotate")).code).toBe(EXIT.ok);
    expect(received.map((r) => r.idempotencyKey)).toEqual(["cli-rotate"]);
  });
});

describe("a dead letter's replay", () => {
  const replayRun = {
    runId: "01JOB-20300101T000000000-2",
    jobId: "01JOB",
    status: "queued",
    attempt: 2,
    scheduledFor: "2030-01-01T00:00:00.000Z",
    plannedFor: "2030-01-01T00:00:00.000Z",
    dueAt: "2030-01-02T00:00:00.000Z",
    startedAt: null,
    finishedAt: null,
    durationMs: null,
    workerId: null,
    error: null,
    reason: null,
    jobVersion: 1,
    executedVersion: null,
    replayedBy: null,
    trigger: null,
    cancelRequestedAt: null,
    cancelledBy: null,
  };
  const deadRunId = "01JOB-20300101T000000000-1";

  it("carries a key of its own, so a 503 is retried with the same key and answers the run", async () => {
    script = [refused(503, "0"), { status: 202, body: replayRun }];
    const { client } = clientWith();
    expect(await client.deadLetters.replay(deadRunId)).toEqual(replayRun);
    expect(received.map((r) => `${r.method} ${r.path}`)).toEqual(
      Array(2).fill(`POST /dead-letters/${deadRunId}/replay`),
    );
    const [first, second] = received.map((r) => r.idempotencyKey);
    expect(first).toMatch(/^[\x21-\x7E]{1,200}$/);
    expect(second).toBe(first);

    received = [];
    script = [{ status: 202, body: replayRun }];
    await client.deadLetters.replay(deadRunId);
    expect(received[0]?.idempotencyKey).not.toBe(first);
  });

  it("from the CLI, sends --idempotency-key", async () => {
    script = [ok(replayRun)];
    const { code } = await runCaptured([
      "--api",
      baseUrl,
      "dead-letters",
      "replay",
      deadRunId,
      "--idempotency-key",
      "cli-replay",
    ]);
    expect(code).toBe(EXIT.ok);
    expect(received.map((r) => r.idempotencyKey)).toEqual(["cli-replay"]);
  });
});

describe("the CLI's --idempotency-key", () => {
  it.each([
    ["jobs", "create", "--type", "noop", "--run-at", "2030-01-01T00:00:00Z"],
    ["jobs", "trigger", "01JOB"],
    ["dead-letters", "replay", "01JOB-20300101T000000000-1"],
    ["webhook-secret", "rotate"],
  ])(
    "an empty or not visible ASCII key is a usage error naming it, before any request (%s %s)",
    async (...command) => {
      for (const key of ["", "two words", "x".repeat(201)]) {
        const { code, err } = await runCaptured([
          "--api",
          baseUrl,
          ...command,
          "--idempotency-key",
          key,
        ]);
        expect(code).toBe(EXIT.usage);
        expect(err).toContain("--idempotency-key");
      }
      expect(received).toEqual([]);
    },
  );
});

describe("the CLI over a client that retries", () => {
  const cliJson = (...command: string[]) =>
    runCaptured(["--api", baseUrl, "-o", "json", ...command]);

  it("a pause, resume, cancel, run cancel or edit answered 503 then 200 exits 0 and prints the answer once", async () => {
    const run = { runId: `${job.id}-20300101T000000000-1`, jobId: job.id, status: "cancelled" };
    const cases: ReadonlyArray<readonly [string[], string, unknown]> = [
      [["jobs", "pause", job.id, "--running", "cancel"], `POST /jobs/${job.id}/pause`, job],
      [["jobs", "resume", job.id], `POST /jobs/${job.id}/resume`, job],
      [["jobs", "cancel", job.id], `POST /jobs/${job.id}/cancel`, job],
      [["runs", "cancel", job.id, run.runId], `POST /jobs/${job.id}/runs/${run.runId}/cancel`, run],
      [["jobs", "edit", job.id, "--version", "1", "--name", "n"], `PATCH /jobs/${job.id}`, job],
    ];
    for (const [command, request, answer] of cases) {
      received = [];
      script = [refused(503, "0"), ok(answer)];
      const { code, out, err } = await cliJson(...command);
      expect(code, err).toBe(EXIT.ok);
      expect(err).toBe("");
      expect(JSON.parse(out)).toEqual(answer);
      expect(received.map((r) => `${r.method} ${r.path}`)).toEqual([request, request]);
      expect(received[1]?.body).toBe(received[0]?.body);
    }
  });

  it("a trigger answered 503 then its run exits 0, printing the run once; sent again under its key", async () => {
    const run = { runId: `${job.id}-20300101T000000000-1`, jobId: job.id, status: "queued" };
    script = [refused(503, "0"), { status: 202, body: run }];
    const { code, out, err } = await cliJson("jobs", "trigger", job.id);
    expect(code, err).toBe(EXIT.ok);
    expect(JSON.parse(out)).toEqual(run);
    expect(received).toHaveLength(2);
    expect(received[1]?.idempotencyKey).toBe(received[0]?.idempotencyKey);
  });

  it("a trigger answered 503 until the retries ran out exits 8 (busy), nothing printed to stdout", async () => {
    always = refused(503, "0");
    const { code, out } = await cliJson("jobs", "trigger", job.id);
    expect(code).toBe(EXIT.busy);
    expect(out).toBe("");
    expect(received).toHaveLength(4);
  });

  it("a 429 that outlasts the retries still exits 8 (busy), after the retries", async () => {
    always = refused(429, "0");
    const { code, err } = await runCaptured([
      "--api",
      baseUrl,
      "-o",
      "json",
      "jobs",
      "get",
      job.id,
    ]);
    expect(code, err).toBe(EXIT.busy);
    expect(JSON.parse(err)).toMatchObject({ error: { code: "rate_limited" } });
    expect(received.map((r) => `${r.method} ${r.path}`)).toEqual(
      Array(4).fill(`GET /jobs/${job.id}`),
    );
  });

  it("a Retry-After date is counted by the CLI's clock: its `try again in N s`", async () => {
    const at = Date.parse("2030-01-01T00:01:00Z");
    always = refused(503, new Date(at).toUTCString());
    const now = () => at - 60_000;
    const { code, err } = await runCaptured(["--api", baseUrl, "jobs", "get", job.id], {}, { now });
    expect(code, err).toBe(EXIT.busy);
    expect(err).toContain("try again in 60 s");
    // 60 s is past the longest wait (10 s): not waited for, as by the client's own clock.
    expect(received).toHaveLength(1);
  });
});
