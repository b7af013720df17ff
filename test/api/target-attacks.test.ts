import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BatchResultsSchema, JobPageSchema, JobSchema } from "../../shared/api/schemas/jobs.js";
import { createJob } from "../../shared/jobs/index.js";
import { testJob } from "../support/engine-fixture.js";
import { type ApiHarness, createdVia, expectError, jobVia, laterJob, startApi } from "./support.js";

/**
 * What a tenant can put in a job's target that the worker's fetch can never deliver to: each
 * accepted target is one of its tenant's runs failing every attempt to the end, on the workers
 * every tenant shares.
 */
let api: ApiHarness;
beforeAll(async () => {
  api = await startApi();
});
afterAll(() => api.close());

const httpJob = (url: string, overrides: Record<string, unknown> = {}) =>
  laterJob({ type: "http", target: { url }, ...overrides });

const jobCount = async () =>
  JobPageSchema.parse((await api.call("GET", "/jobs?limit=100")).body).items.length;

describe("a target on a port fetch blocks (the Fetch standard's bad ports)", () => {
  it("is a 400 naming target.url at create, and nothing is written", async () => {
    const before = await jobCount();
    const error = expectError(
      await api.call("POST", "/jobs", { body: httpJob("https://receiver.example:6000/hook") }),
      400,
      { code: "validation_failed", field: "target.url" },
    );
    expect(error.message).toMatch(/port 6000, which fetch blocks/);
    expect(await jobCount()).toBe(before);
  });

  it("is a 400 naming target.url at an edit, and the job is left as it was", async () => {
    const job = await createdVia(api, httpJob("https://receiver.example/hook"));
    expectError(
      await api.call("PATCH", `/jobs/${job.id}`, {
        body: { target: { url: "https://receiver.example:25/hook" } },
        headers: { "If-Match": `"${job.version}"` },
      }),
      400,
      { field: "target.url" },
    );
    expect(await jobVia(api, job.id)).toEqual(job);
  });

  it("is refused alone in a batch, naming the item's target.url", async () => {
    const reply = await api.call("POST", "/jobs:batch", {
      body: {
        jobs: [
          httpJob("https://receiver.example/hook"),
          httpJob("https://receiver.example:10080/hook"),
        ],
      },
    });
    expect(reply.status, reply.text).toBe(200);
    const { results } = BatchResultsSchema.parse(reply.body);
    expect(results.map((r) => [r.index, r.status])).toEqual([
      [0, 201],
      [1, 400],
    ]);
    expect(results[1]?.error).toMatchObject({ code: "validation_failed", field: "target.url" });
    JobSchema.parse(results[0]?.job);
  });
});

describe("a target whose host no DNS name can be (a label past 63 characters, an empty one, 254 in all)", () => {
  const label = (chars: number) => "a".repeat(chars);
  const longest = [label(63), label(63), label(63), label(61)].join(".");

  it.each([`${label(64)}.example`, "receiver..example", ".receiver.example", `${longest}b`])(
    "is a 400 naming target.url at create, and nothing is written: %s",
    async (host) => {
      const before = await jobCount();
      const error = expectError(
        await api.call("POST", "/jobs", { body: httpJob(`https://${host}/hook`) }),
        400,
        { code: "validation_failed", field: "target.url" },
      );
      expect(error.message).toMatch(/an IP address or a DNS name/);
      expect(await jobCount()).toBe(before);
    },
  );

  it.each([
    `${label(63)}.example`,
    longest,
    `${longest}.`,
    "receiver.example.",
    "bücher.example",
    "a_b.example",
  ])("leaves a host DNS can hold alone: %s", async (host) => {
    const job = await createdVia(api, httpJob(`https://${host}/hook`));
    expect(job.target?.url).toBe(`https://${host}/hook`);
  });

  it("is a 400 naming target.url at an edit, and the job is left as it was", async () => {
    const job = await createdVia(api, httpJob("https://receiver.example/hook"));
    expectError(
      await api.call("PATCH", `/jobs/${job.id}`, {
        body: { target: { url: "https://receiver..example/hook" } },
        headers: { "If-Match": `"${job.version}"` },
      }),
      400,
      { field: "target.url" },
    );
    expect(await jobVia(api, job.id)).toEqual(job);
  });
});

describe("a job stored with such a target before the API refused it", () => {
  // Read as sent: the response's schema (JobSchema) holds the create's checks, which this job
  // predates.
  const jobOf = (body: unknown) => body as { version: number; name: string; target: unknown };

  it.each(["https://receiver.example:6000/hook", "https://receiver..example/hook"])(
    "is read and edited as any other, its target kept: %s",
    async (url) => {
      const { job: stored } = await createJob(
        api.fixture.engine,
        testJob({
          type: "http",
          target: { url },
          schedule: { runAt: new Date(Date.now() + 86_400_000).toISOString() },
        }),
      );
      const read = await api.call("GET", `/jobs/${stored.jobId}`);
      expect(read.status, read.text).toBe(200);
      expect(jobOf(read.body).target).toEqual({ url });
      const renamed = await api.call("PATCH", `/jobs/${stored.jobId}`, {
        body: { name: "renamed" },
        headers: { "If-Match": `"${jobOf(read.body).version}"` },
      });
      expect(renamed.status, renamed.text).toBe(200);
      expect(jobOf(renamed.body)).toMatchObject({ name: "renamed", target: { url } });
    },
  );
});
