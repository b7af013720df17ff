import { afterEach, describe, expect, it } from "vitest";
import { JobSchema } from "../../shared/api/schemas/jobs.js";
import { PreviewSchema } from "../../shared/api/schemas/previews.js";
import { dispatchShard, horizonOf } from "../../shared/dispatch/dispatcher.js";
import { claimReachEnd } from "../../shared/dispatch/fast-path-window.js";
import type { Run } from "../../shared/model.js";
import { occurrences } from "../../shared/schedule/index.js";
import { type ApiHarness, startApi } from "../api/support.js";

/**
 * The nights zones change offset where dst-dispatch does not go: at midnight (Havana forward at
 * 00:00 and back at 01:00 to 00:00, Beirut back at 24:00 to 23:00 the same day) and back by 30
 * minutes (Lord Howe), with jitter windows, `every`, `maxRuns` ending inside the night and an
 * `endAt` exactly on an occurrence. Jobs are created over the API, their previews read, the
 * dispatcher's passes ticked through the night on a fixed clock, and the runs it queued must be the
 * previews' occurrences at the previews' planned times: each once, none missing, none extra. Then
 * an outage of the passes across the change: each misfire policy's runs and skipped records
 * together are every occurrence of the night, once. The nights are in 2027, ahead of the
 * machine's clock, so no item's TTL has passed on DynamoDB Local.
 */
const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
const TICK_MS = 10 * MINUTE;

let nowMs = 0;
let api: ApiHarness | undefined;
afterEach(async () => {
  await api?.close();
  api = undefined;
});

async function started(atMs: number): Promise<ApiHarness> {
  nowMs = atMs;
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

const PREVIEW_PAGE = 100;

/**
 * The job's preview as `utc@planned` (planned is utc without a window), read a page at a time
 * until an occurrence is planned at or past `throughMs` or the job has no more (the per-30 s job
 * has more in a night than a page holds).
 */
async function preview(harness: ApiHarness, jobId: string, throughMs: number): Promise<string[]> {
  const shown: { utc: string; planned: string }[] = [];
  for (;;) {
    const last = shown.at(-1);
    const from =
      last === undefined ? "" : `&from=${new Date(Date.parse(last.utc) + 1000).toISOString()}`;
    const reply = await harness.call("GET", `/jobs/${jobId}/preview?count=${PREVIEW_PAGE}${from}`);
    expect(reply.status, reply.text).toBe(200);
    const page = PreviewSchema.parse(reply.body).occurrences;
    shown.push(...page.map((o) => ({ utc: o.utc, planned: o.plannedFor ?? o.utc })));
    const reached = Date.parse(shown.at(-1)?.planned ?? "") >= throughMs;
    if (page.length < PREVIEW_PAGE || reached) return shown.map((o) => `${o.utc}@${o.planned}`);
  }
}

/**
 * The dispatcher's pass over the one shard, TICK_MS apart: a tick (tickOnce) without the reaper
 * after it. No worker takes the queued runs here, so at each 10-minute step every one of them was
 * past its deadline, and the reaper re-sent its message and moved its deadline on (up to 127 a
 * tick, some 1,500 a night): half the file's CPU, for writes of no field this file reads (which
 * runs, when planned, due when, skipped or queued are the passes' writes alone). The reaper's own
 * files (reaper-cursor, cancel-killed-midway, clock-skew) test its re-sends.
 */
async function tickUntil(harness: ApiHarness, untilMs: number): Promise<void> {
  for (; nowMs <= untilMs; nowMs += TICK_MS) {
    const pass = await dispatchShard(harness.fixture.engine, 0, "offset-change");
    expect(pass.outcome).toBe("swept");
  }
}

async function runsByJob(harness: ApiHarness): Promise<Map<string, Run[]>> {
  const byJob = new Map<string, Run[]>();
  for (const run of await harness.fixture.runs()) {
    byJob.set(run.jobId, [...(byJob.get(run.jobId) ?? []), run]);
  }
  for (const runs of byJob.values()) {
    runs.sort((a, b) => (a.scheduledFor < b.scheduledFor ? -1 : 1));
  }
  return byJob;
}

const asQueued = (r: Run) => `${r.scheduledFor}@${r.plannedFor ?? r.scheduledFor}`;

interface Night {
  readonly what: string;
  readonly timezone: string;
  /** The instant the offset changes. */
  readonly change: string;
  /**
   * The minutes before and after the change that the dispatcher is ticked through (from the jobs'
   * creation): the first occurrence of the night's jobs in their local 23:00 to 01:59 up to the
   * last, and the planned time of the last with its window. The passes before and after would
   * only queue every 20, 10 and 50 minutes where the offset holds.
   */
  readonly minutesBefore: number;
  readonly minutesAfter: number;
}

const nights: readonly Night[] = [
  {
    what: "Havana forward at midnight",
    timezone: "America/Havana",
    change: "2027-03-14T05:00:00Z",
    // 23:00 CST (Cuba Standard Time), 60 minutes before; the per-30 s job's hour 0, run as 01:00
    // to 01:59 CDT.
    minutesBefore: 70,
    minutesAfter: 70,
  },
  {
    what: "Havana back at 01:00 to 00:00",
    timezone: "America/Havana",
    change: "2027-11-07T05:00:00Z",
    // 23:00 CDT, 120 minutes before; 01:30 CST, 90 minutes after, planned up to 10 minutes later.
    minutesBefore: 120,
    minutesAfter: 100,
  },
  {
    what: "Beirut back at 24:00 to 23:00",
    timezone: "Asia/Beirut",
    change: "2027-10-30T21:00:00Z",
    // 23:00 EEST, 60 minutes before; 00:00 to 00:59 EET and 01:00 EET, 60 to 120 minutes after.
    minutesBefore: 70,
    minutesAfter: 120,
  },
  {
    what: "Lord Howe back 30 minutes",
    timezone: "Australia/Lord_Howe",
    change: "2027-04-03T15:00:00Z",
    // 00:00 (+11), 120 minutes before; 01:40 again (+10:30) and 02:00, 10 and 30 minutes after,
    // the per-20-minute job planned up to 19 minutes later.
    minutesBefore: 120,
    minutesAfter: 50,
  },
];

/** The jobs each night creates: what each stresses is in its name. */
function jobsFor(night: Night, createdAt: number): Record<string, Record<string, unknown>> {
  const zone = night.timezone;
  const second = occurrences(
    { cron: "45 23 * * *", timezone: zone },
    new Date(createdAt),
    new Date(createdAt + 3 * 24 * HOUR),
    2,
  )[1];
  return {
    "every 20 minutes, every hour (the repeated stretch runs again), window 19 min": {
      schedule: { cron: "*/20 * * * *", timezone: zone },
      window: "PT19M",
    },
    "00:30, in the skipped hour or twice": {
      schedule: { cron: "30 0 * * *", timezone: zone },
    },
    "23:30, 00:00, 00:30 and 01:00 local": {
      schedule: { cron: "0,30 23,0,1 * * *", timezone: zone },
      window: "PT10M",
    },
    "every 10 minutes, ending inside the night at its maxRuns": {
      schedule: { cron: "*/10 * * * *", timezone: zone },
      window: "PT5M",
      // Its last run 20 minutes or more before the night's last tick.
      maxRuns: (night.minutesBefore + night.minutesAfter) / 10 - 2,
    },
    "every 50 minutes of elapsed time": {
      schedule: { every: "PT50M" },
      window: "PT10M",
    },
    "23:45, ending exactly on its second occurrence": {
      schedule: { cron: "45 23 * * *", timezone: zone },
      endAt: second?.toISOString(),
    },
    "per 30 seconds from 00:00 to 00:59 local": {
      schedule: { cron: "*/30 * 0 * * *", timezone: zone },
    },
  };
}

describe("a night a zone changes offset, as its preview shows it and the dispatcher queues it", () => {
  for (const night of nights) {
    it(`${night.what} (${night.timezone}, ${night.change})`, async () => {
      const change = Date.parse(night.change);
      const createdAt = change - night.minutesBefore * MINUTE;
      const harness = await started(createdAt);
      const until = change + night.minutesAfter * MINUTE;
      const lastTick = createdAt + Math.floor((until - createdAt) / TICK_MS) * TICK_MS;
      // The last pass claims every entry due before its horizon, and a claim queues its job's
      // occurrences planned before its reach: the runs end between the two.
      const horizonEnd = horizonOf(
        new Date(lastTick),
        harness.fixture.engine.settings.lookaheadMs,
      ).end.getTime();
      const reachEnd = claimReachEnd(new Date(lastTick), new Date(horizonEnd)).getTime();
      const jobs = Object.entries(jobsFor(night, createdAt));
      const created = new Map<string, { id: string; shown: string[] }>();
      for (const [name, body] of jobs) {
        const job = await create(harness, body);
        created.set(name, { id: job.id, shown: await preview(harness, job.id, reachEnd) });
      }

      await tickUntil(harness, until);
      expect(nowMs - TICK_MS).toBe(lastTick);
      const byJob = await runsByJob(harness);
      const plannedMs = (s: string) => Date.parse(s.split("@")[1] ?? "");
      for (const [name, { id, shown }] of created) {
        const queued = (byJob.get(id) ?? []).map(asQueued);
        // The preview's first occurrences, in order, each once (the preview is read past the
        // reach, so a run it does not show is one too many)...
        expect(queued, name).toEqual(shown.slice(0, queued.length));
        // ...up to the last pass's horizon at least, and up to its reach at most.
        const due = shown.filter((s) => plannedMs(s) < horizonEnd);
        expect(queued.length, name).toBeGreaterThanOrEqual(due.length);
        expect(
          queued.filter((s) => plannedMs(s) >= reachEnd),
          name,
        ).toEqual([]);
        // Each run is due at its planned time.
        for (const run of byJob.get(id) ?? []) {
          expect(run.dueAt, name).toBe(run.plannedFor ?? run.scheduledFor);
        }
      }
    }, 120_000);
  }
});

describe("an outage of the passes across the night a zone changes offset", () => {
  for (const night of nights.filter(
    (n) => n.timezone !== "Asia/Beirut" && n.what.includes("back"),
  )) {
    it(`${night.what}: each policy's runs and skipped records are every occurrence, once`, async () => {
      const change = Date.parse(night.change);
      // Three passes before the outage: the first places the shard's line, the others claim on
      // time as any pass would (more of them would only repeat that).
      const createdAt = change - HOUR - 2 * TICK_MS;
      const harness = await started(createdAt);
      const zone = night.timezone;
      const policies = ["skip", "fire_once", "fire_all"] as const;
      const ids = new Map<string, string>();
      for (const policy of policies) {
        for (const cron of ["*/5 * * * *", "*/15 * * * *", "30 0,1,2,23 * * *"]) {
          const job = await create(harness, {
            schedule: { cron, timezone: zone },
            misfirePolicy: policy,
            overlapPolicy: "allow",
            maxConcurrent: 100,
          });
          ids.set(`${policy} ${cron}`, job.id);
        }
      }
      await tickUntil(harness, change - HOUR);
      // Down from an hour before the change to two hours after it. The pass that recovers claims
      // every occurrence missed, under its policy, and queues a claim's reach on; the next claims
      // the entry that claim filed, on time: the job goes on as before the outage, and the passes
      // after would only repeat that.
      nowMs = change + 2 * HOUR;
      const recovered = nowMs;
      await tickUntil(harness, recovered + TICK_MS);

      const byJob = await runsByJob(harness);
      for (const [name, id] of ids) {
        const [policy = "", ...cronFields] = name.split(" ");
        const cron = cronFields.join(" ");
        const runs = byJob.get(id) ?? [];
        const recorded = runs.map((r) => r.scheduledFor);
        expect(new Set(recorded).size, name).toBe(recorded.length);
        const expected = occurrences(
          { cron, timezone: zone },
          new Date(createdAt - 1000),
          new Date(Date.parse(recorded.at(-1) ?? night.change)),
          10_000,
        ).map((d) => d.toISOString());
        expect(recorded, name).toEqual(expected);
        // Missed: planned more than the grace before the recovered pass, and not claimed before.
        const missed = runs.filter(
          (r) => Date.parse(r.scheduledFor) < recovered - MINUTE && r.status !== "QUEUED",
        );
        const late = runs.filter(
          (r) =>
            Date.parse(r.scheduledFor) < recovered - MINUTE &&
            Date.parse(r.scheduledFor) > change - HOUR + 14 * MINUTE + MINUTE,
        );
        expect(late.length, name).toBeGreaterThan(0);
        if (policy === "fire_all") {
          expect(
            missed.map((r) => r.status),
            name,
          ).toEqual([]);
        } else if (policy === "skip") {
          expect(
            late.map((r) => r.status),
            name,
          ).toEqual(late.map(() => "SKIPPED"));
        } else {
          expect(
            late.map((r) => r.status),
            name,
          ).toEqual([...late.slice(0, -1).map(() => "SKIPPED"), "QUEUED"]);
        }
      }
    }, 180_000);
  }
});
