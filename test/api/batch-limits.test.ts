import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JobPageSchema } from "../../shared/api/schemas/jobs.js";
import { type ApiHarness, startApi } from "./support.js";

/** What the API Lambda may answer: 6 MB (6,291,456 bytes), its envelope and headers included. */
const LAMBDA_RESPONSE_BYTES = 6 * 1024 * 1024;
/**
 * Each job of a batch (serialized) is held to a create's body, the 64 KiB payload and 16 KiB more,
 * and the batch's body to 25 of those and the `{"jobs": […]}` around them.
 */
const JOB_BYTES = 64 * 1024 + 16 * 1024;

/**
 * The largest batch the API accepts: 25 jobs, each as large as a create's body allows, its payload
 * and target headers made of quotes, which JSON escapes once in the answer and the Lambda response
 * (a JSON string) escapes again. Every write and every answer stays within DynamoDB's and Lambda's
 * limits.
 */
describe("POST /jobs:batch at its largest", () => {
  let api: ApiHarness;
  beforeAll(async () => {
    api = await startApi();
  });
  afterAll(() => api.close());

  /** An http job of `JOB_BYTES` serialized, or just under: a 64 KiB payload, headers for the rest. */
  const largestJob = (i: number) => {
    const job = {
      name: `${i}`.padEnd(200, "n"),
      type: "http",
      schedule: { cron: "*/5 * * * *", timezone: "America/Argentina/ComodRivadavia" },
      payload: '"'.repeat(32_767),
      target: { url: "https://example.com/hook", headers: {} as Record<string, string> },
    };
    for (let h = 10; h < 60; h++) {
      const room = JOB_BYTES - Buffer.byteLength(JSON.stringify(job)) - `,"x-h-${h}":""`.length;
      if (room < 2) break;
      job.target.headers[`x-h-${h}`] = '"'.repeat(Math.min(4_096, Math.floor(room / 2)));
    }
    return job;
  };

  it("creates 25 jobs of the largest body, and answers the batch and the listing within Lambda's 6 MB", async () => {
    const jobs = Array.from({ length: 25 }, (_, i) => largestJob(i));
    for (const job of jobs) {
      expect(Buffer.byteLength(JSON.stringify(job))).toBeGreaterThan(JOB_BYTES - 8);
      expect(Buffer.byteLength(JSON.stringify(job))).toBeLessThanOrEqual(JOB_BYTES);
    }
    const reply = await api.call("POST", "/jobs:batch", { body: { jobs } });
    expect(reply.status, reply.text.slice(0, 300)).toBe(200);
    const results = (reply.body as { results: { status: number }[] }).results;
    expect(results.map((r) => r.status)).toEqual(jobs.map(() => 201));
    // The answer as the Lambda response carries it: a JSON string.
    const answered = Buffer.byteLength(JSON.stringify(reply.text));
    expect(answered).toBeLessThan(LAMBDA_RESPONSE_BYTES - 64 * 1024);

    const listed = await api.call("GET", "/jobs?limit=100");
    const page = JobPageSchema.parse(listed.body);
    expect(page.items).toHaveLength(25);
    expect(Buffer.byteLength(JSON.stringify(listed.text))).toBeLessThan(LAMBDA_RESPONSE_BYTES);
  }, 60_000);
});
