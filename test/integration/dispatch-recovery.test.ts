import {
  InternalServerError,
  ProvisionedThroughputExceededException,
} from "@aws-sdk/client-dynamodb";
import { GetCommand, PutCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { claimDueEntry } from "../../shared/dispatch/claim.js";
import {
  dispatchShard,
  MAX_BACKLOG_BUCKETS_PER_PASS,
  type PassResult,
} from "../../shared/dispatch/dispatcher.js";
import { sendClaimed } from "../../shared/dispatch/fast-path.js";
import { createJob, editJob } from "../../shared/jobs/index.js";
import { bucketKey } from "../../shared/keys.js";
import type { DueEntry } from "../../shared/model.js";
import { METRICS } from "../../shared/observability.js";
import { dueEntryKey, scanDueEntriesBefore } from "../../shared/storage/due-entries.js";
import { encodeDueEntry, shardLeaseKey } from "../../shared/storage/items.js";
import { listSetAsideEntries } from "../../shared/storage/set-aside.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { withFaults } from "../support/faults.js";
import { putItems, seedJobs } from "../support/seed.js";

const SECOND = 1000;
const MINUTE = 60 * SECOND;
const DAY = 24 * 60 * MINUTE;

/** A fixture on one shard whose clock the test sets. */
async function fixedClockFixture(startMs: number) {
  const time = { ms: startMs };
  const f = await createEngineFixture({
    settings: { shardCount: 1, maxShardCount: 1 },
    clock: () => new Date(time.ms),
  });
  return { f, time };
}

/** Half a minute into the current minute, so that minute arithmetic in tests stays readable. */
const startOfTest = () => Math.floor(Date.now() / MINUTE) * MINUTE + 30 * SECOND;

function swept(pass: PassResult) {
  if (pass.outcome !== "swept") throw new Error(`pass ended ${pass.outcome}`);
  return pass;
}

/**
 * Cuts the passes' Scan pages to `limit` items, as a large table's 1 MB pages would, and calls
 * `before` ahead of each page's request (it may throw, as DynamoDB may) and `after` with what the
 * page read. The test's own reads of the tables go through untouched.
 */
function pagedScans(
  f: EngineFixture,
  limit: number,
  hooks: {
    before?: () => Promise<void> | void;
    after?: (output: unknown) => void;
  } = {},
) {
  f.engine.doc.middlewareStack.add(
    (next, context) => async (args) => {
      const input = args.input as { FilterExpression?: string };
      if (context.commandName !== "ScanCommand" || !input.FilterExpression?.includes(":before"))
        return next(args);
      await hooks.before?.();
      const out = await next({ ...args, input: { ...args.input, Limit: limit } });
      hooks.after?.(out.output);
      return out;
    },
    { step: "initialize", name: "pagedScans" },
  );
}

describe("a due entry that cannot be claimed", () => {
  let f: EngineFixture;
  let time: { ms: number };
  beforeAll(async () => {
    ({ f, time } = await fixedClockFixture(startOfTest()));
  });
  afterAll(() => f.destroy());

  it("a schedule past year 9999 does not stop the pass: every other tenant's entry is claimed on time", async () => {
    const now = new Date(time.ms);
    const due = new Date(now.getTime() - 10 * SECOND);
    const others = await seedJobs(
      f,
      Array.from({ length: 20 }, (_, i) => ({
        jobId: `other${String(i).padStart(2, "0")}`,
        schedule: { runAt: due.toISOString() },
        dueAt: due,
      })),
      now,
    );
    // The poison: created with a later startAt, its next occurrence falls in year 13526.
    await seedJobs(
      f,
      [
        {
          jobId: "poison-every",
          schedule: { every: "P600000W", startAt: due.toISOString() },
          dueAt: due,
        },
      ],
      now,
    );

    const pass = swept(await dispatchShard(f.engine, 0, "pass-1"));
    const runs = await f.runs();
    for (const job of others) {
      expect(runs.filter((r) => r.jobId === job.jobId).map((r) => r.status)).toEqual(["QUEUED"]);
    }
    // No entry of the poison job is left in a bucket for every later pass to trip over.
    expect((await f.dueEntries()).filter((d) => d.jobId === "poison-every")).toEqual([]);
    const aside = await listSetAsideEntries(f.engine, 0);
    const poisonRuns = runs.filter((r) => r.jobId === "poison-every");
    if (aside.length > 0) {
      // Set aside for operators, with the reason, logged and counted.
      expect(aside.map((a) => a.entry.jobId)).toEqual(["poison-every"]);
      expect(aside[0]?.error).toMatch(/9999|storable|RangeError/);
      expect(pass.setAside).toBe(1);
      expect(f.metrics.sum(METRICS.dueEntryFailures, { handling: "set-aside" })).toBe(1);
    } else {
      // A schedule core that ends the schedule at its last storable occurrence lets it be claimed.
      expect(poisonRuns).toHaveLength(1);
    }
  });

  it("a corrupt entry is set aside with its error and the entry as it was; the others are claimed", async () => {
    time.ms += 10 * MINUTE;
    const now = new Date(time.ms);
    const due = new Date(now.getTime() - 5 * SECOND);
    const [other] = await seedJobs(
      f,
      [{ jobId: "other-b", schedule: { runAt: due.toISOString() }, dueAt: due }],
      now,
    );
    const [victim] = await seedJobs(
      f,
      [
        {
          jobId: "corrupt",
          schedule: { every: "PT1H", startAt: new Date(now.getTime() + DAY).toISOString() },
          dueAt: new Date(now.getTime() + DAY),
        },
      ],
      now,
    );
    if (!other || !victim) throw new Error("seed failed");
    // A retry entry whose attempt no run key can hold: no schedule rule is involved.
    const corrupt: DueEntry = {
      key: {
        pk: dueEntryKey("corrupt", due, 1, now, 1).pk,
        sk: `${due.toISOString()}#corrupt#9999`,
      },
      kind: "retry",
      jobId: "corrupt",
      tenantId: victim.tenantId,
      dueAt: due.toISOString(),
      scheduledFor: due.toISOString(),
      attempt: 10_000,
      jobVersion: 1,
      priority: "normal",
      schedule: victim.schedule,
      misfire: "fire_once",
    };
    await f.engine.doc.send(
      new PutCommand({ TableName: f.engine.tables.jobs, Item: encodeDueEntry(corrupt) }),
    );
    const before = f.metrics.sum(METRICS.dueEntryFailures, { handling: "set-aside" });

    const pass = swept(await dispatchShard(f.engine, 0, "pass-2"));
    expect(pass.setAside).toBe(1);
    expect((await f.runs()).filter((r) => r.jobId === other.jobId)).toHaveLength(1);
    const aside = (await listSetAsideEntries(f.engine, 0)).filter(
      (a) => a.entry.jobId === "corrupt",
    );
    expect(aside).toHaveLength(1);
    expect(aside[0]?.entry).toEqual(corrupt);
    expect(aside[0]?.error).toMatch(/attempt/);
    expect(f.metrics.sum(METRICS.dueEntryFailures, { handling: "set-aside" })).toBe(before + 1);
    // Its job's own occurrence entry is untouched.
    expect((await f.dueEntries()).filter((d) => d.jobId === "corrupt")).toHaveLength(1);
  });

  it("a pass that fails releases its lease: the next tick's pass need not wait for it to lapse", async () => {
    time.ms += 10 * MINUTE;
    const faulty = withFaults(f.engine, {
      operation: "Query",
      times: 1,
      match: (input) =>
        String((input.ExpressionAttributeValues as Record<string, unknown>)[":pk"]).startsWith(
          "DUE#",
        ),
      error: () =>
        Object.assign(new Error("injected: the bucket could not be read"), {
          name: "ValidationException",
        }),
    });
    try {
      await expect(dispatchShard(faulty.engine, 0, "failing-pass")).rejects.toThrow(/injected/);
    } finally {
      faulty.destroy();
    }
    time.ms += 20 * SECOND;
    const next = await dispatchShard(f.engine, 0, "next-pass");
    expect(next.outcome).toBe("swept");
  });

  it("a pass whose backlog cannot be read claims the rest of its recent window before it fails", async () => {
    // The backlog goes between the two parts of the recent window: the part due a minute or more
    // past the backlog's budget (half a lease) comes after it, and is claimed however it ends.
    time.ms = Math.ceil(time.ms / MINUTE) * MINUTE + 30 * SECOND;
    swept(await dispatchShard(f.engine, 0, "before-gap"));
    const before = new Date(time.ms);
    const lateDue = new Date(before.getTime() + 5 * MINUTE);
    const aheadDue = new Date(before.getTime() + 14 * MINUTE);
    await seedJobs(
      f,
      [
        { jobId: "backlog-unread", schedule: { runAt: lateDue.toISOString() }, dueAt: lateDue },
        { jobId: "window-rest", schedule: { runAt: aheadDue.toISOString() }, dueAt: aheadDue },
      ],
      before,
    );
    // Ten minutes without a pass: the first entry's bucket is backlog; the second is due four
    // minutes after the next pass, in the rest of its window.
    time.ms += 10 * MINUTE;
    const faulty = withFaults(f.engine, {
      operation: "Query",
      times: 1,
      match: (input) =>
        (input.ExpressionAttributeValues as Record<string, unknown>)[":pk"] ===
        bucketKey(lateDue, 0),
      error: () =>
        Object.assign(new Error("injected: the backlog bucket could not be read"), {
          name: "ValidationException",
        }),
    });
    try {
      await expect(dispatchShard(faulty.engine, 0, "backlog-fails")).rejects.toThrow(/injected/);
    } finally {
      faulty.destroy();
    }
    const claimed = async () =>
      (await f.runs())
        .filter((r) => r.jobId === "backlog-unread" || r.jobId === "window-rest")
        .map((r) => r.jobId);
    expect(await claimed()).toEqual(["window-rest"]);
    // The pass recorded nothing: the next one reads the backlog again.
    time.ms += 20 * SECOND;
    swept(await dispatchShard(f.engine, 0, "after-failure"));
    expect((await claimed()).sort()).toEqual(["backlog-unread", "window-rest"]);
  });
});

describe("a claim that read its entry before an edit", () => {
  let f: EngineFixture;
  let time: { ms: number };
  beforeAll(async () => {
    ({ f, time } = await fixedClockFixture(startOfTest()));
  });
  afterAll(() => f.destroy());

  it("claims the edited entry: the runs and the next entry carry the new version and priority", async () => {
    const startAt = new Date(time.ms + 30 * MINUTE);
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { every: "PT1H", startAt: startAt.toISOString() } }),
    );
    // A dispatcher reads the entry...
    const [read] = (await f.dueEntries()).filter((d) => d.jobId === job.jobId);
    if (!read) throw new Error("no due entry");
    // ...an edit that keeps the next occurrence rewrites it under the same key...
    await editJob(f.engine, job.tenantId, job.jobId, 1, {
      payload: { fixed: true },
      priority: "high",
    });
    const [rewritten] = (await f.dueEntries()).filter((d) => d.jobId === job.jobId);
    expect(rewritten?.key).toEqual(read.key);
    expect(rewritten?.jobVersion).toBe(2);
    // ...and then the dispatcher claims what it read, once the occurrence is due.
    time.ms = startAt.getTime();
    const now = new Date(time.ms);
    const result = await claimDueEntry(f.engine, read, {
      now,
      horizonEnd: new Date(now.getTime() + MINUTE),
    });
    expect(result.outcome).toBe("claimed");
    if (result.outcome === "claimed") await sendClaimed(f.engine, result.runs);
    const runs = (await f.runs()).filter((r) => r.jobId === job.jobId);
    expect(runs.map((r) => [r.scheduledFor, r.jobVersion, r.priority])).toEqual([
      [startAt.toISOString(), 2, "high"],
    ]);
    const [next] = (await f.dueEntries()).filter((d) => d.jobId === job.jobId);
    expect(next?.scheduledFor).toBe(new Date(startAt.getTime() + 60 * MINUTE).toISOString());
    expect([next?.jobVersion, next?.priority]).toEqual([2, "high"]);

    // The run executes rather than being skipped as "job edited".
    const delivery = await f.nextDelivery(f.engine.queues.high, job.jobId);
    await f.process(f.workerDeps("worker-1"), delivery);
    const [ran] = (await f.runs()).filter((r) => r.jobId === job.jobId);
    expect([ran?.status, ran?.reason]).toEqual(["SUCCEEDED", null]);
  });
});

describe("overdue entries after an outage of passes", () => {
  let f: EngineFixture;
  let time: { ms: number };
  beforeAll(async () => {
    ({ f, time } = await fixedClockFixture(startOfTest()));
  });
  afterAll(() => f.destroy());

  /**
   * An hourly job whose entry, due half an hour before `writtenAt`, a writer files at `writtenAt`
   * (in that minute's bucket) and does not claim; returns when it is due.
   */
  async function fileOverdueEntry(jobId: string, writtenAt: Date): Promise<Date> {
    const due = new Date(writtenAt.getTime() - 30 * MINUTE);
    const schedule = { every: "PT1H", startAt: due.toISOString() };
    await seedJobs(f, [{ jobId, schedule, dueAt: due, filedAt: writtenAt }], writtenAt);
    return due;
  }

  /** Passes a minute apart until one finds no backlog left; returns them all. */
  async function passesUntilCaughtUp(
    max: number,
    options: { maxBacklogBuckets: number },
  ): Promise<ReturnType<typeof swept>[]> {
    const passes: ReturnType<typeof swept>[] = [];
    for (let i = 0; i < max; i++) {
      const pass = swept(await dispatchShard(f.engine, 0, `pass-${time.ms}`, options));
      passes.push(pass);
      if (pass.backlogBuckets <= 2) return passes;
      time.ms += MINUTE;
    }
    throw new Error(`still catching up after ${max} passes`);
  }

  const minuteAt = (ms: number) => new Date(ms).toISOString().slice(0, 16);
  const msOfMinute = (minute: string | null) => Date.parse(`${minute}:00.000Z`);

  it("a short outage: an entry filed in the current minute while no pass ran is claimed by the first pass after it", async () => {
    swept(await dispatchShard(f.engine, 0, "before-outage"));
    // A minute later a writer files an overdue entry (a resume, a retry, a catch-up) in the
    // current minute's bucket; its own claim did not happen (it crashed, or the claim failed).
    time.ms += MINUTE;
    const writtenAt = new Date(time.ms);
    const due = await fileOverdueEntry("overdue-short", writtenAt);
    // Ten minutes without a pass (tick outage, failing passes, a held lease), then one pass.
    time.ms += 10 * MINUTE;
    swept(await dispatchShard(f.engine, 0, "after-outage"));
    const runs = (await f.runs()).filter((r) => r.jobId === "overdue-short");
    expect(runs.map((r) => r.scheduledFor)).toEqual([due.toISOString()]);
    expect((await f.dueEntries()).filter((d) => d.jobId === "overdue-short")).toEqual([
      expect.objectContaining({
        scheduledFor: new Date(due.getTime() + 60 * MINUTE).toISOString(),
      }),
    ]);
  });

  it("passes by a clock minutes ahead: an entry filed meanwhile in the right minute is claimed once the clocks agree", async () => {
    swept(await dispatchShard(f.engine, 0, "before-skew"));
    // For three minutes the shard's passes run on a host whose clock is ten minutes ahead: each
    // records where the next pass starts by its own clock, ten minutes ahead of the right one.
    const ahead = (ms: number) => ({ ...f.engine, clock: () => new Date(ms + 10 * MINUTE) });
    time.ms += MINUTE;
    swept(await dispatchShard(ahead(time.ms), 0, "ahead-1"));
    // Meanwhile a writer on the right clock files an overdue entry in the current minute.
    const writtenAt = new Date(time.ms + 10 * SECOND);
    const due = await fileOverdueEntry("overdue-skew", writtenAt);
    for (const pass of [2, 3]) {
      time.ms += MINUTE;
      swept(await dispatchShard(ahead(time.ms), 0, `ahead-${pass}`));
    }
    // The clocks agree again: the next pass reads the minutes the skewed ones skipped.
    time.ms += MINUTE;
    swept(await dispatchShard(f.engine, 0, "after-skew"));
    const runs = (await f.runs()).filter((r) => r.jobId === "overdue-skew");
    expect(runs.map((r) => r.scheduledFor)).toEqual([due.toISOString()]);
  });

  it("an entry filed by a writer 10 min behind the passes: the look-back reads its bucket 8 passes on; a claim there that fails for now holds the line at that bucket, and the next pass claims it", async () => {
    time.ms += MINUTE;
    swept(await dispatchShard(f.engine, 0, "before-behind"));
    // A writer whose clock reads 10 minutes less files the overdue entry in its own minute.
    const writtenAt = new Date(time.ms - 10 * MINUTE);
    const due = await fileOverdueEntry("overdue-behind", writtenAt);
    const failing = { on: true };
    f.engine.doc.middlewareStack.add(
      (next, context) => async (args) => {
        if (
          failing.on &&
          context.commandName === "TransactWriteItemsCommand" &&
          JSON.stringify(args.input).includes("JOB#overdue-behind")
        )
          throw new InternalServerError({
            message: "injected",
            $metadata: { httpStatusCode: 500 },
          });
        return next(args);
      },
      { step: "initialize", name: "failingBehindClaim" },
    );
    try {
      const passes: PassResult[] = [];
      for (let minute = 1; minute <= 8; minute++) {
        time.ms += MINUTE;
        passes.push(swept(await dispatchShard(f.engine, 0, `behind-${minute}`)));
      }
      // Each reads one bucket again, 15 minutes behind the line it leaves: the eighth, the
      // writer's minute (the line, two minutes before the pass began, 16 minutes past it).
      expect(passes.map((p) => (p.outcome === "swept" ? p.lookbackBuckets : null))).toEqual(
        Array(8).fill(1),
      );
      expect(passes.map((p) => (p.outcome === "swept" ? p.failed : null))).toEqual([
        ...Array(7).fill(0),
        1,
      ]);
      expect(passes.at(-1)).toMatchObject({ sweepFrom: writtenAt.toISOString().slice(0, 16) });
    } finally {
      failing.on = false;
      f.engine.doc.middlewareStack.remove("failingBehindClaim");
    }
    time.ms += MINUTE;
    const after = swept(await dispatchShard(f.engine, 0, "behind-claims"));
    expect(after.sweepFrom).toBe(new Date(time.ms - 2 * MINUTE).toISOString().slice(0, 16));
    expect((await f.dueEntries()).map((d) => d.scheduledFor)).not.toContain(due.toISOString());
    // One run of the occurrence (the failed claim's put, replaced), and the next hour's within reach.
    const runs = (await f.runs()).filter((r) => r.jobId === "overdue-behind");
    expect(runs.filter((r) => r.scheduledFor === due.toISOString())).toHaveLength(1);
  });

  /**
   * The passes that read on through a backlog longer than one pass's bound, as those after the
   * week-long outage's first (the case below) read its other five days at two days a pass: here
   * the bound is lowered to 20 minutes (`maxBacklogBuckets`, a pass's own option) and the outage
   * to three and a half bounds (70 minutes), some 70 bucket Queries where the rest of the week
   * took 7,200.
   */
  it("a backlog longer than a pass's bound (20 minutes here): each pass reads the bound on from where the last one stopped, until every bucket of the outage is swept", async () => {
    const BOUND_MS = 20 * MINUTE;
    const bound = { maxBacklogBuckets: BOUND_MS / MINUTE };
    time.ms += MINUTE;
    const lineMs = msOfMinute(
      swept(await dispatchShard(f.engine, 0, "before-bounded-outage")).sweepFrom,
    );
    const outageStart = time.ms;
    // Due 10, 30 and 50 minutes into the outage: each in the bound of backlog of another pass.
    const dues = [10, 30, 50].map((m) => new Date(outageStart + m * MINUTE));
    await seedJobs(
      f,
      dues.map((dueAt, i) => ({
        jobId: `bounded-${i}`,
        schedule: { runAt: dueAt.toISOString() },
        dueAt,
      })),
      new Date(outageStart),
    );
    time.ms = outageStart + 3.5 * BOUND_MS;
    const passes = await passesUntilCaughtUp(10, bound);
    const backlog = passes.map((p) => p.backlogBuckets);
    expect(backlog.slice(0, 3)).toEqual(Array(3).fill(bound.maxBacklogBuckets));
    expect(Math.max(...backlog)).toBeLessThanOrEqual(bound.maxBacklogBuckets);
    // Each pass records where it stopped, and the next reads on from there.
    expect(passes.slice(0, 3).map((p) => p.sweepFrom)).toEqual(
      [1, 2, 3].map((n) => minuteAt(lineMs + n * BOUND_MS)),
    );
    expect(Math.max(...passes.map((p) => p.lookbackBuckets))).toBeLessThanOrEqual(15);
    expect(backlog.reduce((a, b) => a + b, 0)).toBeGreaterThanOrEqual(
      3.5 * bound.maxBacklogBuckets,
    );
    const runs = (await f.runs()).filter((r) => r.jobId.startsWith("bounded-"));
    expect(runs.map((r) => [r.jobId, r.status]).sort()).toEqual([
      ["bounded-0", "QUEUED"],
      ["bounded-1", "QUEUED"],
      ["bounded-2", "QUEUED"],
    ]);
  }, 60_000);

  /**
   * The first pass after the outage claims what the clamp lost and reads the default bound of
   * backlog; the passes after it, which read the rest of the week the same way from where it
   * stopped, are the case above at a lower bound. The shard's backlog is left unread: this case
   * is the describe's last.
   */
  it("an outage longer than the old catch-up clamp (a week, the clamp was 6.25 days): the first pass after it reads from the outage's first bucket on, at most the default bound of backlog, and records where the next goes on", async () => {
    time.ms += MINUTE;
    const lineMs = msOfMinute(
      swept(await dispatchShard(f.engine, 0, "before-long-outage")).sweepFrom,
    );
    const outageStart = time.ms;
    time.ms += MINUTE;
    const writtenAt = new Date(time.ms);
    const overdue = new Date(writtenAt.getTime() - 5 * MINUTE);
    await seedJobs(
      f,
      [
        // Filed in the current minute, overdue: the bucket no pass reads again before the outage.
        {
          jobId: "long-overdue",
          schedule: { runAt: overdue.toISOString() },
          dueAt: overdue,
          filedAt: writtenAt,
        },
        // Due half a day and a day into the outage: buckets 6.5 and 6 days old when it ends.
        {
          jobId: "long-daily",
          schedule: { every: "P1D", startAt: new Date(outageStart + DAY).toISOString() },
          dueAt: new Date(outageStart + DAY),
        },
        {
          jobId: "long-oneoff",
          schedule: { runAt: new Date(outageStart + DAY / 2).toISOString() },
          dueAt: new Date(outageStart + DAY / 2),
        },
      ],
      writtenAt,
    );
    time.ms = outageStart + 7 * DAY + 30 * MINUTE;
    const pass = swept(await dispatchShard(f.engine, 0, "after-long-outage"));
    // The test's clock stands still, so the pass's time budget (half a lease) never runs out: the
    // bound is what stops it, and the next pass starts that many buckets on.
    expect(pass.backlogBuckets).toBe(MAX_BACKLOG_BUCKETS_PER_PASS);
    expect(pass.sweepFrom).toBe(minuteAt(lineMs + MAX_BACKLOG_BUCKETS_PER_PASS * MINUTE));
    // The look-back adds at most the 15 buckets before where the pass began.
    expect(pass.lookbackBuckets).toBeLessThanOrEqual(15);

    const runs = await f.runs();
    const of = (jobId: string) => runs.filter((r) => r.jobId === jobId);
    expect(of("long-overdue").map((r) => r.status)).toEqual(["QUEUED"]);
    expect(of("long-oneoff").map((r) => r.status)).toEqual(["QUEUED"]);
    // fire_once: the latest missed day runs, the six before it are recorded SKIPPED.
    const daily = of("long-daily");
    expect(daily.filter((r) => r.status === "QUEUED")).toHaveLength(1);
    expect(daily.filter((r) => r.status === "SKIPPED")).toHaveLength(6);
    // Nothing is left behind in a bucket before now: the daily job's next entry is in the future.
    const left = (await f.dueEntries()).filter((d) => d.jobId.startsWith("long-"));
    expect(left.map((d) => d.jobId)).toEqual(["long-daily"]);
    expect(Date.parse(left[0]?.dueAt ?? "")).toBeGreaterThan(time.ms);
  }, 120_000);
});

describe("a shard's first pass ever", () => {
  let f: EngineFixture;
  let time: { ms: number };
  beforeAll(async () => {
    ({ f, time } = await fixedClockFixture(startOfTest()));
  });
  afterAll(() => f.destroy());

  /** Scan requests the pass sent to DynamoDB: the cost of finding a first pass's backlog. */
  async function countingScans<T>(pass: () => Promise<T>): Promise<{ result: T; scans: number }> {
    let scans = 0;
    const name = "countScans";
    f.engine.doc.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === "ScanCommand") scans++;
        return next(args);
      },
      { step: "initialize", name },
    );
    try {
      return { result: await pass(), scans };
    } finally {
      f.engine.doc.middlewareStack.remove(name);
    }
  }

  it("claims an entry filed in a bucket an hour before it (an outage from deployment on); the next pass does not scan", async () => {
    // No pass has ever run on this shard (no lease item); the job's entry waited an hour.
    const due = new Date(time.ms - 60 * MINUTE);
    await seedJobs(
      f,
      [
        {
          jobId: "first-overdue",
          schedule: { every: "PT1M", startAt: due.toISOString() },
          dueAt: due,
        },
      ],
      due,
    );
    const first = await countingScans(() => dispatchShard(f.engine, 0, "first-pass"));
    swept(first.result);
    const runs = (await f.runs()).filter((r) => r.jobId === "first-overdue");
    expect(runs.filter((r) => r.status === "QUEUED")).not.toHaveLength(0);
    // Its next entry is not left overdue: it is due within the window the recent sweep reads.
    const entries = (await f.dueEntries()).filter((d) => d.jobId === "first-overdue");
    expect(entries).toHaveLength(1);
    expect(Date.parse(entries[0]?.dueAt ?? "")).toBeGreaterThan(time.ms - 2 * MINUTE);
    expect(first.scans).toBeGreaterThanOrEqual(1);

    time.ms += MINUTE;
    const second = await countingScans(() => dispatchShard(f.engine, 0, "second-pass"));
    // A steady pass: the one bucket between the first pass's recent window and its own.
    expect(swept(second.result).backlogBuckets).toBe(1);
    expect(second.scans).toBe(0);
  });

  it("a first pass whose time runs out before the scan reads a page records no sweep position: the next pass scans and claims", async () => {
    const late = await fixedClockFixture(startOfTest());
    try {
      const due = new Date(late.time.ms - 60 * MINUTE);
      await seedJobs(
        late.f,
        [{ jobId: "late-scan", schedule: { runAt: due.toISOString() }, dueAt: due }],
        due,
      );
      // A slow recent sweep: its first read takes past half the lease, the pass's time budget.
      const name = "slowRecentSweep";
      late.f.engine.doc.middlewareStack.add(
        (next, context) => async (args) => {
          if (context.commandName === "QueryCommand") {
            late.time.ms += late.f.engine.settings.leaseMs / 2 + SECOND;
            late.f.engine.doc.middlewareStack.remove(name);
          }
          return next(args);
        },
        { step: "initialize", name },
      );
      const cut = swept(await dispatchShard(late.f.engine, 0, "cut-short"));
      expect(cut.sweepFrom).toBeNull();
      expect((await late.f.runs()).filter((r) => r.jobId === "late-scan")).toEqual([]);

      late.time.ms += MINUTE;
      swept(await dispatchShard(late.f.engine, 0, "after-cut"));
      const runs = (await late.f.runs()).filter((r) => r.jobId === "late-scan");
      expect(runs.map((r) => r.status)).toEqual(["QUEUED"]);
    } finally {
      await late.f.destroy();
    }
  });

  it("a shard a dispatcher without resumed scans completed has no scan left: the next pass reads buckets, and forgets the scan", async () => {
    const mixed = await fixedClockFixture(startOfTest());
    try {
      const key = shardLeaseKey(0);
      const lastPass = new Date(mixed.time.ms - 2 * MINUTE).toISOString().slice(0, 16);
      // A scan a newer pass left unfinished, then completed from the start by an older one.
      await mixed.f.engine.doc.send(
        new PutCommand({
          TableName: mixed.f.engine.tables.jobs,
          Item: {
            ...key,
            owner: "older-dispatcher",
            fence: 3,
            leaseUntil: new Date(mixed.time.ms - MINUTE).toISOString(),
            released: true,
            watermark: lastPass,
            sweepFrom: lastPass,
            scanFrom: { pk: "DUE#2020-01-01T00:00#0", sk: "x" },
            scanBefore: "2020-01-01T00:00",
          },
        }),
      );
      let scans = 0;
      mixed.f.engine.doc.middlewareStack.add(
        (next, context) => async (args) => {
          if (context.commandName === "ScanCommand") scans++;
          return next(args);
        },
        { step: "initialize", name: "countScans" },
      );
      expect(swept(await dispatchShard(mixed.f.engine, 0, "newer")).sweepFrom).not.toBeNull();
      expect(scans).toBe(0);
      const lease = await mixed.f.engine.doc.send(
        new GetCommand({ TableName: mixed.f.engine.tables.jobs, Key: key, ConsistentRead: true }),
      );
      expect(lease.Item).not.toHaveProperty("scanFrom");
      expect(lease.Item).not.toHaveProperty("scanBefore");
    } finally {
      await mixed.f.destroy();
    }
  });

  it("a scan longer than one pass's time goes on where the last pass stopped, and the shard's backlog is claimed", async () => {
    // A fixed instant, not the minute the test runs in: the entries' keys, which the instant names,
    // decide their place in the Scan's pages, and in some minutes every entry but the failing one
    // lay in the first pass's two pages (fresh-clone CI at 00:16: expected 1 to be greater than 1).
    const big = await fixedClockFixture(Date.parse("2030-01-15T10:00:30Z"));
    try {
      // About 4 MB of another shard's entries in the same hour: a Scan reads 1 MB a page, so the
      // table takes five pages, and this shard's entries lie between theirs in any order.
      const hourAgo = big.time.ms - 60 * MINUTE;
      const filler = "x".repeat(4_000);
      const items = Array.from({ length: 1_000 }, (_, i) => ({
        pk: `DUE#${new Date(hourAgo + (i % 60) * MINUTE).toISOString().slice(0, 16)}#1`,
        sk: `filler-${String(i).padStart(4, "0")}`,
        filler,
      }));
      await putItems(big.f, big.f.engine.tables.jobs, items);
      const jobIds = Array.from({ length: 12 }, (_, i) => `scan-${String(i).padStart(2, "0")}`);
      await seedJobs(
        big.f,
        jobIds.map((jobId, i) => {
          const due = new Date(hourAgo + i * 5 * MINUTE);
          return { jobId, schedule: { runAt: due.toISOString() }, dueAt: due, filedAt: due };
        }),
        new Date(hourAgo),
      );
      let pages = 0;
      let key: Record<string, unknown> | undefined;
      do {
        key = (await scanDueEntriesBefore(big.f.engine, 0, "9999-12-31T23:59", key)).nextKey;
        pages++;
      } while (key);
      expect(pages).toBeGreaterThanOrEqual(4);
      // Every page takes over a quarter of the pass's budget (half a lease): a pass reads two.
      const pageTime = big.f.engine.settings.leaseMs / 4 + SECOND;
      let scans = 0;
      // The first pass's first claim fails for a while (DynamoDB failing): its entry stays in
      // its bucket, an hour back, in a part of the table the scan has read and will not again.
      const failing = { on: true, jobId: "" };
      // Pages of 1 MB, as DynamoDB reads them: no limit of items below that.
      pagedScans(big.f, items.length, {
        before: () => {
          scans++;
          big.time.ms += pageTime;
        },
      });
      big.f.engine.doc.middlewareStack.add(
        (next, context) => async (args) => {
          const jobId = /JOB#(scan-\d\d)/.exec(JSON.stringify(args.input))?.[1];
          // A one-off's claim commits with its transaction, or with its job's update when plain
          // claims are on (oneOffClaimWrites): that fails.
          const commit =
            big.f.engine.settings.oneOffClaimWrites === "plain"
              ? context.commandName === "UpdateItemCommand" &&
                (args.input as { TableName?: string }).TableName === big.f.engine.tables.jobs
              : context.commandName === "TransactWriteItemsCommand";
          if (commit && failing.on && jobId) {
            failing.jobId ||= jobId;
            if (jobId === failing.jobId)
              throw new InternalServerError({
                message: "injected",
                $metadata: { httpStatusCode: 500 },
              });
          }
          return next(args);
        },
        { step: "initialize", name: "failingClaim" },
      );
      const unclaimed = async () =>
        (await big.f.dueEntries())
          // The other shard's entries are not whole entries: no job.
          .map((d) => String(d.jobId))
          .filter((id) => id.startsWith("scan-"));
      const scanning: boolean[] = [];
      const unclaimedAfter: string[][] = [];
      for (let pass = 0; pass < 6 && scanning.at(-1) !== false; pass++) {
        scanning.push(
          swept(await dispatchShard(big.f.engine, 0, `scanner-${pass}`)).sweepFrom === null,
        );
        failing.on = false;
        unclaimedAfter.push(await unclaimed());
        big.time.ms += MINUTE;
      }
      // Two pages a pass, each page read once.
      expect(scanning).toHaveLength(Math.ceil(pages / 2));
      expect(scanning.slice(0, -1).every((cut) => cut)).toBe(true);
      expect(scans).toBe(pages);
      expect(unclaimedAfter[0]?.length).toBeGreaterThan(1);
      expect(unclaimedAfter.at(-1)).toEqual([failing.jobId]);

      // The scan is over: the next pass reads buckets, not the table, from the failed entry's on.
      const before = scans;
      swept(await dispatchShard(big.f.engine, 0, "after-scan"));
      expect(scans).toBe(before);
      expect(await unclaimed()).toEqual([]);
    } finally {
      await big.f.destroy();
    }
  }, 120_000);
});

describe("a shard's first scan over many passes", () => {
  let fx: Awaited<ReturnType<typeof fixedClockFixture>>;
  beforeEach(async () => {
    fx = await fixedClockFixture(startOfTest());
  });
  afterEach(() => fx.f.destroy());

  /** Jobs whose entries wait in the buckets of an hour before `nowMs`, one a minute. */
  async function seedBacklog(f: EngineFixture, prefix: string, count: number, nowMs: number) {
    const jobIds = Array.from(
      { length: count },
      (_, i) => `${prefix}-${String(i).padStart(2, "0")}`,
    );
    await seedJobs(
      f,
      jobIds.map((jobId, i) => {
        const due = new Date(nowMs - (60 - i) * MINUTE);
        return { jobId, schedule: { runAt: due.toISOString() }, dueAt: due };
      }),
      new Date(nowMs - 60 * MINUTE),
    );
    return jobIds;
  }

  /** Shard 0's lease item as it stands. */
  async function shardLease(f: EngineFixture) {
    return f.engine.doc.send(
      new GetCommand({
        TableName: f.engine.tables.jobs,
        Key: shardLeaseKey(0),
        ConsistentRead: true,
      }),
    );
  }

  /** The jobs of `jobIds` whose due entry is still in the table. */
  async function unclaimedOf(f: EngineFixture, jobIds: readonly string[]) {
    return (await f.dueEntries()).map((d) => d.jobId).filter((id) => jobIds.includes(id));
  }

  it("a scan begun on a clock 10 minutes ahead and ended on the right one reads again the minutes writers filed into meanwhile", async () => {
    const realStart = fx.time.ms;
    const thisMinute = new Date(realStart).toISOString().slice(0, 16);
    const bucket = `DUE#${thisMinute}#0`;
    // A backlog an hour back, and an entry due in this minute, filed on time.
    await seedBacklog(fx.f, "backlog", 5, realStart);
    const onTime = new Date(realStart - 20 * SECOND);
    await seedJobs(
      fx.f,
      [{ jobId: "on-time", schedule: { runAt: onTime.toISOString() }, dueAt: onTime }],
      new Date(realStart - 60 * MINUTE),
    );
    // Once a page has read this minute's entry, the first pass's time runs out.
    const cut = { on: true };
    pagedScans(fx.f, 1, {
      after: (output) => {
        if (cut.on && JSON.stringify(output).includes(bucket))
          fx.time.ms += fx.f.engine.settings.leaseMs / 2 + SECOND;
      },
    });

    // The shard's first pass runs on a clock 10 minutes ahead: its scan reads the buckets before
    // 8 minutes from now, and its time runs out once it has read this minute's entry.
    fx.time.ms = realStart + 10 * MINUTE;
    expect(swept(await dispatchShard(fx.f.engine, 0, "ahead")).sweepFrom).toBeNull();
    cut.on = false;
    const lease = await shardLease(fx.f);
    const scanFrom = lease.Item?.scanFrom as Record<string, unknown> | undefined;
    expect(scanFrom?.pk).toBe(bucket);

    // A writer on the right clock files an overdue entry into this minute's bucket, in the part
    // of the table the scan has read.
    const writtenAt = new Date(realStart + 20 * SECOND);
    const lateDue = new Date(realStart - 30 * MINUTE);
    await seedJobs(
      fx.f,
      [
        {
          jobId: "late",
          schedule: { every: "PT1H", startAt: lateDue.toISOString() },
          dueAt: lateDue,
          filedAt: writtenAt,
        },
      ],
      writtenAt,
    );
    const rest: string[] = [];
    let key: Record<string, unknown> | undefined = scanFrom;
    do {
      const page = await scanDueEntriesBefore(fx.f.engine, 0, "9999-12-31T23:59", key);
      rest.push(...page.entries.map((d) => d.jobId));
      key = page.nextKey;
    } while (key);
    expect(rest).not.toContain("late");

    // The next two ticks' passes do not run; the one after, on the right clock, ends the scan,
    // and passes go on a minute apart.
    for (let minute = 3; minute <= 8; minute++) {
      fx.time.ms = realStart + minute * MINUTE;
      swept(await dispatchShard(fx.f.engine, 0, `right-${minute}`));
    }
    const left = (await fx.f.dueEntries()).filter((d) => d.key.pk <= bucket).map((d) => d.jobId);
    expect(left).toEqual([]);
    expect((await fx.f.runs()).filter((r) => r.jobId === "late")).not.toEqual([]);
  }, 60_000);

  it("a scan whose Scan is throttled as far into every pass goes on from the page that failed, and the backlog is claimed", async () => {
    const realStart = fx.time.ms;
    const jobIds = await seedBacklog(fx.f, "throttled", 12, realStart);
    // Pages of 4 items, and every pass's third page throttled past the SDK's retries: a
    // provisioned table's burst runs out as far into each pass.
    const perPass = { scans: 0 };
    pagedScans(fx.f, 4, {
      before: () => {
        if (++perPass.scans === 3)
          throw new ProvisionedThroughputExceededException({
            message: "injected",
            $metadata: { httpStatusCode: 400 },
          });
      },
    });
    const unclaimedAfter: string[][] = [];
    for (let pass = 0; pass < 12; pass++) {
      perPass.scans = 0;
      await dispatchShard(fx.f.engine, 0, `throttled-${pass}`).catch(() => null);
      unclaimedAfter.push(await unclaimedOf(fx.f, jobIds));
      fx.time.ms += MINUTE;
    }
    expect(unclaimedAfter[0]?.length).toBeGreaterThan(0);
    expect(unclaimedAfter.at(-1)).toEqual([]);
  }, 60_000);

  it("a pass whose lease lapses mid-scan: the new owner goes on from the last recorded page, the old one's end write records nothing, every entry is claimed once", async () => {
    const jobIds = await seedBacklog(fx.f, "taken", 10, fx.time.ms);
    const step = {
      name: "first" as "first" | "old" | "new",
      scans: 0,
      newPass: null as Promise<PassResult> | null,
    };
    pagedScans(fx.f, 2, {
      before: async () => {
        step.scans++;
        // The old owner's second page takes past its lease; the next tick's pass takes over
        // and runs to its end before that page comes back.
        if (step.name === "old" && step.scans === 2) {
          fx.time.ms += fx.f.engine.settings.leaseMs + SECOND;
          step.name = "new";
          step.newPass = dispatchShard(fx.f.engine, 0, "new-owner");
          await step.newPass;
          step.name = "old";
        }
      },
      after: () => {
        // The first pass reads one page.
        if (step.name === "first") fx.time.ms += fx.f.engine.settings.leaseMs / 2 + SECOND;
      },
    });
    expect(swept(await dispatchShard(fx.f.engine, 0, "first")).sweepFrom).toBeNull();
    const recorded = await shardLease(fx.f);
    expect(recorded.Item?.scanFrom).toBeDefined();

    fx.time.ms += MINUTE;
    step.name = "old";
    step.scans = 0;
    const old = await dispatchShard(fx.f.engine, 0, "old-owner");
    expect(old.outcome).toBe("fence-lost");
    if (!step.newPass) throw new Error("the new owner did not run");
    const taken = swept(await step.newPass);
    expect(taken.tookOver).toBe(true);
    expect(taken.sweepFrom).not.toBeNull();

    const lease = await shardLease(fx.f);
    expect(lease.Item?.sweepFrom).toBe(taken.sweepFrom);
    expect(lease.Item).not.toHaveProperty("scanFrom");
    expect(lease.Item).not.toHaveProperty("scanBefore");
    expect(await unclaimedOf(fx.f, jobIds)).toEqual([]);
    const runs = (await fx.f.runs()).filter((r) => jobIds.includes(r.jobId));
    expect(runs.map((r) => r.jobId).sort()).toEqual(jobIds);
  }, 60_000);

  /**
   * The backlog's bound per pass lowered to 40 minutes (`maxBacklogBuckets`, a pass's own
   * option), and the outage to 45 minutes: the same shape as three days at the default two days a
   * pass (a full first pass, the rest in the next, an entry filed a third of the way in), in some
   * 60 bucket Queries where three days took 4,320. That the default bound holds is the week-long
   * outage's case above.
   */
  it("a scan cut short, then 45 minutes without a pass: the pass that ends it leaves the backlog sweep every bucket since, its bound (40 minutes here) a pass", async () => {
    const OUTAGE_MS = 45 * MINUTE;
    const bound = { maxBacklogBuckets: 40 };
    const realStart = fx.time.ms;
    const jobIds = await seedBacklog(fx.f, "outage", 4, realStart);
    const cut = { on: true };
    pagedScans(fx.f, 2, {
      after: () => {
        if (cut.on) fx.time.ms += fx.f.engine.settings.leaseMs / 2 + SECOND;
      },
    });
    expect(swept(await dispatchShard(fx.f.engine, 0, "cut", bound)).sweepFrom).toBeNull();
    cut.on = false;
    // A writer files an overdue entry a third of the way into the outage, in that minute's bucket.
    const writtenAt = new Date(realStart + OUTAGE_MS / 3);
    const due = new Date(writtenAt.getTime() - 30 * MINUTE);
    await seedJobs(
      fx.f,
      [
        {
          jobId: "outage-late",
          schedule: { runAt: due.toISOString() },
          dueAt: due,
          filedAt: writtenAt,
        },
      ],
      writtenAt,
    );
    fx.time.ms = realStart + OUTAGE_MS;
    const ending = swept(await dispatchShard(fx.f.engine, 0, "ends-scan", bound));
    expect(ending.sweepFrom).not.toBeNull();
    expect(Date.parse(`${ending.sweepFrom}:00.000Z`)).toBeLessThan(realStart);
    const backlog: number[] = [];
    for (let pass = 0; pass < 3; pass++) {
      fx.time.ms += MINUTE;
      backlog.push(
        swept(await dispatchShard(fx.f.engine, 0, `after-${pass}`, bound)).backlogBuckets,
      );
    }
    expect(backlog[0]).toBe(bound.maxBacklogBuckets);
    expect(await unclaimedOf(fx.f, [...jobIds, "outage-late"])).toEqual([]);
  }, 120_000);

  it("a scan goes on from a key whose item is gone: the entry the cut pass read last, which it claimed", async () => {
    const jobIds = await seedBacklog(fx.f, "gone", 10, fx.time.ms);
    // The first pass's time runs out on the first page that holds an entry.
    const cut = { on: true };
    pagedScans(fx.f, 1, {
      after: (output) => {
        const read = (output as { Items?: unknown[] }).Items ?? [];
        if (cut.on && read.length > 0) fx.time.ms += fx.f.engine.settings.leaseMs / 2 + SECOND;
      },
    });
    expect(swept(await dispatchShard(fx.f.engine, 0, "cut")).sweepFrom).toBeNull();
    cut.on = false;
    const scanFrom = (await shardLease(fx.f)).Item?.scanFrom as Record<string, unknown>;
    const item = await fx.f.engine.doc.send(
      new GetCommand({
        TableName: fx.f.engine.tables.jobs,
        Key: scanFrom,
        ConsistentRead: true,
      }),
    );
    expect(item.Item).toBeUndefined();
    expect(await unclaimedOf(fx.f, jobIds)).toHaveLength(jobIds.length - 1);

    fx.time.ms += MINUTE;
    expect(swept(await dispatchShard(fx.f.engine, 0, "resumes")).sweepFrom).not.toBeNull();
    expect(await unclaimedOf(fx.f, jobIds)).toEqual([]);
  }, 60_000);

  it("claims that fail in scanning passes: one for now in the recent sweep is read again after missed ticks, one that would repeat in the scan is set aside", async () => {
    const realStart = fx.time.ms;
    const jobIds = await seedBacklog(fx.f, "failing", 8, realStart);
    const poisoned = jobIds[3];
    const due = new Date(realStart - 10 * SECOND);
    await seedJobs(
      fx.f,
      [{ jobId: "recent-left", schedule: { runAt: due.toISOString() }, dueAt: due }],
      new Date(realStart - 60 * MINUTE),
    );
    const transient = { on: true };
    fx.f.engine.doc.middlewareStack.add(
      (next, context) => async (args) => {
        // A one-off's claim commits with its transaction, or with its job's update when plain
        // claims are on (oneOffClaimWrites): that fails.
        const commit =
          fx.f.engine.settings.oneOffClaimWrites === "plain"
            ? context.commandName === "UpdateItemCommand" &&
              (args.input as { TableName?: string }).TableName === fx.f.engine.tables.jobs
            : context.commandName === "TransactWriteItemsCommand";
        if (commit) {
          const input = JSON.stringify(args.input);
          if (poisoned && input.includes(`JOB#${poisoned}`))
            throw Object.assign(new Error("injected refusal"), {
              name: "ValidationException",
              $metadata: { httpStatusCode: 400 },
            });
          if (transient.on && input.includes("JOB#recent-left"))
            throw new InternalServerError({
              message: "injected",
              $metadata: { httpStatusCode: 500 },
            });
        }
        return next(args);
      },
      { step: "initialize", name: "failingClaims" },
    );
    const cut = { on: true };
    pagedScans(fx.f, 2, {
      after: () => {
        if (cut.on) fx.time.ms += fx.f.engine.settings.leaseMs / 2 + SECOND;
      },
    });
    expect(swept(await dispatchShard(fx.f.engine, 0, "first")).sweepFrom).toBeNull();
    const thisMinute = new Date(realStart).toISOString().slice(0, 16);
    expect((await shardLease(fx.f)).Item?.scanLeftFrom).toBe(thisMinute);
    cut.on = false;
    transient.on = false;

    // Two ticks' passes do not run: the next recent windows start past the left entry's bucket.
    for (let minute = 3; minute <= 5; minute++) {
      fx.time.ms = realStart + minute * MINUTE;
      swept(await dispatchShard(fx.f.engine, 0, `after-${minute}`));
    }
    expect(await unclaimedOf(fx.f, [...jobIds, "recent-left"])).toEqual([]);
    expect((await fx.f.runs()).filter((r) => r.jobId === "recent-left")).toHaveLength(1);
    const aside = await listSetAsideEntries(fx.f.engine, 0);
    expect(aside.map((a) => a.entry.jobId)).toEqual([poisoned]);
  }, 60_000);
});
