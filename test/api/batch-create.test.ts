import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JobPageSchema, JobSchema } from "../../shared/api/schemas/jobs.js";
import { RunPageSchema } from "../../shared/api/schemas/runs.js";
import { receiveRuns } from "../../shared/queue/work-queue.js";
import { readQuotaUsage } from "../../shared/storage/tenant-quotas.js";
import { waitFor } from "../support/wait.js";
import { type ApiHarness, expectError, inMinutes, KEY_B, laterJob, startApi } from "./support.js";

interface Result {
  readonly index: number;
  readonly status: number;
  readonly job?: {
    readonly id: string;
    readonly status: string;
    readonly nextRunAt: string | null;
  };
  readonly error?: {
    readonly code: string;
    readonly message?: string;
    readonly field?: string;
    readonly quota?: string;
  };
}

const resultsOf = (body: unknown): Result[] => (body as { results: Result[] }).results;

const dueNow = (overrides: Record<string, unknown> = {}) => ({
  type: "noop",
  schedule: { runAt: new Date().toISOString() },
  ...overrides,
});

describe("POST /jobs:batch", () => {
  let api: ApiHarness;
  beforeAll(async () => {
    api = await startApi();
  });
  afterAll(() => api.close());

  const jobIds = async (key?: string) => {
    const reply = await api.call("GET", "/jobs?limit=100", key ? { key } : {});
    return JobPageSchema.parse(reply.body).items.map((j) => j.id);
  };
  const runsOf = async (jobId: string) =>
    RunPageSchema.parse((await api.call("GET", `/jobs/${jobId}/runs`)).body).items;

  /**
   * Receives from the normal queue until a message of each job has arrived; else fails naming the
   * jobs none arrived for, with their runs as stored (a run QUEUED due later was sent delayed).
   */
  const delivered = async (ids: readonly string[]) => {
    const seen = new Set<string>();
    try {
      await waitFor("a message for each due job", async () => {
        const received = await receiveRuns(
          api.fixture.engine.sqs,
          api.fixture.engine.queues.normal,
          { max: 10, waitSeconds: 1 },
        );
        for (const r of received) seen.add(r.message.jobId);
        return ids.every((id) => seen.has(id));
      });
    } catch (error) {
      const missing = ids.filter((id) => !seen.has(id));
      const described = await Promise.all(
        missing.map(async (id) => {
          const runs = (await runsOf(id)).toSorted((a, b) =>
            a.scheduledFor.localeCompare(b.scheduledFor),
          );
          const shown = runs.slice(0, 3).map((r) => `${r.status} due ${r.dueAt}`);
          const more = runs.length > shown.length ? `, … (${runs.length} runs)` : "";
          return `job ${id}: ${runs.length === 0 ? "no runs" : shown.join(", ") + more}`;
        }),
      );
      throw new Error(
        `${error instanceof Error ? error.message : String(error)} (at ${new Date().toISOString()}); no message of ${described.join("; ")}`,
      );
    }
    return seen;
  };

  it("creates each valid job of a mixed batch, refuses the invalid one alone, and delivers the due runs", async () => {
    const before = await jobIds();
    const reply = await api.call("POST", "/jobs:batch", {
      body: {
        jobs: [
          dueNow({ name: "one-off now" }),
          { type: "noop", schedule: { every: "PT1M" }, name: "per minute" },
          { type: "noop", schedule: { cron: "not a cron", timezone: "UTC" } },
          laterJob({ name: "later", idempotencyKey: "mixed-later" }),
          dueNow({ name: "keyed now", idempotencyKey: "mixed-now" }),
        ],
      },
    });
    expect(reply.status, reply.text).toBe(200);
    const results = resultsOf(reply.body);
    expect(results.map((r) => [r.index, r.status])).toEqual([
      [0, 201],
      [1, 201],
      [2, 400],
      [3, 201],
      [4, 201],
    ]);
    expect(results[2]?.error).toMatchObject({ code: "validation_failed", field: "schedule.cron" });
    for (const r of results.filter((r) => r.status === 201)) JobSchema.parse(r.job);
    const created = results.flatMap((r) => (r.job ? [r.job.id] : []));
    expect(new Set(await jobIds())).toEqual(new Set([...before, ...created]));
    expect(results[1]?.job?.status).toBe("active");
    expect(results[3]?.job?.nextRunAt).not.toBeNull();

    const [now, perMinute, , , keyedNow] = results.map((r) => r.job?.id ?? "");
    await delivered([now, perMinute, keyedNow].map(String));
    for (const id of [now, keyedNow]) {
      expect((await runsOf(String(id))).map((r) => r.status)).toEqual(["queued"]);
    }
  });

  it("answers a repeat of a batch with keys with the same jobs (200) and writes nothing new", async () => {
    const batch = {
      jobs: [
        dueNow({ idempotencyKey: "repeat-now" }),
        laterJob({ idempotencyKey: "repeat-later" }),
        { type: "noop", schedule: { every: "PT1H" }, idempotencyKey: "repeat-hourly" },
      ],
    };
    const first = resultsOf((await api.call("POST", "/jobs:batch", { body: batch })).body);
    expect(first.map((r) => r.status)).toEqual([201, 201, 201]);
    const jobsAfterFirst = await jobIds();
    const runsAfterFirst = await runsOf(String(first[0]?.job?.id));

    const again = await api.call("POST", "/jobs:batch", { body: batch });
    expect(again.status).toBe(200);
    const second = resultsOf(again.body);
    expect(second.map((r) => r.status)).toEqual([200, 200, 200]);
    expect(second.map((r) => r.job?.id)).toEqual(first.map((r) => r.job?.id));
    expect(await jobIds()).toEqual(jobsAfterFirst);
    expect(await runsOf(String(first[0]?.job?.id))).toEqual(runsAfterFirst);
  });

  it("answers 409 for the job whose key was used with another body, and creates the others", async () => {
    const single = await api.call("POST", "/jobs", {
      body: laterJob({ name: "first use" }),
      headers: { "Idempotency-Key": "used-once" },
    });
    expect(single.status).toBe(201);
    const reply = await api.call("POST", "/jobs:batch", {
      body: {
        jobs: [
          laterJob({ name: "a" }),
          laterJob({ name: "another body", idempotencyKey: "used-once" }),
          laterJob({ name: "b", idempotencyKey: "fresh-key" }),
        ],
      },
    });
    const results = resultsOf(reply.body);
    expect(results.map((r) => r.status)).toEqual([201, 409, 201]);
    expect(results[1]?.error).toMatchObject({
      code: "idempotency_conflict",
      field: "idempotencyKey",
    });
  });

  it("refuses a second job with the same key in one batch, naming idempotencyKey", async () => {
    const reply = await api.call("POST", "/jobs:batch", {
      body: {
        jobs: [
          laterJob({ idempotencyKey: "twice" }),
          laterJob({ idempotencyKey: "twice", name: "x" }),
        ],
      },
    });
    const results = resultsOf(reply.body);
    expect(results.map((r) => r.status)).toEqual([201, 400]);
    expect(results[1]?.error).toMatchObject({ field: "idempotencyKey" });
  });

  it("names the job whose key is repeated by its place in the request, past an invalid job", async () => {
    const reply = await api.call("POST", "/jobs:batch", {
      body: {
        jobs: [
          laterJob({ schedule: { cron: "not a cron", timezone: "UTC" } }),
          laterJob({ idempotencyKey: "twice-past-invalid" }),
          laterJob({ idempotencyKey: "twice-past-invalid", name: "x" }),
        ],
      },
    });
    const results = resultsOf(reply.body);
    expect(results.map((r) => r.status)).toEqual([400, 201, 400]);
    expect(results[2]?.error).toMatchObject({
      field: "idempotencyKey",
      message: "idempotencyKey: repeats the key of jobs[1] in this batch",
    });
  });

  it("takes a job whose payload nests as deep as a single create takes, and refuses one deeper", async () => {
    // `{"payload": <63 levels>}` is the deepest body POST /jobs takes (64 levels).
    const nested = (levels: number): unknown => (levels === 0 ? 1 : [nested(levels - 1)]);
    const deepest = { type: "report", schedule: { runAt: inMinutes(60) }, payload: nested(63) };
    expect((await api.call("POST", "/jobs", { body: deepest })).status).toBe(201);
    const reply = await api.call("POST", "/jobs:batch", { body: { jobs: [deepest, laterJob()] } });
    expect(reply.status, reply.text).toBe(200);
    expect(resultsOf(reply.body).map((r) => r.status)).toEqual([201, 201]);
    const deeper = { ...deepest, payload: nested(64) };
    expectError(await api.call("POST", "/jobs", { body: deeper }), 400, { field: "payload" });
    expectError(await api.call("POST", "/jobs:batch", { body: { jobs: [deeper] } }), 400, {
      field: "jobs",
    });
  });

  it("holds each job to a single create's body size: a larger one is its own 413, the others are created", async () => {
    const headers = Object.fromEntries(
      Array.from({ length: 30 }, (_, i) => [`X-Big-${i}`, "a".repeat(4000)]),
    );
    const big = {
      type: "http",
      schedule: { runAt: inMinutes(60) },
      target: { url: "https://example.com/hook", headers },
    };
    expectError(await api.call("POST", "/jobs", { body: big }), 413, {
      code: "payload_too_large",
    });
    const before = await jobIds();
    const reply = await api.call("POST", "/jobs:batch", { body: { jobs: [big, laterJob()] } });
    expect(reply.status, reply.text).toBe(200);
    const [refused, created] = resultsOf(reply.body);
    expect(refused).toMatchObject({ status: 413, error: { code: "payload_too_large" } });
    expect(created?.status).toBe(201);
    expect((await jobIds()).length).toBe(before.length + 1);
  });

  it("refuses a body that is not 1 to 25 jobs with a 400 naming jobs, and writes nothing", async () => {
    const before = await jobIds();
    const many = Array.from({ length: 26 }, () => laterJob());
    for (const body of [{ jobs: many }, { jobs: [] }, {}, { jobs: laterJob() }, [laterJob()]]) {
      expectError(await api.call("POST", "/jobs:batch", { body }), 400, {
        code: "validation_failed",
        field: "jobs",
      });
    }
    expectError(
      await api.call("POST", "/jobs:batch", {
        body: { jobs: [laterJob()] },
        headers: { "Idempotency-Key": "k" },
      }),
      400,
      { field: "Idempotency-Key" },
    );
    expect(await jobIds()).toEqual(before);
    expect(
      resultsOf((await api.call("POST", "/jobs:batch", { body: { jobs: many.slice(1) } })).body),
    ).toHaveLength(25);
  });

  it("names an unknown field beside jobs as POST /jobs does, and lists every issue, the header's too", async () => {
    const before = await jobIds();
    const extra = expectError(
      await api.call("POST", "/jobs:batch", { body: { jobs: [laterJob()], dryRun: true } }),
      400,
      { code: "validation_failed", field: "dryRun" },
    );
    expect(extra.issues).toEqual([{ field: "dryRun", message: 'unknown field "dryRun"' }]);
    const misspelt = expectError(
      await api.call("POST", "/jobs:batch", { body: { job: [laterJob()] } }),
      400,
      { field: "job" },
    );
    expect(misspelt.issues?.map((issue) => issue.field)).toEqual(["job", "jobs"]);
    const header = expectError(
      await api.call("POST", "/jobs:batch", {
        body: { jobs: [laterJob()] },
        headers: { "Idempotency-Key": "k" },
      }),
      400,
      { field: "Idempotency-Key" },
    );
    expect(header.issues?.map((issue) => issue.field)).toEqual(["Idempotency-Key"]);
    expect(await jobIds()).toEqual(before);
  });

  it("keeps a tenant's batch jobs from another tenant", async () => {
    const reply = await api.call("POST", "/jobs:batch", { body: { jobs: [laterJob()] } });
    const id = String(resultsOf(reply.body)[0]?.job?.id);
    expectError(await api.call("GET", `/jobs/${id}`, { key: KEY_B }), 404);
    expect(await jobIds(KEY_B)).not.toContain(id);
    expect(await jobIds()).toContain(id);
  });
});

describe("POST /jobs:batch under quotas", () => {
  let api: ApiHarness;
  beforeAll(async () => {
    api = await startApi();
  });
  afterAll(() => api.close());
  const asB = { key: KEY_B };

  it("lets in the jobs that fit activeJobs in order, refuses the rest as a single create would, and reserves only theirs", async () => {
    const set = await api.call("PUT", "/tenants/tenant-b/quotas", {
      body: { activeJobs: 4, maxPriority: "normal" },
    });
    expect(set.status).toBe(200);
    expect((await api.call("POST", "/jobs", { ...asB, body: laterJob() })).status).toBe(201);
    const reply = await api.call("POST", "/jobs:batch", {
      ...asB,
      body: {
        jobs: [
          dueNow(),
          laterJob({ priority: "high" }),
          laterJob({ idempotencyKey: "quota-1" }),
          laterJob(),
          dueNow(),
        ],
      },
    });
    const results = resultsOf(reply.body);
    expect(results.map((r) => r.status)).toEqual([201, 403, 201, 201, 403]);
    expect(results[1]?.error).toMatchObject({ quota: "maxPriority", field: "priority" });
    expect(results[4]?.error).toMatchObject({ code: "quota_exceeded", quota: "activeJobs" });
    const single = expectError(await api.call("POST", "/jobs", { ...asB, body: laterJob() }), 403);
    expect(single.quota).toBe("activeJobs");

    const listed = JobPageSchema.parse((await api.call("GET", "/jobs", asB)).body).items;
    expect(listed).toHaveLength(4);
    expect(await readQuotaUsage(api.fixture.engine, "tenant-b")).toMatchObject({ activeJobs: 4 });
  });

  it("reserves nothing and checks only maxPriority while nothing is limited", async () => {
    const reply = await api.call("POST", "/jobs:batch", {
      body: { jobs: [laterJob({ schedule: { runAt: inMinutes(90) } }), laterJob()] },
    });
    expect(resultsOf(reply.body).map((r) => r.status)).toEqual([201, 201]);
    expect(await readQuotaUsage(api.fixture.engine, "tenant-a")).toBeNull();
  });
});
