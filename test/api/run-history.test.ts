import { PutCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JobSchema } from "../../shared/api/schemas/jobs.js";
import { PreviewSchema } from "../../shared/api/schemas/previews.js";
import { type RunDto, RunPageSchema } from "../../shared/api/schemas/runs.js";
import { finishRun } from "../../shared/storage/run-finish.js";
import { startRun } from "../../shared/storage/run-start.js";
import { skippedRun } from "../../shared/storage/runs.js";
import { type ApiHarness, expectError, KEY_B, startApi } from "./support.js";

/**
 * Searchable run history: GET /jobs/{id}/runs by status and occurrence range,
 * cursors bound to their filter, and previews from a given instant.
 */
const T0 = Date.parse("2030-01-01T00:00:00.000Z");
const at = (seconds: number) => new Date(T0 + seconds * 1000).toISOString();
let now = new Date(T0);
let api: ApiHarness;
let jobId: string;

/** Seconds 0–49 of the first minute succeeded, 50–59 failed; 60 on are queued (the lookahead). */
const SUCCEEDED = 50;
const FAILED = 10;
/** One occurrence long before the others, skipped, so a rare status lies behind every queued run. */
const SKIPPED_AT = "2029-12-31T00:00:00.000Z";

beforeAll(async () => {
  api = await startApi({ clock: () => now, settings: { lookaheadMs: 600_000 } });
  const created = await api.call("POST", "/jobs", {
    body: { type: "noop", schedule: { cron: "* * * * * *", timezone: "UTC" } },
  });
  expect(created.status, created.text).toBe(201);
  jobId = JobSchema.parse(created.body).id;
  const runs = (await api.fixture.runs()).filter((run) => run.jobId === jobId);
  const firstMinute = runs
    .filter((run) => run.scheduledFor < at(60))
    .sort((a, b) => a.scheduledFor.localeCompare(b.scheduledFor));
  expect(firstMinute).toHaveLength(SUCCEEDED + FAILED);
  // A minute later, the first minute's runs have ended; hundreds of later occurrences wait queued.
  now = new Date(T0 + 60_000);
  for (const [i, run] of firstMinute.entries()) {
    const started = await startRun(api.fixture.engine, run, "w", now);
    if (started.kind !== "started") throw new Error(`not started: ${started.kind}`);
    const status = i < SUCCEEDED ? "SUCCEEDED" : "FAILED";
    await finishRun(api.fixture.engine, started.run, { status, ran: true, tracked: false }, now);
  }
  const skipped = skippedRun(
    {
      jobId,
      tenantId: runs[0]?.tenantId ?? "",
      scheduledFor: new Date(SKIPPED_AT),
      dueAt: new Date(SKIPPED_AT),
      attempt: 1,
      priority: "normal",
      jobVersion: 1,
    },
    "a test's skipped occurrence",
    now,
    api.fixture.engine.settings,
  );
  await api.fixture.engine.doc.send(
    new PutCommand({ TableName: api.fixture.engine.tables.runs, Item: skipped }),
  );
});
afterAll(() => api.close());

async function page(query: string, key?: string) {
  const reply = await api.call("GET", `/jobs/${jobId}/runs?${query}`, key ? { key } : {});
  expect(reply.status, reply.text).toBe(200);
  return RunPageSchema.parse(reply.body);
}

/** Every page of a listing, following nextCursor. */
async function all(query: string): Promise<{ runs: RunDto[]; pages: number }> {
  const runs: RunDto[] = [];
  let cursor: string | null = null;
  let pages = 0;
  do {
    const suffix: string = cursor === null ? "" : `&cursor=${encodeURIComponent(cursor)}`;
    const next = await page(`${query}${suffix}`);
    runs.push(...next.items);
    cursor = next.nextCursor;
    pages++;
  } while (cursor !== null && pages < 100);
  return { runs, pages };
}

const times = (runs: readonly RunDto[]) => runs.map((run) => run.scheduledFor);
const newestFirst = (from: number, count: number) =>
  Array.from({ length: count }, (_, i) => at(from + count - 1 - i));

describe("GET /jobs/{id}/runs, a job that fires every second", () => {
  it("unfiltered, the first page is future queued runs: the finished ones are buried", async () => {
    const first = await page("limit=20");
    expect(first.items.every((run) => run.status === "queued")).toBe(true);
    const queued = (await api.fixture.runs()).filter(
      (run) => run.jobId === jobId && run.status === "QUEUED",
    );
    expect(queued.length).toBeGreaterThanOrEqual(500);
  });

  it("?status=succeeded shows the newest succeeded runs on the first page", async () => {
    const first = await page("status=succeeded&limit=20");
    expect(times(first.items)).toEqual(newestFirst(SUCCEEDED - 20, 20));
    expect(first.items.every((run) => run.status === "succeeded")).toBe(true);
    expect(first.nextCursor).not.toBeNull();
  });

  it("?to=now shows the latest finished occurrences on the first page", async () => {
    const first = await page(`to=${at(60)}&limit=5`);
    expect(times(first.items)).toEqual(newestFirst(55, 5));
    expect(first.items.every((run) => run.status === "failed")).toBe(true);
  });

  it("several statuses: any of them, newest first", async () => {
    const first = await page("status=failed,succeeded&limit=12");
    expect(times(first.items)).toEqual(newestFirst(48, 12));
    expect(first.items.map((run) => run.status)).toEqual([
      ...Array(FAILED).fill("failed"),
      "succeeded",
      "succeeded",
    ]);
  });

  it("a rare status behind hundreds of queued runs is found on the first page", async () => {
    const first = await page("status=skipped");
    expect(times(first.items)).toEqual([SKIPPED_AT]);
    expect(first.items[0]?.reason).toBe("a test's skipped occurrence");
    expect(first.nextCursor).toBeNull();
  });

  it("paging a status filter with cursors gives each matching run once, in order", async () => {
    const { runs, pages } = await all("status=succeeded&limit=7");
    expect(times(runs)).toEqual(newestFirst(0, SUCCEEDED));
    expect(pages).toBeGreaterThanOrEqual(Math.ceil(SUCCEEDED / 7));
    const queued = await all("status=queued&limit=100");
    expect(new Set(times(queued.runs)).size).toBe(queued.runs.length);
    expect(queued.runs.every((run) => run.status === "queued" && run.scheduledFor >= at(60))).toBe(
      true,
    );
  });

  it("from is inclusive, to exclusive; the range pages with cursors", async () => {
    const window = await page(`from=${at(10)}&to=${at(20)}`);
    expect(times(window.items)).toEqual(newestFirst(10, 10));
    const paged = await all(`from=${at(10)}&to=${at(20)}&limit=3`);
    expect(times(paged.runs)).toEqual(newestFirst(10, 10));
    const withOffset = await page(`from=2030-01-01T01:00:30%2B01:00&to=${at(35)}`);
    expect(times(withOffset.items)).toEqual(newestFirst(30, 5));
  });

  it("an offset's + written into the query unencoded (a curl line) reads as the offset, not a space", async () => {
    // Form decoding turns a query's "+" into a space: "…T01:00:30+01:00" arrives "…T01:00:30 01:00".
    const raw = await page("from=2030-01-01T01:00:30+01:00&to=2030-01-01T01:00:35+0100");
    expect(times(raw.items)).toEqual(newestFirst(30, 5));
    const preview = await api.call(
      "GET",
      `/jobs/${jobId}/preview?count=1&from=2030-01-01T01:01:30+01:00`,
    );
    expect(preview.status, preview.text).toBe(200);
    // A preview starts at what the job still runs: from an instant after the clock (60 s).
    expect(PreviewSchema.parse(preview.body).occurrences[0]?.utc).toBe(at(90));
    // A space anywhere else is still no instant.
    const spaced = await api.call("GET", `/jobs/${jobId}/runs?from=2030-01-01+01:00:30Z`);
    expectError(spaced, 400, { field: "from" });
  });

  it("status and range together", async () => {
    const first = await page(`status=failed,queued&from=${at(55)}&to=${at(65)}`);
    expect(times(first.items)).toEqual(newestFirst(55, 10));
    expect(first.items.map((run) => run.status)).toEqual([
      ...Array(5).fill("queued"),
      ...Array(5).fill("failed"),
    ]);
  });

  it("finished statuses from a future instant: nothing, since no run started there", async () => {
    const future = await page(`status=succeeded,failed&from=${at(120)}`);
    expect(future).toEqual({ items: [], nextCursor: null });
    const queued = await page(`status=queued&from=${at(120)}&limit=3`);
    expect(times(queued.items)).toHaveLength(3);
  });

  it("a cursor is bound to its filters: reused with others it is a 400 naming cursor", async () => {
    const succeeded = await page("status=succeeded&limit=5");
    const unfiltered = await page("limit=5");
    const ranged = await page(`from=${at(10)}&to=${at(20)}&limit=5`);
    const misuse = [
      `status=failed&cursor=${succeeded.nextCursor}`,
      `cursor=${succeeded.nextCursor}`,
      `status=succeeded&cursor=${unfiltered.nextCursor}`,
      `from=${at(10)}&to=${at(21)}&cursor=${ranged.nextCursor}`,
    ];
    for (const query of misuse) {
      const reply = await api.call("GET", `/jobs/${jobId}/runs?${query}`);
      expect(expectError(reply, 400, { field: "cursor" }).message).toMatch(/other filters/);
    }
    // The filters it names are written as the caller writes them: statuses in lowercase.
    const named = await api.call("GET", `/jobs/${jobId}/runs?${misuse[0]}`);
    expect(expectError(named, 400, { field: "cursor" }).message).toContain(
      "was returned for other filters (status=succeeded) than these (status=failed)",
    );
    // The same filters, written another way, take the cursor.
    const again = await page(`status=succeeded&cursor=${succeeded.nextCursor}&limit=5`);
    expect(times(again.items)).toEqual(newestFirst(SUCCEEDED - 10, 5));
    const reordered = await page(`to=${at(20)}&from=${at(10)}&cursor=${ranged.nextCursor}`);
    expect(times(reordered.items)).toEqual(newestFirst(10, 5));
  });

  it("a cursor whose key lies outside the listing's range is a 400 naming cursor, not a 500", async () => {
    // A cursor is base64url JSON: a caller can write one in its own job's partition whose sort key
    // lies past the range the listing reads (DynamoDB refuses such a start key outright).
    const forge = (key: Record<string, string>) =>
      Buffer.from(JSON.stringify(key)).toString("base64url");
    const pk = `JOB#${jobId}`;
    const cases = [
      `cursor=${forge({ pk, sk: "RUN#~~" })}`,
      `from=${at(10)}&to=${at(20)}&cursor=${forge({ pk, sk: `RUN#${at(30)}#0001`, filter: `from=${at(10)}&to=${at(20)}` })}`,
      `from=${at(10)}&to=${at(20)}&cursor=${forge({ pk, sk: `RUN#${at(5)}#0001`, filter: `from=${at(10)}&to=${at(20)}` })}`,
    ];
    for (const query of cases) {
      const reply = await api.call("GET", `/jobs/${jobId}/runs?${query}`);
      expectError(reply, 400, { field: "cursor" });
    }
    // A cursor the listing returned, inside its range, still pages on.
    const ranged = await page(`from=${at(10)}&to=${at(20)}&limit=5`);
    const next = await page(`from=${at(10)}&to=${at(20)}&cursor=${ranged.nextCursor}`);
    expect(times(next.items)).toEqual(newestFirst(10, 5));
  });

  it("bad filters are a 400 naming the field, and another tenant gets 404", async () => {
    const cases: [string, string][] = [
      ["status=succeeded,finished", "status"],
      ["status=SUCCEEDED", "status"],
      ["status=", "status"],
      ["from=yesterday", "from"],
      ["from=2030-01-01T00:00:00", "from"],
      ["to=2030-02-30T00:00:00Z", "to"],
      [`from=${at(20)}&to=${at(20)}`, "to"],
      [`from=${at(21)}&to=${at(20)}`, "to"],
    ];
    for (const [query, field] of cases) {
      const reply = await api.call("GET", `/jobs/${jobId}/runs?${query}`);
      expectError(reply, 400, { code: "validation_failed", field });
    }
    const other = await api.call("GET", `/jobs/${jobId}/runs?status=succeeded`, { key: KEY_B });
    expectError(other, 404);
  });
});

describe("previews from an instant", () => {
  // New York springs forward on 2030-03-10: 02:30 does not exist that night.
  const schedule = { cron: "30 2 * * *", timezone: "America/New_York" };

  it("POST /schedules/preview from a DST night months ahead", async () => {
    const reply = await api.call("POST", "/schedules/preview", {
      body: { schedule, count: 3, from: "2030-03-09T00:00:00-05:00" },
    });
    expect(reply.status, reply.text).toBe(200);
    const preview = PreviewSchema.parse(reply.body);
    expect(preview.occurrences.map((o) => o.utc)).toEqual([
      "2030-03-09T07:30:00.000Z",
      "2030-03-10T07:30:00.000Z",
      "2030-03-11T06:30:00.000Z",
    ]);
    // 02:30 does not exist that night: it runs at the same offset into the new hour.
    expect(preview.occurrences.map((o) => o.local)).toEqual([
      "2030-03-09T02:30:00.000-05:00",
      "2030-03-10T03:30:00.000-04:00",
      "2030-03-11T02:30:00.000-04:00",
    ]);
  });

  it("GET /jobs/{id}/preview?from= previews a stored job from that instant; default now", async () => {
    const created = await api.call("POST", "/jobs", { body: { type: "noop", schedule } });
    expect(created.status, created.text).toBe(201);
    const id = JobSchema.parse(created.body).id;
    const from = encodeURIComponent("2030-03-10T00:00:00-05:00");
    const reply = await api.call("GET", `/jobs/${id}/preview?count=2&from=${from}`);
    expect(reply.status, reply.text).toBe(200);
    expect(PreviewSchema.parse(reply.body).occurrences.map((o) => o.utc)).toEqual([
      "2030-03-10T07:30:00.000Z",
      "2030-03-11T06:30:00.000Z",
    ]);
    const byDefault = await api.call("GET", `/jobs/${id}/preview?count=1`);
    expect(PreviewSchema.parse(byDefault.body).occurrences.map((o) => o.utc)).toEqual([
      "2030-01-01T07:30:00.000Z",
    ]);
  });

  it("from counts to the second: its milliseconds do not pass over an occurrence in that second", async () => {
    const reply = await api.call("POST", "/schedules/preview", {
      body: { schedule, count: 1, from: "2030-03-09T02:30:00.500-05:00" },
    });
    expect(reply.status, reply.text).toBe(200);
    expect(PreviewSchema.parse(reply.body).occurrences.map((o) => o.utc)).toEqual([
      "2030-03-09T07:30:00.000Z",
    ]);
  });

  it("a bad from is a 400 naming from", async () => {
    const body = { schedule, from: "2030-03-10" };
    expectError(await api.call("POST", "/schedules/preview", { body }), 400, { field: "from" });
    const created = await api.call("POST", "/jobs", { body: { type: "noop", schedule } });
    const id = JobSchema.parse(created.body).id;
    const reply = await api.call("GET", `/jobs/${id}/preview?from=10000-01-01T00:00:00Z`);
    expectError(reply, 400, { field: "from" });
  });
});
