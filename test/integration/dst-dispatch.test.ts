import { DeleteCommand } from "@aws-sdk/lib-dynamodb";
import { afterEach, describe, expect, it } from "vitest";
import { JobSchema } from "../../shared/api/schemas/jobs.js";
import { PreviewSchema } from "../../shared/api/schemas/previews.js";
import { RunPageSchema } from "../../shared/api/schemas/runs.js";
import { dispatchShard, horizonOf } from "../../shared/dispatch/dispatcher.js";
import { tickOnce } from "../../shared/dispatch/tick.js";
import { scanDueEntriesBefore } from "../../shared/storage/due-entries.js";
import { shardLeaseKey } from "../../shared/storage/items.js";
import { type ApiHarness, startApi } from "../api/support.js";

/**
 * The DST rules as a tenant in the zone meets them end to end: a job created over the API, the
 * dispatcher's passes through the night the clocks change (at instants 10 minutes apart on a fixed
 * clock, on the emulators) and on to the day after's occurrence, the runs it queued read back over
 * the API. The schedule core's tests pin the rules on plain functions; here the claims (their
 * reach, the due entries' minute buckets, the job's next occurrence) must queue exactly the
 * occurrences the job's preview showed before the night: each once, none missing. The nights are
 * in 2027, ahead of the machine's clock, so no item's TTL has passed on DynamoDB Local.
 *
 * The file is CPU-bound, not waiting: a pass 10 minutes after the last is some 30 DynamoDB
 * requests, 26 of them a minute bucket's Query (the window, 10 swept again, 10 of the look-back),
 * each about a millisecond of CPU in this process (the SDK's work) and as much in DynamoDB Local's
 * JVM. So the passes are made only at the instants where one can claim something (`tickUntil`):
 * a case is some 50-320 requests, not 650-1,750. Run side by side, the cases only share the two
 * cores (262c947, reverted).
 */
const MINUTE = 60_000;
const TICK_MS = 10 * MINUTE;

let nowMs = 0;
let api: ApiHarness | undefined;
afterEach(async () => {
  await api?.close();
  api = undefined;
});

async function started(at: string): Promise<ApiHarness> {
  nowMs = Date.parse(at);
  api = await startApi({
    clock: () => new Date(nowMs),
    settings: { shardCount: 1, maxShardCount: 1 },
  });
  return api;
}

async function create(harness: ApiHarness, body: Record<string, unknown>) {
  const reply = await harness.call("POST", "/jobs", { body: { type: "noop", ...body } });
  expect(reply.status, reply.text).toBe(201);
  return JobSchema.parse(reply.body);
}

async function previewUtc(harness: ApiHarness, jobId: string, count: number): Promise<string[]> {
  const reply = await harness.call("GET", `/jobs/${jobId}/preview?count=${count}`);
  expect(reply.status, reply.text).toBe(200);
  return PreviewSchema.parse(reply.body).occurrences.map((o) => o.utc);
}

/** The minute of the bucket holding the shard's earliest due entry (its job's next), or null. */
async function earliestDueBucket(harness: ApiHarness): Promise<string | null> {
  let earliest: string | null = null;
  let from: Record<string, unknown> | undefined;
  do {
    // Before the last minute there is: every bucket.
    const page = await scanDueEntriesBefore(harness.fixture.engine, 0, "9999-12-31T23:59", from);
    for (const { key } of page.entries) {
      const minute = key.pk.slice("DUE#".length, "DUE#".length + 16);
      if (earliest === null || minute < earliest) earliest = minute;
    }
    from = page.nextKey;
  } while (from !== undefined);
  return earliest;
}

/**
 * Forgets where the shard's passes stopped (its lease item), as for a shard no pass has completed
 * on: the next pass finds its backlog by one strongly consistent scan of every due entry before its
 * window, however old, instead of reading each minute bucket since the last pass's line.
 */
async function forgetShardPosition(harness: ApiHarness): Promise<void> {
  const { engine } = harness.fixture;
  await engine.doc.send(
    new DeleteCommand({ TableName: engine.tables.jobs, Key: shardLeaseKey(0) }),
  );
}

/**
 * The dispatcher's pass over the one shard (a tick, tickOnce, without the reaper after it) at
 * instants TICK_MS apart from the clock's reading up to `until`, made only where it can claim
 * something, and at the last instant. With one job the shard's due entries are its own, and a pass
 * whose buckets (the backlog since the passes' line, the window up to its horizon, the look-back
 * behind the line) hold none claims nothing and only moves the line on. So a pass is made at the
 * first instant whose horizon reaches the bucket of the shard's earliest due entry (a claim files
 * the next), and at the last instant, leaving the line where a pass at every instant leaves it for
 * what comes after (an edit, a pass on a clock behind, an outage). The first pass after some were
 * left out forgets the shard's position: its scan, as a shard's first pass's, finds what lies
 * before its window, which is what its backlog would have held (the entries from that earliest
 * bucket on; none lies behind the line for a look-back), and it ends at the same line. An entry
 * behind the line is the earliest and within every horizon: from then on a pass is made at every
 * instant, reading their buckets, as before.
 *
 * No worker takes the queued runs, so from a lease after each run's time the reaper re-sent its
 * message and moved its deadline on at every step, writes of no field this file reads (which
 * occurrences are queued, and their status, are the passes' writes alone); the reaper's own files
 * (reaper-cursor, cancel-killed-midway, clock-skew) test its re-sends.
 */
async function tickUntil(harness: ApiHarness, until: string): Promise<void> {
  const { engine } = harness.fixture;
  const reaches = (atMs: number, bucket: string) =>
    horizonOf(new Date(atMs), engine.settings.lookaheadMs).minute >= bucket;
  const untilMs = Date.parse(until);
  while (nowMs <= untilMs) {
    const due = await earliestDueBucket(harness);
    const lastMs = nowMs + Math.floor((untilMs - nowMs) / TICK_MS) * TICK_MS;
    let atMs = nowMs;
    while (atMs < lastMs && (due === null || !reaches(atMs, due))) atMs += TICK_MS;
    if (atMs > nowMs) await forgetShardPosition(harness);
    nowMs = atMs;
    const pass = await dispatchShard(engine, 0, "dst-dispatch");
    expect(pass.outcome).toBe("swept");
    nowMs += TICK_MS;
  }
}

/** The job's runs over the API, as `scheduledFor status`, oldest occurrence first. */
async function runsOf(harness: ApiHarness, jobId: string): Promise<string[]> {
  const reply = await harness.call("GET", `/jobs/${jobId}/runs?limit=100`);
  expect(reply.status, reply.text).toBe(200);
  const page = RunPageSchema.parse(reply.body);
  expect(page.nextCursor).toBeNull();
  return page.items.map((r) => `${r.scheduledFor} ${r.status}`).sort();
}

const queued = (utc: readonly string[]) => utc.map((at) => `${at} queued`);

describe("the night the clocks change, as the dispatcher queues it", () => {
  const nights: readonly {
    readonly what: string;
    readonly cron: string;
    readonly timezone: string;
    readonly from: string;
    readonly until: string;
    readonly runs: readonly string[];
  }[] = [
    {
      what: "New York spring 2027-03-14: 02:30 does not exist and runs at 03:30 EDT",
      cron: "30 2 * * *",
      timezone: "America/New_York",
      from: "2027-03-14T06:00:00Z",
      until: "2027-03-15T07:00:00Z",
      runs: ["2027-03-14T07:30:00.000Z", "2027-03-15T06:30:00.000Z"],
    },
    {
      what: "New York fall 2027-11-07: 01:30 runs once, in EDT",
      cron: "30 1 * * *",
      timezone: "America/New_York",
      from: "2027-11-07T04:00:00Z",
      until: "2027-11-08T07:00:00Z",
      runs: ["2027-11-07T05:30:00.000Z", "2027-11-08T06:30:00.000Z"],
    },
    {
      what: "New York fall 2027-11-07: every 30 minutes of real time through both 01:00 hours",
      cron: "*/30 * * * *",
      timezone: "America/New_York",
      from: "2027-11-07T04:00:00Z",
      until: "2027-11-07T07:40:00Z",
      runs: [
        "2027-11-07T04:00:00.000Z",
        "2027-11-07T04:30:00.000Z",
        "2027-11-07T05:00:00.000Z",
        "2027-11-07T05:30:00.000Z",
        "2027-11-07T06:00:00.000Z",
        "2027-11-07T06:30:00.000Z",
        "2027-11-07T07:00:00.000Z",
        "2027-11-07T07:30:00.000Z",
      ],
    },
    {
      what: "Lord Howe fall 2027-04-04 (02:00 → 01:30): 01:45 runs once, at +11:00",
      cron: "45 1 * * *",
      timezone: "Australia/Lord_Howe",
      from: "2027-04-03T14:00:00Z",
      until: "2027-04-04T15:10:00Z",
      runs: ["2027-04-03T14:45:00.000Z", "2027-04-04T15:15:00.000Z"],
    },
    {
      what: "Lord Howe spring 2027-10-03 (02:00 → 02:30): 02:15 runs at 02:45",
      cron: "15 2 * * *",
      timezone: "Australia/Lord_Howe",
      from: "2027-10-02T15:00:00Z",
      until: "2027-10-03T15:30:00Z",
      runs: ["2027-10-02T15:45:00.000Z", "2027-10-03T15:15:00.000Z"],
    },
    {
      what: "Santiago spring 2027-09-05 (00:00 → 01:00): midnight runs at 01:00",
      cron: "0 0 * * *",
      timezone: "America/Santiago",
      from: "2027-09-05T03:00:00Z",
      until: "2027-09-06T03:30:00Z",
      runs: ["2027-09-05T04:00:00.000Z", "2027-09-06T03:00:00.000Z"],
    },
    {
      what: "Santiago fall 2027-04-04 (00:00 → 23:00 the day before): 23:30 runs once, at -03:00",
      cron: "30 23 * * *",
      timezone: "America/Santiago",
      from: "2027-04-04T02:00:00Z",
      until: "2027-04-05T04:00:00Z",
      runs: ["2027-04-04T02:30:00.000Z", "2027-04-05T03:30:00.000Z"],
    },
  ];

  for (const night of nights) {
    it(`${night.what} (${night.cron})`, async () => {
      const harness = await started(night.from);
      const job = await create(harness, {
        schedule: { cron: night.cron, timezone: night.timezone },
      });
      const shown = await previewUtc(harness, job.id, night.runs.length);
      expect(shown).toEqual(night.runs);

      await tickUntil(harness, night.until);
      expect(await runsOf(harness, job.id)).toEqual(queued(night.runs));
    }, 60_000);
  }

  it("a tick whose clock reads earlier than the last one queues nothing again, and the next ones go on", async () => {
    const harness = await started("2027-11-07T04:00:00Z");
    const job = await create(harness, {
      schedule: { cron: "*/30 * * * *", timezone: "America/New_York" },
    });
    await tickUntil(harness, "2027-11-07T05:40:00Z");
    const before = await runsOf(harness, job.id);
    // 04:00 to 01:30 EDT (05:30Z): the next, 01:00 EST (06:00Z), lies past the last tick's lookahead.
    expect(before).toEqual(
      queued([
        "2027-11-07T04:00:00.000Z",
        "2027-11-07T04:30:00.000Z",
        "2027-11-07T05:00:00.000Z",
        "2027-11-07T05:30:00.000Z",
      ]),
    );
    // One dispatcher's clock is an hour behind: 01:00 EST read as 01:00 EDT.
    nowMs = Date.parse("2027-11-07T04:50:00Z");
    await tickOnce(harness.fixture.engine, "behind");
    expect(await runsOf(harness, job.id)).toEqual(before);
    nowMs = Date.parse("2027-11-07T05:50:00Z");
    await tickUntil(harness, "2027-11-07T07:00:00Z");
    expect(await runsOf(harness, job.id)).toEqual(
      queued([
        "2027-11-07T04:00:00.000Z",
        "2027-11-07T04:30:00.000Z",
        "2027-11-07T05:00:00.000Z",
        "2027-11-07T05:30:00.000Z",
        "2027-11-07T06:00:00.000Z",
        "2027-11-07T06:30:00.000Z",
        "2027-11-07T07:00:00.000Z",
      ]),
    );
  }, 60_000);
});

describe("a job paused across the night the clocks go back", () => {
  it("fire_all queues each occurrence missed in real time, both 01:00 hours included, and its preview while paused shows where the resume goes on", async () => {
    const harness = await started("2027-11-07T03:55:00Z");
    const job = await create(harness, {
      schedule: { cron: "*/30 * * * *", timezone: "America/New_York" },
      misfirePolicy: "fire_all",
      overlapPolicy: "allow",
      maxConcurrent: 10,
      maxRuns: 12,
    });
    // Created at 23:55 EDT: its claim queued 00:00 EDT (04:00Z), the first occurrence.
    expect(await runsOf(harness, job.id)).toEqual(queued(["2027-11-07T04:00:00.000Z"]));
    const paused = await harness.call("POST", `/jobs/${job.id}/pause`, { body: {} });
    expect(paused.status, paused.text).toBe(200);

    // Resumed at 02:20 EST: 04:30Z to 07:00Z were missed, six occurrences over the two 01:00 hours.
    nowMs = Date.parse("2027-11-07T07:20:00Z");
    const missed = [
      "2027-11-07T04:30:00.000Z",
      "2027-11-07T05:00:00.000Z",
      "2027-11-07T05:30:00.000Z",
      "2027-11-07T06:00:00.000Z",
      "2027-11-07T06:30:00.000Z",
      "2027-11-07T07:00:00.000Z",
    ];
    // 12 runs in all: the first, the six caught up, and five more from 07:30Z.
    const after = [
      "2027-11-07T07:30:00.000Z",
      "2027-11-07T08:00:00.000Z",
      "2027-11-07T08:30:00.000Z",
      "2027-11-07T09:00:00.000Z",
      "2027-11-07T09:30:00.000Z",
    ];
    expect(await previewUtc(harness, job.id, 10)).toEqual(after);

    const resumed = await harness.call("POST", `/jobs/${job.id}/resume`);
    expect(resumed.status, resumed.text).toBe(200);
    await tickUntil(harness, "2027-11-07T10:30:00Z");
    expect(await runsOf(harness, job.id)).toEqual(
      queued(["2027-11-07T04:00:00.000Z", ...missed, ...after]),
    );
    const ended = JobSchema.parse((await harness.call("GET", `/jobs/${job.id}`)).body);
    expect(ended).toMatchObject({ status: "completed", occurrencesQueued: 12, nextRunAt: null });
  }, 60_000);
});

/*
 * With a jitter window (adversarial review h87, all holding): what a job's preview shows, planned
 * times included, is what the passes queue, across the nights the clocks change, with maxRuns and
 * an endAt exactly at an occurrence, through an outage over the fall-back night, a pass whose clock
 * reads earlier, and a zone edited in the repeated hour.
 */
/** The job's preview as `utc plannedFor` (`-` without a window). */
async function plannedPreview(
  harness: ApiHarness,
  jobId: string,
  count: number,
): Promise<string[]> {
  const reply = await harness.call("GET", `/jobs/${jobId}/preview?count=${count}`);
  expect(reply.status, reply.text).toBe(200);
  return PreviewSchema.parse(reply.body).occurrences.map((o) => `${o.utc} ${o.plannedFor ?? "-"}`);
}

/** The job's runs as `scheduledFor plannedFor`, `skipped` ones marked, oldest first. */
async function plannedRuns(harness: ApiHarness, jobId: string): Promise<string[]> {
  const reply = await harness.call("GET", `/jobs/${jobId}/runs?limit=100`);
  expect(reply.status, reply.text).toBe(200);
  const page = RunPageSchema.parse(reply.body);
  expect(page.nextCursor).toBeNull();
  return page.items
    .map((r) => `${r.scheduledFor} ${r.plannedFor}${r.status === "skipped" ? " skipped" : ""}`)
    .sort();
}

const through = (lines: readonly string[], last: string) =>
  lines.filter((line) => line.slice(0, 24) <= last);

describe("with a jitter window, the preview is what runs", () => {
  it("New York spring forward, 30 1,3 * * * (an hour apart that night) with maxRuns 3", async () => {
    const harness = await started("2027-03-14T04:00:00Z");
    const job = await create(harness, {
      schedule: { cron: "30 1,3 * * *", timezone: "America/New_York" },
      window: "PT2H",
      maxRuns: 3,
    });
    const shown = await plannedPreview(harness, job.id, 10);
    expect(shown).toHaveLength(3);
    await tickUntil(harness, "2027-03-15T08:00:00Z");
    expect(await plannedRuns(harness, job.id)).toEqual(shown);
  }, 120_000);

  it("an every with endAt exactly at an occurrence whose planned time lies after it", async () => {
    const harness = await started("2027-03-13T00:00:00Z");
    const job = await create(harness, {
      schedule: { every: "PT1H", startAt: "2027-03-13T01:00:00Z" },
      window: "PT1H",
      endAt: "2027-03-13T05:00:00Z",
    });
    const shown = await plannedPreview(harness, job.id, 10);
    expect(shown.map((line) => line.slice(0, 24))).toEqual([
      "2027-03-13T01:00:00.000Z",
      "2027-03-13T02:00:00.000Z",
      "2027-03-13T03:00:00.000Z",
      "2027-03-13T04:00:00.000Z",
      "2027-03-13T05:00:00.000Z",
    ]);
    await tickUntil(harness, "2027-03-13T06:10:00Z");
    expect(await plannedRuns(harness, job.id)).toEqual(shown);
    const ended = JobSchema.parse((await harness.call("GET", `/jobs/${job.id}`)).body);
    expect(ended).toMatchObject({ status: "completed", nextRunAt: null });
  }, 120_000);

  it("New York fall back, */30 * * * *, with a pass whose clock reads an hour behind", async () => {
    const harness = await started("2027-11-07T04:00:00Z");
    const job = await create(harness, {
      schedule: { cron: "*/30 * * * *", timezone: "America/New_York" },
      window: "PT30M",
    });
    const shown = await plannedPreview(harness, job.id, 8);
    await tickUntil(harness, "2027-11-07T05:40:00Z");
    // 01:00 EST read as 01:00 EDT.
    nowMs = Date.parse("2027-11-07T04:50:00Z");
    await dispatchShard(harness.fixture.engine, 0, "behind");
    nowMs = Date.parse("2027-11-07T05:50:00Z");
    await tickUntil(harness, "2027-11-07T08:10:00Z");
    const last = "2027-11-07T07:30:00.000Z";
    expect(through(await plannedRuns(harness, job.id), last)).toEqual(through(shown, last));
  }, 120_000);

  it("an outage over the fall-back night under fire_once with maxRuns: the preview during it is what runs after", async () => {
    const harness = await started("2027-11-07T03:50:00Z");
    const job = await create(harness, {
      schedule: { cron: "*/30 * * * *", timezone: "America/New_York" },
      window: "PT30M",
      maxRuns: 6,
      misfirePolicy: "fire_once",
    });
    await tickUntil(harness, "2027-11-07T04:20:00Z");
    const before = await plannedRuns(harness, job.id);
    // Down from 00:20 EDT to 01:47 EST.
    nowMs = Date.parse("2027-11-07T06:47:00Z");
    const shown = await plannedPreview(harness, job.id, 10);
    await tickUntil(harness, "2027-11-07T10:00:00Z");
    const after = (await plannedRuns(harness, job.id)).filter((line) => !before.includes(line));
    const ran = after.filter((line) => !line.endsWith("skipped"));
    // fire_once runs the latest occurrence planned past the grace (06:00Z or 06:30Z, by the
    // hash), one planned after it runs as planned, and from the clock's reading on the preview's.
    expect(ran.filter((line) => line.slice(0, 24) >= "2027-11-07T06:47:00.000Z")).toEqual(shown);
    expect(before.length + ran.length).toBe(6);
    const ended = JobSchema.parse((await harness.call("GET", `/jobs/${job.id}`)).body);
    expect(ended).toMatchObject({ status: "completed", occurrencesQueued: 6 });
  }, 120_000);
});

describe("a zone edited in the repeated hour", () => {
  const edits = [
    {
      cron: "*/30 * * * *",
      to: "US/Eastern",
      at: "2027-11-07T05:40:00Z",
      runs: ["04:00", "04:30", "05:00", "05:30", "06:00", "06:30", "07:00", "07:30"],
    },
    { cron: "30 1 * * *", to: "US/Eastern", at: "2027-11-07T06:10:00Z", runs: ["05:30"] },
    {
      cron: "30 1 * * *",
      to: "America/Chicago",
      at: "2027-11-07T06:10:00Z",
      runs: ["05:30", "06:30"],
    },
  ] as const;
  for (const edit of edits) {
    it(`${edit.cron} edited to ${edit.to} at ${edit.at}: each occurrence once`, async () => {
      const harness = await started("2027-11-07T03:50:00Z");
      const job = await create(harness, {
        schedule: { cron: edit.cron, timezone: "America/New_York" },
      });
      await tickUntil(harness, edit.at);
      nowMs = Date.parse(edit.at);
      const patched = await harness.call("PATCH", `/jobs/${job.id}`, {
        body: { schedule: { cron: edit.cron, timezone: edit.to } },
        headers: { "If-Match": '"1"' },
      });
      expect(patched.status, patched.text).toBe(200);
      await tickUntil(harness, "2027-11-07T07:40:00Z");
      const ran = (await plannedRuns(harness, job.id)).map((line) => line.slice(0, 24));
      expect(through(ran, "2027-11-07T07:30:00.000Z")).toEqual(
        edit.runs.map((hhmm) => `2027-11-07T${hhmm}:00.000Z`),
      );
    }, 120_000);
  }
});
