import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BatchResultsSchema, JobPageSchema } from "../../shared/api/schemas/jobs.js";
import { type ApiHarness, laterJob, startApi } from "./support.js";

/**
 * What one page of `GET /jobs` reads from the jobs table, which every tenant shares: a status
 * filter drops jobs after they are read, and a page that filled itself across reads read up to
 * ten times its limit, so one tenant's filtered listings could ask for ten times the read units
 * an unfiltered page of the same limit does (docs/architecture.md, Known limits).
 */
let api: ApiHarness;
const jobKeysRead: number[] = [];
const ids: string[] = [];

beforeAll(async () => {
  api = await startApi();
  for (let batch = 0; batch < 6; batch++) {
    const reply = await api.call("POST", "/jobs:batch", {
      body: { jobs: Array.from({ length: 25 }, () => laterJob()) },
    });
    expect(reply.status, reply.text).toBe(200);
    for (const result of BatchResultsSchema.parse(reply.body).results) {
      expect(result.status).toBe(201);
      if (result.job) ids.push(result.job.id);
    }
  }
  const jobsTable = api.fixture.engine.tables.jobs;
  api.fixture.engine.doc.middlewareStack.add(
    (next, context) => (args) => {
      if (context.commandName === "BatchGetItemCommand") {
        const input = args.input as { RequestItems?: Record<string, { Keys?: unknown[] }> };
        jobKeysRead.push(input.RequestItems?.[jobsTable]?.Keys?.length ?? 0);
      }
      return next(args);
    },
    { step: "initialize", name: "countJobReads" },
  );
});
afterAll(() => api.close());

describe("a page of jobs under a status filter", () => {
  it("reads at most as many jobs as an unfiltered page of 100, and its cursor resumes after them", async () => {
    // The oldest job is the only paused one: newest first, it is the last of the 150.
    const oldest = [...ids].sort()[0] ?? "";
    expect((await api.call("POST", `/jobs/${oldest}/pause`)).status).toBe(200);
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      jobKeysRead.length = 0;
      const query: string = cursor === null ? "" : `&cursor=${cursor}`;
      const reply = await api.call("GET", `/jobs?status=paused&limit=100${query}`);
      expect(reply.status, reply.text).toBe(200);
      const page = JobPageSchema.parse(reply.body);
      const read = jobKeysRead.reduce((sum, keys) => sum + keys, 0);
      expect(read, `page ${pages + 1}`).toBeLessThanOrEqual(100);
      seen.push(...page.items.map((job) => job.id));
      cursor = page.nextCursor;
      pages++;
    } while (cursor !== null && pages < 10);
    expect(seen).toEqual([oldest]);
  });
});
