import { afterEach, describe, expect, it } from "vitest";
import { JobSchema } from "../../shared/api/schemas/jobs.js";
import { PreviewSchema } from "../../shared/api/schemas/previews.js";
import { tickOnce } from "../../shared/dispatch/tick.js";
import { type ApiHarness, startApi } from "../api/support.js";

/**
 * A leap-day schedule with maxRuns, end to end: its occurrences are four years apart (eight across
 * 2100), so its second run is claimed by a pass four years after its first, past any backlog a
 * pass reads, by the recent sweep alone. The preview, the job's count and its completion must
 * agree with what the passes queue.
 */
/**
 * The clock reads `ms` at `since` (the machine's clock) and runs on from there: the pass four years
 * on reads its backlog for half a lease of this clock's time, where a clock standing still would
 * let it read its whole budget of empty buckets (two days of them, most of the file's time).
 */
let reading = { ms: 0, since: 0 };
const setClock = (at: string) => {
  reading = { ms: Date.parse(at), since: Date.now() };
};
let api: ApiHarness | undefined;
afterEach(async () => {
  await api?.close();
  api = undefined;
});

async function started(at: string): Promise<ApiHarness> {
  setClock(at);
  api = await startApi({
    clock: () => new Date(reading.ms + Date.now() - reading.since),
    // A short lease: the pass four years on reads its backlog of empty buckets for half of one.
    settings: { shardCount: 1, maxShardCount: 1, leaseMs: 6_000 },
  });
  return api;
}

async function jobOf(harness: ApiHarness, id: string) {
  const reply = await harness.call("GET", `/jobs/${id}`);
  expect(reply.status, reply.text).toBe(200);
  return JobSchema.parse(reply.body);
}

async function previewOf(harness: ApiHarness, id: string): Promise<string[]> {
  const reply = await harness.call("GET", `/jobs/${id}/preview?count=5`);
  expect(reply.status, reply.text).toBe(200);
  return PreviewSchema.parse(reply.body).occurrences.map((o) => o.utc);
}

async function runsOf(harness: ApiHarness, id: string): Promise<string[]> {
  return (await harness.fixture.runs())
    .filter((r) => r.jobId === id)
    .map((r) => `${r.scheduledFor} ${r.status}`)
    .sort();
}

describe("0 0 29 2 * with maxRuns 2", () => {
  it("runs on 29 February 2028 and 2032, the preview showing each, and completes with the second", async () => {
    const harness = await started("2028-02-28T23:58:00Z");
    const reply = await harness.call("POST", "/jobs", {
      body: { type: "noop", schedule: { cron: "0 0 29 2 *", timezone: "UTC" }, maxRuns: 2 },
    });
    expect(reply.status, reply.text).toBe(201);
    const { id } = JobSchema.parse(reply.body);
    expect(await previewOf(harness, id)).toEqual([
      "2028-02-29T00:00:00.000Z",
      "2032-02-29T00:00:00.000Z",
    ]);
    await tickOnce(harness.fixture.engine, "leap");
    expect(await runsOf(harness, id)).toEqual(["2028-02-29T00:00:00.000Z QUEUED"]);
    expect(await jobOf(harness, id)).toMatchObject({
      status: "active",
      nextRunAt: "2032-02-29T00:00:00.000Z",
      occurrencesQueued: 1,
    });

    setClock("2028-03-01T12:00:00Z");
    await tickOnce(harness.fixture.engine, "leap");
    expect(await previewOf(harness, id)).toEqual(["2032-02-29T00:00:00.000Z"]);

    // The next pass comes four years on, five minutes before the occurrence.
    setClock("2032-02-28T23:55:00Z");
    await tickOnce(harness.fixture.engine, "leap");
    expect(await runsOf(harness, id)).toEqual([
      "2028-02-29T00:00:00.000Z QUEUED",
      "2032-02-29T00:00:00.000Z QUEUED",
    ]);
    expect(await jobOf(harness, id)).toMatchObject({
      status: "completed",
      nextRunAt: null,
      occurrencesQueued: 2,
    });
    expect(await previewOf(harness, id)).toEqual([]);
  }, 120_000);
});
