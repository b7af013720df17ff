import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JobSchema } from "../../shared/api/schemas/jobs.js";
import { createJob, requestHash } from "../../shared/jobs/index.js";
import { type ApiHarness, inMinutes, laterJob, startApi, TENANT_A } from "./support.js";

/** Every optional field of a create given at its documented default. */
const DEFAULTS_SPELLED_OUT = {
  name: "noop",
  payload: null,
  priority: "normal",
  misfirePolicy: "fire_once",
  overlapPolicy: "skip",
  retry: { maxAttempts: 5, initialDelaySeconds: 30, maxDelaySeconds: 3600 },
  timeoutSeconds: 300,
};

interface Result {
  readonly status: number;
  readonly job?: { readonly id: string };
  readonly error?: { readonly code: string };
}
const resultsOf = (body: unknown): Result[] => (body as { results: Result[] }).results;

/**
 * One Idempotency-Key stands for one request, whichever way it spells its defaults: a field given
 * at its default is the same request as the field left out, for POST /jobs and each job of
 * POST /jobs:batch. A request whose key was recorded before requests were normalized is still
 * recognised when it is repeated as it was sent.
 */
describe("an idempotency key and the request's defaults", () => {
  let api: ApiHarness;
  beforeAll(async () => {
    api = await startApi();
  });
  afterAll(() => api.close());

  const create = (key: string, body: unknown) =>
    api.call("POST", "/jobs", { body, headers: { "Idempotency-Key": key } });

  it("POST /jobs: a field given at its default repeats the request that left it out, and back", async () => {
    const bare = laterJob({ schedule: { runAt: inMinutes(90) } });
    const spelled = { ...bare, ...DEFAULTS_SPELLED_OUT };

    const first = await create("defaults-left-out-first", bare);
    expect(first.status).toBe(201);
    const repeat = await create("defaults-left-out-first", spelled);
    expect(repeat.status).toBe(200);
    expect(JobSchema.parse(repeat.body).id).toBe(JobSchema.parse(first.body).id);

    const firstSpelled = await create("defaults-spelled-out-first", spelled);
    expect(firstSpelled.status).toBe(201);
    const repeatBare = await create("defaults-spelled-out-first", bare);
    expect(repeatBare.status).toBe(200);
    expect(JobSchema.parse(repeatBare.body).id).toBe(JobSchema.parse(firstSpelled.body).id);
  });

  it("POST /jobs: a priority other than the default is another request (409)", async () => {
    const bare = laterJob({ schedule: { runAt: inMinutes(91) } });
    expect((await create("priority-differs", bare)).status).toBe(201);
    const other = await create("priority-differs", { ...bare, priority: "high" });
    expect(other.status).toBe(409);
    expect(other.body).toMatchObject({ error: { code: "idempotency_conflict" } });
  });

  it("POST /jobs:batch: each job's defaults, given or left out, are the same request", async () => {
    const bare = laterJob({ schedule: { runAt: inMinutes(92) } });
    const first = resultsOf(
      (
        await api.call("POST", "/jobs:batch", {
          body: { jobs: [{ ...bare, idempotencyKey: "batch-defaults" }] },
        })
      ).body,
    );
    expect(first.map((r) => r.status)).toEqual([201]);
    const again = resultsOf(
      (
        await api.call("POST", "/jobs:batch", {
          body: { jobs: [{ ...bare, ...DEFAULTS_SPELLED_OUT, idempotencyKey: "batch-defaults" }] },
        })
      ).body,
    );
    expect(again.map((r) => r.status)).toEqual([200]);
    expect(again[0]?.job?.id).toBe(first[0]?.job?.id);
    // And POST /jobs with the same key and the job's request, spelled either way, is its repeat.
    const single = await create("batch-defaults", { ...bare, priority: "normal" });
    expect(single.status).toBe(200);
    expect(JobSchema.parse(single.body).id).toBe(first[0]?.job?.id);
  });

  it("a key recorded with the hash of the request as sent (before normalizing) still answers its repeat", async () => {
    const body = laterJob({ schedule: { runAt: inMinutes(93) }, priority: "normal" });
    // What a create stored before this change: the hash of the body as it came, defaults and all.
    const { job } = await createJob(
      api.fixture.engine,
      {
        tenantId: TENANT_A,
        name: "noop",
        type: "noop",
        schedule: body.schedule,
        payload: null,
        priority: "normal",
        timeoutSeconds: 300,
        policies: {
          retry: { maxAttempts: 5, initialDelayMs: 30_000, maxDelayMs: 3_600_000 },
          misfire: "fire_once",
          overlap: "skip",
          maxConcurrent: 1,
          inFlight: "skip",
        },
      },
      { idempotency: { key: "recorded-before", requestHash: requestHash(body) } },
    );
    const repeat = await create("recorded-before", body);
    expect(repeat.status).toBe(200);
    expect(JobSchema.parse(repeat.body).id).toBe(job.jobId);
    const other = await create("recorded-before", { ...body, priority: "low" });
    expect(other.status).toBe(409);
  });
});
