import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JobSchema } from "../../shared/api/schemas/jobs.js";
import { type ApiHarness, expectError, KEY_B, laterJob, startApi } from "./support.js";

/**
 * What a create takes as an idempotency key (1 to 200 visible ASCII characters, as header or
 * field) and what it refuses, naming where the key came from, with nothing written; a key is its
 * tenant's, whatever characters it holds (`#` separates the parts of the record's key).
 */
describe("a create's idempotency key", () => {
  let api: ApiHarness;
  beforeAll(async () => {
    api = await startApi();
  });
  afterAll(() => api.close());

  const jobCount = async () => (await api.fixture.jobs()).length;

  it("is refused out of bounds as a header or a field (400 naming which), and nothing is written", async () => {
    const before = await jobCount();
    for (const bad of ["", "k".repeat(201), "two words", "tab\there"]) {
      const asHeader = await api.call("POST", "/jobs", {
        body: laterJob(),
        headers: { "Idempotency-Key": bad },
      });
      expectError(asHeader, 400, { field: "Idempotency-Key" });
    }
    for (const bad of ["", "k".repeat(201), "two words", "é"]) {
      const asField = await api.call("POST", "/jobs", {
        body: { ...laterJob(), idempotencyKey: bad },
      });
      expectError(asField, 400, { field: "idempotencyKey" });
      const inBatch = await api.call("POST", "/jobs:batch", {
        body: { jobs: [{ ...laterJob(), idempotencyKey: bad }] },
      });
      expect(inBatch.status, inBatch.text).toBe(200);
      expect(inBatch.body).toMatchObject({
        results: [{ index: 0, status: 400, error: { field: "idempotencyKey" } }],
      });
    }
    expect(await jobCount()).toBe(before);
  });

  it("of 200 visible characters, '#' among them, answers its own tenant's job only", async () => {
    const key = `a#b#${"~".repeat(196)}`;
    const body = laterJob({ name: "longest key" });
    const first = await api.call("POST", "/jobs", { body, headers: { "Idempotency-Key": key } });
    expect(first.status, first.text).toBe(201);
    const again = await api.call("POST", "/jobs", { body, headers: { "Idempotency-Key": key } });
    expect(again.status, again.text).toBe(200);
    expect(JobSchema.parse(again.body).id).toBe(JobSchema.parse(first.body).id);
    // Another tenant with the same key makes its own job.
    const ofB = await api.call("POST", "/jobs", {
      key: KEY_B,
      body,
      headers: { "Idempotency-Key": key },
    });
    expect(ofB.status, ofB.text).toBe(201);
    expect(JobSchema.parse(ofB.body).id).not.toBe(JobSchema.parse(first.body).id);
  });

  it("of a job deleted since is a 409 naming the job, alone or in a batch, and makes nothing", async () => {
    const body = laterJob({ name: "deleted with its key" });
    const key = "key-of-a-deleted-job";
    const first = await api.call("POST", "/jobs", { body, headers: { "Idempotency-Key": key } });
    expect(first.status, first.text).toBe(201);
    const jobId = JobSchema.parse(first.body).id;
    expect((await api.call("DELETE", `/jobs/${jobId}`)).status).toBe(204);
    const before = await jobCount();

    const alone = await api.call("POST", "/jobs", { body, headers: { "Idempotency-Key": key } });
    expect(expectError(alone, 409, { code: "idempotency_conflict" }).message).toContain(jobId);
    const inBatch = await api.call("POST", "/jobs:batch", {
      body: { jobs: [{ ...body, idempotencyKey: key }] },
    });
    expect(inBatch.status, inBatch.text).toBe(200);
    expect(inBatch.body).toMatchObject({
      results: [{ index: 0, status: 409, error: { code: "idempotency_conflict" } }],
    });
    expect(JSON.stringify(inBatch.body)).toContain(jobId);
    expect(await jobCount()).toBe(before);
  });
});
