import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SchedulerClient } from "../../client/index.js";
import { type SandboxProcess, spawnSandbox } from "../support/sandbox-process.js";

/**
 * The client's listing under a status filter: a page of GET /jobs reads at most 100 jobs, so one
 * may come back empty with a cursor (docs/api.md), and `jobs.list` goes on past it.
 */
const KEY = "filtered-pages-key";
let sandbox: SandboxProcess;
let client: SchedulerClient;

beforeAll(async () => {
  sandbox = await spawnSandbox({
    prefix: `filtered-${randomBytes(4).toString("hex")}`,
    env: { SCHEDULER_API_KEYS: `${KEY}=filtered-tenant` },
  });
  client = new SchedulerClient({ baseUrl: sandbox.url, auth: { kind: "bearer", key: KEY } });
}, 120_000);

afterAll(async () => {
  await sandbox?.stop();
}, 30_000);

describe("jobs.list under a status filter", () => {
  it("goes on past empty pages with a cursor to the one paused job, the oldest of 201", async () => {
    const ids: string[] = [];
    for (const size of [25, 25, 25, 25, 25, 25, 25, 25, 1]) {
      const results = await client.jobs.createBatch(
        Array.from({ length: size }, () => ({
          type: "noop",
          schedule: { runAt: "2030-01-01T00:00:00Z" },
        })),
      );
      for (const result of results) if (result.job) ids.push(result.job.id);
    }
    expect(ids).toHaveLength(201);
    const oldest = [...ids].sort()[0] ?? "";
    await client.jobs.handle(oldest).pause();
    // Newest first, a page of 100 reads 100 jobs: the first two pages are empty, with a cursor.
    const first = await client.jobs.page({ status: "paused", limit: 100 });
    expect(first.items).toEqual([]);
    expect(first.nextCursor).not.toBeNull();
    const listed: string[] = [];
    for await (const job of client.jobs.list({ status: "paused", pageSize: 100 })) {
      listed.push(job.id);
    }
    expect(listed).toEqual([oldest]);
  });

  it("goes on when each job listed is deleted before the next page: no cursor is asked for twice", async () => {
    const results = await client.jobs.createBatch(
      Array.from({ length: 7 }, () => ({
        type: "noop",
        schedule: { runAt: "2030-01-01T00:00:00Z" },
      })),
    );
    const made = results.flatMap((result) => (result.job ? [result.job.id] : []));
    expect(made).toHaveLength(7);
    for (const id of made.slice(0, 6)) await client.jobs.handle(id).pause();
    // Pages of 2 under the filter, each job deleted as it is listed, the next page asked for after
    // a cursor naming a job no longer there.
    const listed: string[] = [];
    for await (const job of client.jobs.list({ status: "paused", pageSize: 2 })) {
      listed.push(job.id);
      await client.jobs.handle(job.id).delete();
    }
    expect(listed).toEqual(expect.arrayContaining(made.slice(0, 6)));
    expect(new Set(listed).size, "a job listed twice").toBe(listed.length);
    const left: string[] = [];
    for await (const job of client.jobs.list({ status: "paused" })) left.push(job.id);
    expect(left).toEqual([]);
  });
});
