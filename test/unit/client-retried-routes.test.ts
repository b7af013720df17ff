import { describe, expect, it } from "vitest";
import { SchedulerApiError, SchedulerClient } from "../../client/index.js";
import { isRepeatable } from "../../client/retries.js";
import { rejection } from "../support/rejection.js";

/**
 * Which requests the client sends again after a 503 `busy` or API Gateway's 504 (an attempt that
 * may have been applied): those docs/api.md's "Retrying requests" table answers as the first
 * attempt did (a job's pause, resume and cancel, a run's cancel, an edit at the same If-Match, an
 * async target's completion and heartbeat, a schedule's preview; a create or trigger under the key
 * the client makes for it; a batch whose every job has its key), and not those whose repeat does
 * it again (a batch with a job without a key; a create, replay or rotation sent through
 * `client.http` without an Idempotency-Key). The fetch is
 * a fake that answers from a script and records what was sent.
 */
interface Sent {
  readonly method: string;
  readonly path: string;
  readonly body: string;
  readonly ifMatch: string | null;
  readonly idempotencyKey: string | null;
}

const JOB_ID = "01JOB";
const RUN_ID = "01JOB-20300101T000000000-1";
const job = { id: JOB_ID, version: 2, status: "paused" };
const run = { runId: RUN_ID, jobId: JOB_ID, status: "cancelled" };
const busy = () =>
  Response.json(
    { error: { code: "busy", message: "the job is changing under other requests" } },
    { status: 503, headers: { "Retry-After": "1" } },
  );
/** API Gateway's answer when the API's function ran out of time, perhaps after its write. */
const gatewayTimeout = () =>
  Response.json({ message: "Endpoint request timed out" }, { status: 504 });

/** A client over a fetch that answers `first()` once, then `then` to every request. */
function clientAnswering(first: () => Response, then: unknown, status = 200) {
  const sent: Sent[] = [];
  const waits: number[] = [];
  const fakeFetch: typeof fetch = async (input, init) => {
    const request = new Request(input, init);
    sent.push({
      method: request.method,
      path: new URL(request.url).pathname,
      body: await request.text(),
      ifMatch: request.headers.get("if-match"),
      idempotencyKey: request.headers.get("idempotency-key"),
    });
    return sent.length === 1 ? first() : Response.json(then, { status });
  };
  const client = new SchedulerClient({
    baseUrl: "https://api.example.test/prod",
    auth: { kind: "bearer", key: "k" },
    fetch: fakeFetch,
    retry: {
      sleep: async (ms) => {
        waits.push(ms);
      },
    },
  });
  return { client, sent, waits };
}

type Call = (client: SchedulerClient) => Promise<unknown>;

/** Each request the table answers, sent again, as the first did; and what it answers. */
const retried: ReadonlyArray<readonly [string, Call, unknown]> = [
  ["POST /jobs/{id}/pause", (c) => c.jobs.handle(JOB_ID).pause({ running: "cancel" }), job],
  ["POST /jobs/{id}/resume", (c) => c.jobs.handle(JOB_ID).resume(), job],
  ["POST /jobs/{id}/cancel", (c) => c.jobs.handle(JOB_ID).cancel(), job],
  ["POST /jobs/{id}/runs/{runId}/cancel", (c) => c.runs.cancel(JOB_ID, RUN_ID), run],
  ["PATCH /jobs/{id}", (c) => c.jobs.handle(JOB_ID).edit({ name: "n" }, { version: 1 }), job],
  [
    "POST /runs/{runId}/complete",
    (c) => c.completeRun(RUN_ID, "token", { status: "failed", error: "x", retryable: false }),
    run,
  ],
  [
    "POST /runs/{runId}/heartbeat",
    (c) => c.runHeartbeat(RUN_ID, "token"),
    { leaseUntil: "2030-01-01T00:01:00.000Z", timesOutAt: "2030-01-01T01:00:00.000Z" },
  ],
  [
    "POST /schedules/preview",
    (c) => c.schedules.preview({ cron: "0 9 * * *", timezone: "UTC" }, 2),
    { occurrences: [], timezone: "UTC" },
  ],
  // Under the Idempotency-Key the client makes for each call (or the caller's own).
  [
    "POST /jobs",
    async (c) =>
      (await c.jobs.create({ type: "noop", schedule: { runAt: "2030-01-01T00:00Z" } })).job,
    job,
  ],
  ["POST /jobs/{id}/trigger", (c) => c.jobs.handle(JOB_ID).trigger(), run],
  [
    "POST /jobs:batch (every job with its idempotencyKey)",
    async (c) => ({
      results: await c.jobs.createBatch([
        { type: "noop", schedule: { runAt: "2030-01-01T00:00Z" }, idempotencyKey: "b-1" },
        { type: "noop", schedule: { runAt: "2030-01-02T00:00Z" }, idempotencyKey: "b-2" },
      ]),
    }),
    { results: [{ index: 0, status: 200, job }] },
  ],
];

/** Each request whose repeat does it again: sent once, whatever the first answer. */
const sentOnce: ReadonlyArray<readonly [string, Call]> = [
  // The client gives a batch's jobs no key of its own: one without a key would be created again.
  [
    "POST /jobs:batch (a job without an idempotencyKey)",
    (c) =>
      c.jobs.createBatch([
        { type: "noop", schedule: { runAt: "2030-01-01T00:00Z" }, idempotencyKey: "b-1" },
        { type: "noop", schedule: { runAt: "2030-01-02T00:00Z" } },
      ]),
  ],
  [
    "POST /jobs (a create sent through client.http without a key)",
    (c) =>
      c.http.POST("/jobs", { body: { type: "noop", schedule: { runAt: "2030-01-01T00:00Z" } } }),
  ],
  [
    "POST /dead-letters/{runId}/replay",
    (c) => c.http.POST("/dead-letters/{runId}/replay", { params: { path: { runId: RUN_ID } } }),
  ],
  ["POST /webhook-secret/rotate", (c) => c.http.POST("/webhook-secret/rotate")],
];

describe("a request whose repeat answers what the first did", () => {
  for (const [operation, call, answer] of retried) {
    it(`${operation}: a 503 busy, then 200, ends in the 200; sent again as it was`, async () => {
      const { client, sent, waits } = clientAnswering(busy, answer);
      expect(await call(client)).toEqual(answer);
      expect(waits).toEqual([1000]);
      expect(sent).toHaveLength(2);
      expect(sent[1]).toEqual(sent[0]);
      expect(`${sent[0]?.method} ${sent[0]?.path}`).toMatch(/^(POST|PATCH) \/prod\//);
    });

    it(`${operation}: a 504 that may have applied it, then 200, ends in the 200`, async () => {
      const { client, sent } = clientAnswering(gatewayTimeout, answer);
      expect(await call(client)).toEqual(answer);
      expect(sent).toHaveLength(2);
    });
  }

  it("an edit is sent again at the version it was sent at, not the one its answer would give", async () => {
    const { client, sent } = clientAnswering(busy, { ...job, version: 4 });
    const handle = client.jobs.handle(JOB_ID);
    expect((await handle.edit({ name: "n" }, { version: 3 })).version).toBe(4);
    expect(sent.map((s) => s.ifMatch)).toEqual(['"3"', '"3"']);
    expect(handle.job?.version).toBe(4);
  });

  it("an edit's 412 after a retry (another edit followed) is the VersionConflictError, not retried", async () => {
    const stale = { error: { code: "version_mismatch", message: "stale", field: "If-Match" } };
    const { client, sent } = clientAnswering(gatewayTimeout, stale, 412);
    const error = await rejection(
      client.jobs.handle(JOB_ID).edit({ name: "n" }, { version: 1 }),
      SchedulerApiError,
    );
    expect(error.code).toBe("version_mismatch");
    expect(sent).toHaveLength(2);
  });
});

describe("a request whose repeat does it again", () => {
  for (const [operation, call] of sentOnce) {
    it(`${operation}: sent once after a 503 or a 504`, async () => {
      for (const first of [busy, gatewayTimeout]) {
        const { client, sent, waits } = clientAnswering(first, {});
        // The typed methods throw the answer's error; client.http answers it as `error`.
        await call(client).catch(() => undefined);
        expect(sent).toHaveLength(1);
        expect(waits).toEqual([]);
      }
    });
  }

  it("a PATCH without If-Match (refused 428 by the API) is not repeatable; one with it is", () => {
    const url = "https://api.example.test/prod/jobs/01JOB";
    expect(isRepeatable(new Request(url, { method: "PATCH", body: "{}" }))).toBe(false);
    expect(
      isRepeatable(new Request(url, { method: "PATCH", body: "{}", headers: { "If-Match": "1" } })),
    ).toBe(true);
  });

  it("a POST is judged by its route's last segments, whatever the base URL's path before them", () => {
    const post = (path: string) =>
      isRepeatable(new Request(`https://h${path}`, { method: "POST" }));
    expect(post("/jobs/01JOB/pause")).toBe(true);
    expect(post("/stage/jobs/01JOB/runs/r%2F1/cancel")).toBe(true);
    expect(post("/jobs/01JOB/trigger")).toBe(false); // without its Idempotency-Key
    expect(post("/jobs/01JOB/pause/trigger")).toBe(false);
    expect(post("/jobs")).toBe(false);
    expect(post("/pause")).toBe(false);
    expect(post("/jobs/01JOB/pause?x=1")).toBe(true);
  });
});
