import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BatchResultsSchema, JobSchema } from "../../shared/api/schemas/jobs.js";
import { type ApiHarness, KEY_B, laterJob, startApi } from "./support.js";

/**
 * What a batch create of `after` jobs reads of the jobs above their upstreams. One create reads that
 * chain (up to 81 jobs, whole items, consistently) to check it; a batch is one request of the
 * tenant's requestsPerSecond, and each of its 25 jobs read the chain again on its own, so one
 * request read up to 25 times what a create reads, from the table every tenant shares.
 */
let api: ApiHarness;
let jobReads = 0;

beforeAll(async () => {
  api = await startApi();
  api.fixture.engine.doc.middlewareStack.add(
    (next, context) => (args) => {
      const input = args.input as { Key?: { sk?: unknown } };
      if (context.commandName === "GetItemCommand" && input.Key?.sk === "JOB") jobReads++;
      return next(args);
    },
    { step: "initialize", name: "countJobGets" },
  );
});
afterAll(() => api.close());

/** A chain of `length` jobs, each after the one before; returns the last. */
async function chain(length: number): Promise<string> {
  let last = JobSchema.parse((await api.call("POST", "/jobs", { body: laterJob() })).body).id;
  for (let i = 1; i < length; i++) {
    const reply = await api.call("POST", "/jobs", {
      body: { type: "noop", schedule: { after: { jobs: [last] } } },
    });
    expect(reply.status, reply.text).toBe(201);
    last = JobSchema.parse(reply.body).id;
  }
  return last;
}

const dependentOf = (upstream: string) => ({
  type: "noop",
  schedule: { after: { jobs: [upstream] } },
});

describe("a batch of jobs after others", () => {
  it("reads the chain above a shared upstream once, not once per job", async () => {
    const head = await chain(10);
    jobReads = 0;
    const reply = await api.call("POST", "/jobs:batch", {
      body: { jobs: Array.from({ length: 25 }, () => dependentOf(head)) },
    });
    expect(reply.status, reply.text).toBe(200);
    const results = BatchResultsSchema.parse(reply.body).results;
    expect(results.map((r) => r.status)).toEqual(Array.from({ length: 25 }, () => 201));
    expect(jobReads).toBeLessThanOrEqual(10);
  });

  it("links every job of two batches at once after one upstream, and still refuses another tenant's upstream alone", async () => {
    const head = await chain(3);
    const foreign = await api.call("POST", "/jobs", { key: KEY_B, body: laterJob() });
    expect(foreign.status, foreign.text).toBe(201);
    const theirs = JobSchema.parse(foreign.body).id;
    // The same read of the chain is shared within each batch; the two batches read it each.
    const [first, second] = await Promise.all([
      api.call("POST", "/jobs:batch", {
        body: {
          jobs: [...Array.from({ length: 24 }, () => dependentOf(head)), dependentOf(theirs)],
        },
      }),
      api.call("POST", "/jobs:batch", {
        body: { jobs: Array.from({ length: 25 }, () => dependentOf(head)) },
      }),
    ]);
    expect(first?.status, first?.text).toBe(200);
    expect(second?.status, second?.text).toBe(200);
    const one = BatchResultsSchema.parse(first?.body).results;
    const two = BatchResultsSchema.parse(second?.body).results;
    expect(one.map((r) => r.status)).toEqual([...Array.from({ length: 24 }, () => 201), 400]);
    expect(one[24]?.error?.field).toBe("schedule.after.jobs");
    expect(two.map((r) => r.status)).toEqual(Array.from({ length: 25 }, () => 201));
    const created = [...one, ...two].flatMap((r) => (r.job ? [r.job.id] : []));
    const upstream = JobSchema.parse((await api.call("GET", `/jobs/${head}`)).body);
    expect([...upstream.dependents].sort()).toEqual(created.sort());
    // The other tenant's job gained no dependent.
    const other = JobSchema.parse((await api.call("GET", `/jobs/${theirs}`, { key: KEY_B })).body);
    expect(other.dependents).toEqual([]);
  });
});
