import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readQuotaUsage } from "../../shared/storage/tenant-quotas.js";
import { type ApiHarness, KEY_B, laterJob, startApi } from "./support.js";

interface Result {
  readonly index: number;
  readonly status: number;
  readonly job?: { readonly id: string };
  readonly error?: { readonly code: string; readonly field?: string; readonly quota?: string };
}
const resultsOf = (body: unknown): Result[] => (body as { results: Result[] }).results;

/** A review's probes: what held of the batch's answers and of "nothing of a refused job is written". */
describe("batch create: keys shared with single creates, and refusals that leave nothing behind", () => {
  let api: ApiHarness;
  beforeAll(async () => {
    // The shortest lookahead: a per-second job's create claims a minute of its occurrences, not
    // five (some 250 runs fewer for each of the mixed batch's ten), and still leaves it its runs
    // and its due entry, which is what the case reads.
    api = await startApi({ settings: { lookaheadMs: 60_000 } });
  });
  afterAll(() => api.close());
  const asB = { key: KEY_B };

  it("a key used alone (header) and then in a batch with the same body answers the same job", async () => {
    const body = laterJob({ name: "alone then batch" });
    const single = await api.call("POST", "/jobs", {
      body,
      headers: { "Idempotency-Key": "probe-alone" },
    });
    expect(single.status, single.text).toBe(201);
    const id = (single.body as { id: string }).id;
    const reply = await api.call("POST", "/jobs:batch", {
      body: { jobs: [{ ...body, idempotencyKey: "probe-alone" }] },
    });
    expect(resultsOf(reply.body).map((r) => [r.status, r.job?.id])).toEqual([[200, id]]);
  });

  it("a key used in a batch and then alone with the same body answers the same job", async () => {
    const body = { type: "noop", schedule: { every: "PT1H" }, name: "batch then alone" };
    const reply = await api.call("POST", "/jobs:batch", {
      body: { jobs: [{ ...body, idempotencyKey: "probe-batch-first" }] },
    });
    const [first] = resultsOf(reply.body);
    expect(first?.status).toBe(201);
    const single = await api.call("POST", "/jobs", {
      body,
      headers: { "Idempotency-Key": "probe-batch-first" },
    });
    expect(single.status, single.text).toBe(200);
    expect((single.body as { id: string }).id).toBe(first?.job?.id);
  });

  it("a mixed 25-job batch under quotas: refused jobs leave no job, entry, run or share", async () => {
    const set = await api.call("PUT", "/tenants/tenant-b/quotas", {
      body: { activeJobs: 10, maxPriority: "normal" },
    });
    expect(set.status, set.text).toBe(200);
    const priorBody = laterJob({ name: "prior" });
    const prior = await api.call("POST", "/jobs", {
      ...asB,
      body: priorBody,
      headers: { "Idempotency-Key": "probe-prior" },
    });
    expect(prior.status).toBe(201);
    const otherTenant = await api.call("POST", "/jobs", { body: laterJob() });
    const foreignId = (otherTenant.body as { id: string }).id;
    const before = {
      jobs: (await api.fixture.jobs()).length,
      entries: (await api.fixture.dueEntries()).length,
    };
    const nowJob = (n: number) => ({
      type: "noop",
      schedule: { every: "PT1S" },
      name: `per-second ${n}`,
    });
    const jobs: Record<string, unknown>[] = [
      { ...priorBody, idempotencyKey: "probe-prior" }, // 0: repeat, 200
      laterJob({ name: "other body", idempotencyKey: "probe-prior" }), // 1: 400 repeat in batch
      { type: "noop", schedule: { cron: "bad" } }, // 2: 400
      laterJob({ priority: "high" }), // 3: 403 maxPriority
      { type: "noop", schedule: { after: { jobs: [foreignId], on: "success" } } }, // 4: other tenant
    ];
    for (let i = jobs.length; i < 25; i++)
      jobs.push(
        i % 2 === 0 ? nowJob(i) : laterJob({ name: `j${i}`, idempotencyKey: `probe-k${i}` }),
      );
    const reply = await api.call("POST", "/jobs:batch", { ...asB, body: { jobs } });
    expect(reply.status, reply.text).toBe(200);
    const results = resultsOf(reply.body);
    const created = results.filter((r) => r.status === 201);
    expect(created).toHaveLength(9);
    expect(results.slice(0, 5).map((r) => r.status)).toEqual([200, 400, 400, 403, 400]);
    const usage = await readQuotaUsage(api.fixture.engine, "tenant-b");
    expect(usage).toMatchObject({ activeJobs: 10 });
    const createdIds = new Set(created.map((r) => r.job?.id));
    const jobsNow = await api.fixture.jobs();
    expect(jobsNow.length - before.jobs).toBe(9);
    const entries = await api.fixture.dueEntries();
    const jobIds = new Set(jobsNow.map((j) => j.jobId));
    const orphanEntries = entries.filter((e) => !jobIds.has(e.jobId));
    expect(orphanEntries).toEqual([]);
    const runs = await api.fixture.runs();
    const orphanRuns = runs.filter((r) => !jobIds.has(r.jobId));
    expect(orphanRuns).toEqual([]);
    for (const id of createdIds) expect(jobIds.has(String(id))).toBe(true);
    expect(entries.length).toBeGreaterThan(before.entries);
  });
});
