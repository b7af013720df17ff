import { PutCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JobPageSchema } from "../../shared/api/schemas/jobs.js";
import { RunPageSchema } from "../../shared/api/schemas/runs.js";
import { newJobId } from "../../shared/keys.js";
import { endRunAsSeen } from "../../shared/storage/run-end-unowned.js";
import { queuedRun } from "../../shared/storage/runs.js";
import { type ApiHarness, expectError, KEY_B, laterJob, startApi, TENANT_A } from "./support.js";

/**
 * The jobs and dead-letters cursors name their index key and the table key of the item they
 * stopped at (shared/api/pages.ts): every cursor a listing hands out pages on to the end, and one
 * made up or altered is a 400 naming cursor, never a 500: its index key must be one the listing
 * writes, not only name the table key it carries (what DynamoDB makes of a start key that names
 * no item, or of a lone surrogate, is not for the caller to find out).
 */
let api: ApiHarness;
beforeAll(async () => {
  api = await startApi();
});
afterAll(() => api.close());

const encode = (key: Record<string, string>) =>
  Buffer.from(JSON.stringify(key)).toString("base64url");

/** A DEAD run of `jobId`, ended by the storage's own ending (its deadSk as every ending writes it). */
async function deadRun(tenantId: string, jobId: string, attempt: number, finishedAt: Date) {
  const { engine } = api.fixture;
  const scheduledFor = new Date(Date.UTC(2026, 11, 3, 9, 30));
  const { run, item } = queuedRun(
    {
      jobId,
      tenantId,
      scheduledFor,
      dueAt: scheduledFor,
      attempt,
      priority: "normal",
      jobVersion: 1,
    },
    finishedAt,
    engine.settings,
  );
  await engine.doc.send(new PutCommand({ TableName: engine.tables.runs, Item: item }));
  const dead = await endRunAsSeen(engine, run, "DEAD", "failed for good", finishedAt);
  if (dead === null) throw new Error(`run ${run.runId} not ended`);
  return dead.runId;
}

/** Every item of a listing, page by page, each page `limit` long. */
async function pageThrough(path: string, limit: number, key?: string): Promise<string[]> {
  const ids: string[] = [];
  let cursor: string | null = null;
  for (let page = 0; page < 100; page++) {
    const query: string = `limit=${limit}${cursor ? `&cursor=${cursor}` : ""}`;
    const reply = await api.call("GET", `${path}${path.includes("?") ? "&" : "?"}${query}`, {
      ...(key ? { key } : {}),
    });
    expect(reply.status, reply.text).toBe(200);
    const parsed = (/^\/jobs(\?|$)/.test(path) ? JobPageSchema : RunPageSchema).parse(reply.body);
    ids.push(...parsed.items.map((item) => ("runId" in item ? item.runId : item.id)));
    cursor = parsed.nextCursor;
    if (cursor === null) return ids;
  }
  throw new Error(`${path} did not end`);
}

describe("dead-letters cursors", () => {
  it("page to the end over several jobs, tenants, attempts past 9 and jobs deleted or never there", async () => {
    // One instant for many endings: their deadSk differ only in the run id after it.
    const at = new Date(Date.UTC(2026, 11, 3, 10, 0));
    const later = new Date(at.getTime() + 1000);
    const jobs = [newJobId(at), newJobId(at), `job-with-dashes-${newJobId(at)}`];
    const mine: string[] = [];
    for (const [i, jobId] of jobs.entries()) {
      for (const attempt of [1, 9, 10, 12, 100, 9999]) {
        mine.push(await deadRun(TENANT_A, jobId, attempt, i === 0 ? later : at));
      }
    }
    const theirs: string[] = [];
    for (const attempt of [1, 10])
      theirs.push(await deadRun("tenant-b", newJobId(at), attempt, at));

    for (const limit of [1, 2, 7]) {
      const listed = await pageThrough("/dead-letters", limit);
      expect([...listed].sort()).toEqual([...mine].sort());
      expect(new Set(listed).size).toBe(listed.length);
    }
    expect([...(await pageThrough("/dead-letters", 1, KEY_B))].sort()).toEqual([...theirs].sort());
  });

  const runId = "01M8XKJWK02XZ7528W23E0KWCE-20261203T093000000-12";
  const tableKey = {
    pk: "JOB#01M8XKJWK02XZ7528W23E0KWCE",
    sk: "RUN#2026-12-03T09:30:00.000Z#0012",
  };
  it.each([
    ["an empty finishedAt", `#${runId}`],
    ["extra '#' before the run id", `a#b#2026-12-03T10:00:00.000Z#${runId}`],
    ["no '#' at all", runId],
    ["a unicode finishedAt", `2026-12-03T10:00:00.000Zé#${runId}`],
    ["a lone surrogate", `\ud800#${runId}`],
    ["an empty run id", "2026-12-03T10:00:00.000Z#"],
    ["a run id with a trailing '#'", `2026-12-03T10:00:00.000Z#${runId}#`],
    [
      "a run id with attempt 0",
      "2026-12-03T10:00:00.000Z#01M8XKJWK02XZ7528W23E0KWCE-20261203T093000000-0",
    ],
  ])("a crafted deadSk (%s) is a 400 naming cursor", async (_name, deadSk) => {
    const reply = await api.call(
      "GET",
      `/dead-letters?cursor=${encode({ deadPk: `DEAD#${TENANT_A}`, deadSk, ...tableKey })}`,
    );
    expectError(reply, 400, { field: "cursor" });
  });
});

describe("jobs cursors", () => {
  it("page to the end, unfiltered and under each status filter", async () => {
    const ids: string[] = [];
    for (let i = 0; i < 7; i++) {
      const reply = await api.call("POST", "/jobs", { body: laterJob() });
      expect(reply.status, reply.text).toBe(201);
      ids.push((reply.body as { id: string }).id);
    }
    const cancelled = ids.filter((_, i) => i % 3 === 0);
    for (const id of cancelled) {
      expect((await api.call("POST", `/jobs/${id}/cancel`)).status).toBe(200);
    }
    for (const limit of [1, 3]) {
      expect((await pageThrough("/jobs", limit)).filter((id) => ids.includes(id)).sort()).toEqual(
        [...ids].sort(),
      );
      expect(
        (await pageThrough("/jobs?status=cancelled", limit))
          .filter((id) => ids.includes(id))
          .sort(),
      ).toEqual([...cancelled].sort());
      expect(
        (await pageThrough("/jobs?status=active", limit)).filter((id) => ids.includes(id)).sort(),
      ).toEqual(ids.filter((id) => !cancelled.includes(id)).sort());
    }
  });

  it.each([
    ["a lone surrogate", "\ud800"],
    ["unicode", "é"],
    ["a '#'", "a#b"],
    ["a job id past 64 characters", "a".repeat(65)],
  ])(
    "a crafted tenantSk (%s) naming its own table key is a 400 naming cursor",
    async (_name, tenantSk) => {
      const reply = await api.call(
        "GET",
        `/jobs?cursor=${encode({ tenantPk: `TENANT#${TENANT_A}`, tenantSk, pk: `JOB#${tenantSk}`, sk: "JOB" })}`,
      );
      expectError(reply, 400, { field: "cursor" });
    },
  );
});

describe("runs cursors", () => {
  it("page to the end, unfiltered and by status, over attempts past 9", async () => {
    const jobId = newJobId(new Date());
    const at = new Date(Date.UTC(2026, 11, 3, 10, 0));
    const ids: string[] = [];
    for (const attempt of [1, 9, 10, 12, 100, 9999])
      ids.push(await deadRun(TENANT_A, jobId, attempt, at));
    for (const limit of [1, 4]) {
      expect([...(await pageThrough(`/jobs/${jobId}/runs`, limit))].sort()).toEqual(
        [...ids].sort(),
      );
      expect([...(await pageThrough(`/jobs/${jobId}/runs?status=dead`, limit))].sort()).toEqual(
        [...ids].sort(),
      );
    }
  });

  const jobId = newJobId(new Date());
  it.each([
    ["a lone surrogate", "RUN#2\ud800"],
    ["unicode", "RUN#2026-12-03T09:30:00.000Zé#0001"],
    ["no attempt", "RUN#2026-12-03T09:30:00.000Z"],
    ["attempt 0", "RUN#2026-12-03T09:30:00.000Z#0000"],
    ["a five-digit attempt", "RUN#2026-12-03T09:30:00.000Z#00001"],
    ["an extra '#'", "RUN#2026-12-03T09:30:00.000Z#x#0001"],
    ["an impossible date", "RUN#2026-02-30T09:30:00.000Z#0001"],
  ])("a crafted sk (%s) is a 400 naming cursor", async (_name, sk) => {
    await deadRun(TENANT_A, jobId, 1, new Date(Date.UTC(2026, 11, 3, 10, 0)));
    const reply = await api.call(
      "GET",
      `/jobs/${jobId}/runs?cursor=${encode({ pk: `JOB#${jobId}`, sk })}`,
    );
    expectError(reply, 400, { field: "cursor" });
  });
});
