import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JobSchema } from "../../shared/api/schemas/jobs.js";
import { readQuotaUsage } from "../../shared/storage/tenant-quotas.js";
import {
  type ApiHarness,
  expectError,
  laterJob,
  type Reply,
  startApi,
  TENANT_A,
} from "./support.js";

/**
 * Creates with one Idempotency-Key sent at the same moment: one job is written, each answer names
 * it (201 once, 200 for the others) or refuses a body that is not its (409), and the tenant's
 * usage counts the one job (the losers' reservations given back).
 */
describe("creates with one idempotency key at once", () => {
  let api: ApiHarness;
  beforeAll(async () => {
    api = await startApi({ settings: { quotaCacheMs: 0 } });
    const limits = { activeJobs: 1_000, runsPerMinute: 100_000, requestsPerSecond: 100_000 };
    const reply = await api.call("PUT", `/tenants/${TENANT_A}/quotas`, { body: limits });
    expect(reply.status, reply.text).toBe(200);
  });
  afterAll(() => api.close());

  const idOf = (reply: Reply) => JobSchema.parse(reply.body).id;
  const jobsNamed = async (name: string) =>
    (await api.fixture.jobs()).filter((j) => j.tenantId === TENANT_A && j.name === name);
  const activeJobsUsage = async () =>
    (await readQuotaUsage(api.fixture.engine, TENANT_A))?.activeJobs;

  it("the same body: one 201, the others 200 naming its job; one job counted", async () => {
    const before = await activeJobsUsage();
    const body = laterJob({ name: "raced-same" });
    const replies = await Promise.all(
      Array.from({ length: 6 }, () =>
        api.call("POST", "/jobs", { body, headers: { "Idempotency-Key": "race-same" } }),
      ),
    );
    expect(replies.map((r) => r.status).sort()).toEqual([200, 200, 200, 200, 200, 201]);
    const [made] = await jobsNamed("raced-same");
    expect(await jobsNamed("raced-same")).toHaveLength(1);
    expect(new Set(replies.map(idOf))).toEqual(new Set([made?.jobId]));
    expect(await activeJobsUsage()).toBe((before ?? 0) + 1);
  });

  it("two bodies: the winner's body gets its job, the other a 409; one job", async () => {
    const names = ["raced-one", "raced-two"];
    // Made once each: laterJob's runAt is a day from the call, to the millisecond.
    const bodies = names.map((name) => laterJob({ name }));
    const replies = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        api.call("POST", "/jobs", {
          body: bodies[i % 2],
          headers: { "Idempotency-Key": "race-two-bodies" },
        }),
      ),
    );
    const made = [...(await jobsNamed("raced-one")), ...(await jobsNamed("raced-two"))];
    expect(made).toHaveLength(1);
    const winner = made[0]?.name;
    replies.forEach((reply, i) => {
      if (names[i % 2] === winner) {
        expect([200, 201]).toContain(reply.status);
        expect(idOf(reply)).toBe(made[0]?.jobId);
      } else {
        expectError(reply, 409, { code: "idempotency_conflict" });
      }
    });
    expect(replies.filter((r) => r.status === 201)).toHaveLength(1);
  });

  it("a single create and a batch with the key at once make one job", async () => {
    const body = laterJob({ name: "raced-batch" });
    const [single, batch] = await Promise.all([
      api.call("POST", "/jobs", { body, headers: { "Idempotency-Key": "race-batch" } }),
      api.call("POST", "/jobs:batch", {
        body: { jobs: [{ ...body, idempotencyKey: "race-batch" }] },
      }),
    ]);
    expect([200, 201]).toContain(single.status);
    expect(batch.status, batch.text).toBe(200);
    const made = await jobsNamed("raced-batch");
    expect(made).toHaveLength(1);
    expect(idOf(single)).toBe(made[0]?.jobId);
    expect(batch.body).toMatchObject({ results: [{ job: { id: made[0]?.jobId } }] });
  });
});
