import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BatchResultsSchema, JobPageSchema } from "../../shared/api/schemas/jobs.js";
import { fuzzSeed } from "../support/fuzz-scale.js";
import { type ApiHarness, laterJob, startApi } from "./support.js";

/**
 * The cursors of `GET /jobs` under a status filter, whose pages read at most 100 jobs and so come
 * back short or empty with a cursor (docs/api.md): over 500 jobs, whatever `limit` each page
 * asks for and whatever is deleted between pages, every job of the status is listed exactly once,
 * newest first, and none is skipped. 500 is five times a page's bound of 100 reads, and the
 * paused jobs' runs recur every 97 jobs (six of them), so a listing still crosses that bound page
 * after page and meets every gap the pattern makes; the bounds are counts per page, not per
 * listing, and 1,000 jobs (twice the set-up's requests and every listing's pages) met no other.
 * A failure prints its seed; FUZZ_SEED=<seed> replays the limits and deletes it drew.
 */
let api: ApiHarness;
/** Each job's status as the test set it; a deleted job leaves. */
const statusOf = new Map<string, string>();

beforeAll(async () => {
  api = await startApi();
  for (let batch = 0; batch < 20; batch++) {
    const reply = await api.call("POST", "/jobs:batch", {
      body: { jobs: Array.from({ length: 25 }, () => laterJob()) },
    });
    expect(reply.status, reply.text).toBe(200);
    for (const result of BatchResultsSchema.parse(reply.body).results) {
      if (result.job) statusOf.set(result.job.id, "active");
    }
  }
  // Paused and cancelled jobs in runs and gaps of every length, some more than a page's reads apart.
  const ids = [...statusOf.keys()].sort();
  for (const [index, id] of ids.entries()) {
    const status = index % 97 < 3 ? "paused" : index % 13 === 0 ? "cancelled" : null;
    if (status === null) continue;
    const action = status === "paused" ? "pause" : "cancel";
    const reply = await api.call("POST", `/jobs/${id}/${action}`);
    expect(reply.status, reply.text).toBe(200);
    statusOf.set(id, status);
  }
}, 300_000);
afterAll(() => api.close());

const expectedOf = (status: string | null) =>
  [...statusOf]
    .filter(([, s]) => status === null || s === status)
    .map(([id]) => id)
    .sort()
    .reverse();

describe("GET /jobs cursors under a status filter", () => {
  it("list every job of the status exactly once, newest first, whatever the limits and deletes between pages; an unfiltered page is full", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom<string | null>("paused", "cancelled", "active", null),
        fc.array(fc.integer({ min: 1, max: 100 }), { minLength: 1, maxLength: 8 }),
        fc.boolean(),
        async (status, limits, deleteBetween) => {
          const listed: string[] = [];
          const deletedAhead = new Set<string>();
          let cursor: string | null = null;
          let pages = 0;
          do {
            const limit = limits[pages % limits.length] ?? 100;
            const query = `${status === null ? "" : `status=${status}&`}limit=${limit}${cursor === null ? "" : `&cursor=${encodeURIComponent(cursor)}`}`;
            const reply = await api.call("GET", `/jobs?${query}`);
            expect(reply.status, reply.text).toBe(200);
            const page = JobPageSchema.parse(reply.body);
            expect(page.items.length).toBeLessThanOrEqual(limit);
            // Unfiltered, nothing deleted, a page with a cursor is full: the bound drops none.
            if (status === null && !deleteBetween && page.nextCursor !== null) {
              expect(page.items.length).toBe(limit);
            }
            listed.push(...page.items.map((job) => job.id));
            cursor = page.nextCursor;
            pages++;
            if (deleteBetween && cursor !== null) {
              // A job of the status not listed yet, and one just listed: neither changes the rest.
              const ahead = expectedOf(status).find(
                (id) => !listed.includes(id) && !deletedAhead.has(id),
              );
              const behind = listed.at(-1);
              for (const id of [ahead, behind]) {
                if (id === undefined || !statusOf.has(id)) continue;
                const deleted = await api.call("DELETE", `/jobs/${id}`);
                expect(deleted.status, deleted.text).toBe(204);
                statusOf.delete(id);
                if (id === ahead) deletedAhead.add(id);
              }
            }
          } while (cursor !== null && pages < 1_000);
          expect(cursor).toBeNull();
          expect(new Set(listed).size, "a job listed twice").toBe(listed.length);
          // Deletions behind the cursor were listed before; those ahead are not listed.
          const stillThere = listed.filter((id) => statusOf.has(id));
          expect(stillThere).toEqual(expectedOf(status));
          for (const id of deletedAhead) expect(listed).not.toContain(id);
        },
      ),
      { numRuns: 12, seed: fuzzSeed() },
    );
  }, 600_000);
});
