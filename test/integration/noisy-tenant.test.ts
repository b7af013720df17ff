import { GetCommand, PutCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sleep } from "../../shared/clock.js";
import { emptySweepStats } from "../../shared/dispatch/claim-chain.js";
import { claimPages } from "../../shared/dispatch/claim-pages.js";
import { dispatchShard, horizonOf, sweepShard } from "../../shared/dispatch/dispatcher.js";
import { createJob } from "../../shared/jobs/index.js";
import { bucketKey, newJobId, triggerSortKey } from "../../shared/keys.js";
import type { DueEntry } from "../../shared/model.js";
import { decodeRunMessage } from "../../shared/queue/work-queue.js";
import { encodeDueEntry } from "../../shared/storage/items.js";
import { getJob } from "../../shared/storage/run-reads.js";
import {
  createEngineFixture,
  type EngineFixture,
  engineAt,
  shiftedClock,
  testJob,
} from "../support/engine-fixture.js";
import { type SeedSpec, seedJobs } from "../support/seed.js";
import { seededDependents } from "../support/seeded-dependents.js";
import { waitFor } from "../support/wait.js";

const SECOND = 1000;
const MINUTE = 60 * SECOND;

/** The tenant of every run the engine sends, in the order sent. */
function recordSends(f: EngineFixture): { tenants: string[]; stop(): void } {
  const tenants: string[] = [];
  const name = `noisy-sends-${Math.random()}`;
  f.engine.sqs.middlewareStack.add(
    (next, context) => async (args) => {
      if (context.commandName === "SendMessageBatchCommand") {
        const input = args.input as { Entries?: { MessageBody?: string }[] };
        for (const entry of input.Entries ?? []) {
          const message = decodeRunMessage(entry.MessageBody);
          if (message) tenants.push(message.tenantId);
        }
      }
      return next(args);
    },
    { step: "initialize", name },
  );
  return { tenants, stop: () => f.engine.sqs.middlewareStack.remove(name) };
}

const oneOffs = (tenantId: string, prefix: string, count: number, dueAt: Date): SeedSpec[] =>
  Array.from({ length: count }, (_, i) => ({
    jobId: `${prefix}${String(i).padStart(5, "0")}`,
    schedule: { runAt: dueAt.toISOString() },
    dueAt,
    tenantId,
  }));

/**
 * A tenant with many entries in a shard's recent buckets, beside a tenant with one: where in the
 * pass the quiet tenant's run is sent. The pass's clock is fixed 20 s into a minute, so which
 * bucket each entry sits in is known, and its engine's clock runs on from there, so how long a
 * claimed run waits for its batch (run-sender.ts: by how far off it is due) does not depend on the
 * machine's second; the claims go one at a time, so the order of the sends is the order of the
 * claims.
 */
async function sweepRecent(
  f: EngineFixture,
  now: Date,
  concurrency: number,
): Promise<{ tenants: string[]; runs: number }> {
  const recording = recordSends(f);
  try {
    const horizon = horizonOf(now, f.engine.settings.lookaheadMs);
    const stats = await sweepShard(engineAt(f.engine, now.getTime()), 0, {
      from: new Date(now.getTime() - 2 * MINUTE),
      to: new Date(horizon.end.getTime() - 1),
      now,
      horizonEnd: horizon.end,
      concurrency,
    });
    return { tenants: recording.tenants, runs: stats.runs };
  } finally {
    recording.stop();
  }
}

describe("a noisy tenant's entries in a dispatcher pass", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({ settings: { shardCount: 1, maxShardCount: 1 } });
  });
  afterAll(() => f.destroy());

  async function sweepAt(now: Date, specs: readonly SeedSpec[]): Promise<string[]> {
    await seedJobs(f, specs, now);
    const { tenants, runs } = await sweepRecent(f, now, 1);
    expect(runs).toBe(specs.length);
    return tenants;
  }

  it("does not hold another tenant's run due now behind its overdue entries in the minute before", async () => {
    // 20 s into a minute: the noisy tenant's 30 one-offs were due 25 s ago (the minute before's
    // bucket: fast-path claims that failed, say), the quiet tenant's is due in 5 s (this minute's).
    const now = new Date(Math.floor(Date.now() / MINUTE) * MINUTE + 20 * SECOND);
    const tenants = await sweepAt(now, [
      ...oneOffs("t-noisy-overdue", "a1-", 30, new Date(now.getTime() - 25 * SECOND)),
      ...oneOffs("t-quiet-due", "z1-", 1, new Date(now.getTime() + 5 * SECOND)),
    ]);
    // Both minutes have begun: their entries take turns, so the quiet run goes out among the first,
    // not after the noisy tenant's 30 (each claim here takes about 10 ms; 50,000 take minutes).
    expect(tenants.indexOf("t-quiet-due")).toBeLessThanOrEqual(2);
  }, 120_000);

  it("still claims a minute to come after every entry of the minute before it, whoever's", async () => {
    // Due first, claimed first: the quiet tenant's run of the next minute waits for the noisy
    // tenant's of this one, which are due before it (and are not late).
    const now = new Date(Math.floor(Date.now() / MINUTE) * MINUTE + 20 * SECOND);
    const tenants = await sweepAt(now, [
      ...oneOffs("t-noisy-now", "a2-", 30, new Date(now.getTime() + 10 * SECOND)),
      ...oneOffs("t-quiet-next", "z2-", 1, new Date(now.getTime() + 50 * SECOND)),
    ]);
    expect(tenants.indexOf("t-quiet-next")).toBe(30);
  }, 120_000);
});

describe("a noisy tenant's fan-outs in a dispatcher pass", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({ settings: { shardCount: 1, maxShardCount: 1 } });
  });
  afterAll(() => f.destroy());

  const DEPENDENTS = 100;
  const FAN_OUTS = 2;

  it("sends another tenant's run claimed beside them without waiting for the fan-outs to end", async () => {
    // The noisy tenant: a job with 100 jobs after it, and two of its runs' trigger entries that
    // their workers did not fan out (they died, say), due 5 s before the pass in this minute's
    // bucket. Each fan-out writes 100 runs, 16 at a time, and sends them itself at its end: seven
    // rounds of writes where the quiet tenant's claim is a run's put, its commit and a send. 300
    // dependents proved no more, nor did four fan-outs: a pass that held the quiet run behind the
    // fan-outs would send it after 100 runs or more, and the case asserts it goes first. The jobs
    // after it are written as their creates would have (what the case asserts starts at the pass).
    const upstream = await createJob(
      f.engine,
      testJob({
        tenantId: "t-fan-out",
        schedule: { runAt: new Date(Date.now() + 24 * 60 * MINUTE).toISOString() },
      }),
    );
    const upstreamId = upstream.job.jobId;
    await seededDependents(f, upstream.job, DEPENDENTS, "completion");
    const job = await getJob(f.engine, upstreamId);
    if (job === null) throw new Error("no upstream job");
    expect(job.dependents).toHaveLength(DEPENDENTS);
    const now = new Date(Math.floor(Date.now() / MINUTE) * MINUTE + 20 * SECOND);
    const endedAt = new Date(now.getTime() - 5 * SECOND);
    for (let i = 0; i < FAN_OUTS; i++) {
      const runId = `${upstreamId}-ended-${i}`;
      const entry: DueEntry = {
        key: { pk: bucketKey(endedAt, 0), sk: triggerSortKey(endedAt, runId) },
        kind: "trigger",
        jobId: upstreamId,
        tenantId: job.tenantId,
        dueAt: endedAt.toISOString(),
        scheduledFor: endedAt.toISOString(),
        attempt: 1,
        jobVersion: job.version,
        priority: job.priority,
        schedule: job.schedule,
        misfire: job.policies.misfire,
        fanOut: { runId, status: "SUCCEEDED", dependents: job.dependents },
      };
      await f.engine.doc.send(
        new PutCommand({ TableName: f.engine.tables.jobs, Item: encodeDueEntry(entry) }),
      );
    }
    // The quiet tenant: one one-off due as the pass begins, behind them in key order (a run due
    // seconds later may wait up to a second for its batch to fill).
    await seedJobs(f, oneOffs("t-quiet-beside", "z3-", 1, now), now);

    // Two claims at once: one takes the first fan-out, the other the quiet tenant's entry (its
    // turn), then the second fan-out.
    const { tenants, runs } = await sweepRecent(f, now, 2);
    expect(runs).toBe(FAN_OUTS * DEPENDENTS + 1);
    // Claimed at once, its run goes out while the first fan-out is still writing, not once the
    // lanes run out of fan-outs to take (after both of them, 200 runs later).
    expect(tenants.indexOf("t-quiet-beside")).toBe(0);
  }, 240_000);
});

describe("a noisy tenant's entries that cannot be claimed, in a dispatcher pass", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({ settings: { shardCount: 1, maxShardCount: 1 } });
  });
  afterAll(() => f.destroy());

  it("sends another tenant's run claimed among them before they are all set aside", async () => {
    const events: string[] = [];
    f.engine.doc.middlewareStack.add(
      (next, context) => async (args) => {
        const result = await next(args);
        const input = args.input as { TransactItems?: { Put?: { Item?: { pk?: unknown } } }[] };
        const aside = input.TransactItems?.some((item) =>
          JSON.stringify(item.Put?.Item?.pk ?? "").includes("ASIDE#"),
        );
        if (aside) events.push(`set aside by ${context.commandName}`);
        return result;
      },
      { step: "initialize", name: "recordSetAside" },
    );
    f.engine.sqs.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === "SendMessageBatchCommand") events.push("sent");
        return next(args);
      },
      { step: "initialize", name: "recordSent" },
    );
    const now = new Date(Math.floor(Date.now() / MINUTE) * MINUTE + 20 * SECOND);
    const dueAt = new Date(now.getTime() - 5 * SECOND);
    // 200 jobs whose stored schedule the schedule core does not read: each claim fails for good and
    // its entry is set aside, one transaction each. The quiet tenant's one-off, due as the pass
    // begins, sorts after them.
    await seedJobs(
      f,
      [
        ...Array.from({ length: 200 }, (_, i) => ({
          jobId: `a4-${String(i).padStart(5, "0")}`,
          schedule: { cron: "not a cron", timezone: "UTC" },
          dueAt,
          tenantId: "t-unclaimable",
        })),
        ...oneOffs("t-quiet-unclaimable", "z4-", 1, now),
      ],
      now,
    );
    const { tenants, runs } = await sweepRecent(f, now, 2);
    expect({ runs, tenants }).toEqual({ runs: 1, tenants: ["t-quiet-unclaimable"] });
    expect(events.filter((e) => e.startsWith("set aside"))).toHaveLength(200);
    // Claimed second, its run went out while the claims went on setting entries aside (100 ms of
    // them, a few dozen), not once all 200 were.
    expect(events.indexOf("sent")).toBeLessThan(100);
  }, 120_000);
});

describe("a noisy tenant's load that holds no one back", () => {
  const time = shiftedClock();
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({
      clock: time.clock,
      settings: { shardCount: 1, maxShardCount: 1 },
    });
  });
  afterAll(() => f.destroy());

  it("a job's 64 KiB payload stays out of its due entry: a bucket's Query page still holds about 2,000 entries", async () => {
    const startAt = new Date(Math.ceil((Date.now() + 2 * 60 * MINUTE) / MINUTE) * MINUTE);
    const { job } = await createJob(
      f.engine,
      testJob({
        tenantId: "t-big-payloads",
        payload: { blob: "x".repeat(64 * 1024 - 100) },
        schedule: { every: "PT1H", startAt: startAt.toISOString() },
      }),
    );
    if (job.nextDueKey === null) throw new Error("no due entry");
    const stored = await f.engine.doc.send(
      new GetCommand({
        TableName: f.engine.tables.jobs,
        Key: job.nextDueKey,
        ConsistentRead: true,
      }),
    );
    const item = stored.Item ?? {};
    expect(item.jobId).toBe(job.jobId);
    expect(JSON.stringify(item).length).toBeLessThan(1_000);
  });

  it("a fire_all catch-up storm after an outage goes after another tenant's run due before the backlog's budget ends", async () => {
    time.offsetMs = Math.floor(Date.now() / MINUTE) * MINUTE + 20 * SECOND - Date.now();
    const before = new Date(time.clock().getTime());
    expect((await dispatchShard(f.engine, 0, "before-outage")).outcome).toBe("swept");
    // Ten per-minute fire_all jobs due a minute on, then 31 minutes without a pass: each has 30
    // occurrences to catch up in the backlog. The quiet tenant's one-off is due a minute after
    // the outage, before the backlog's budget of the first pass after it ends and a minute on
    // (half the default 60 s lease: the minutes up to the one 90 s on, from 20 s into a minute).
    const outageEnd = new Date(before.getTime() + 31 * MINUTE);
    const firstMissed = new Date(before.getTime() - 20 * SECOND + MINUTE);
    await seedJobs(
      f,
      [
        ...Array.from({ length: 10 }, (_, i) => ({
          jobId: `a5-${String(i).padStart(5, "0")}`,
          schedule: { every: "PT1M", startAt: firstMissed.toISOString() },
          dueAt: firstMissed,
          misfire: "fire_all" as const,
          tenantId: "t-catching-up",
        })),
        ...oneOffs("t-quiet-after-outage", "z5-", 1, new Date(outageEnd.getTime() + MINUTE)),
      ],
      before,
    );
    time.offsetMs += 31 * MINUTE;
    const recording = recordSends(f);
    try {
      const pass = await dispatchShard(f.engine, 0, "after-outage");
      expect(pass).toMatchObject({ outcome: "swept" });
      const caughtUp = recording.tenants.filter((t) => t === "t-catching-up").length;
      expect(caughtUp).toBeGreaterThanOrEqual(10 * 30);
      // What is due while the backlog may be read first: the quiet run went out before any of the
      // catch-up's.
      expect(recording.tenants.indexOf("t-quiet-after-outage")).toBe(0);
    } finally {
      recording.stop();
    }
  }, 120_000);
  // An entry in the backlog (missed by passes that did not run, or one whose claim failed for now,
  // which holds `sweepFrom` at its bucket) is late already; a noisy tenant's entries in a bucket
  // minutes ahead are not due yet. A pass claims the backlog after the recent buckets due before
  // its backlog's budget can end (and a minute on), and before the rest of its recent window.
  it("another tenant's entry late in the backlog goes out before a noisy tenant's entries due minutes ahead", async () => {
    // On from where the case before left the clock (a pass's line only moves forward), 20 s into
    // a minute.
    const at = time.clock().getTime();
    time.offsetMs += Math.ceil(at / MINUTE) * MINUTE + MINUTE + 20 * SECOND - at;
    const before = new Date(time.clock().getTime());
    expect((await dispatchShard(f.engine, 0, "before-gap")).outcome).toBe("swept");
    // Ten minutes without a pass. The quiet tenant's one-off was due 5 minutes into them (its
    // bucket is backlog for the next pass); the noisy tenant's 60 are due 3 minutes after the
    // gap, in a bucket of the next pass's recent window. A pass that claimed its whole window
    // before the backlog would send the quiet run after all of them, 60 where it must be among
    // the first 16 (the pass's claim lanes): more would prove no more.
    const gapEnd = new Date(before.getTime() + 10 * MINUTE);
    await seedJobs(
      f,
      [
        ...oneOffs("t-quiet-late", "a6-", 1, new Date(before.getTime() + 5 * MINUTE)),
        ...oneOffs("t-noisy-ahead", "z6-", 60, new Date(gapEnd.getTime() + 3 * MINUTE)),
      ],
      before,
    );
    time.offsetMs += 10 * MINUTE;
    const recording = recordSends(f);
    try {
      const pass = await dispatchShard(f.engine, 0, "after-gap");
      expect(pass).toMatchObject({ outcome: "swept" });
      // The two tenants' runs alone: the case before's per-minute jobs go on being claimed too.
      const sent = recording.tenants.filter((t) => t === "t-quiet-late" || t === "t-noisy-ahead");
      expect(sent.filter((t) => t === "t-noisy-ahead")).toHaveLength(60);
      // Five minutes late already, it should go out among the first claims (16 lanes), not after
      // every run of the noisy tenant's that is due three minutes from now.
      expect(sent.indexOf("t-quiet-late")).toBeLessThan(16);
    } finally {
      recording.stop();
    }
  }, 120_000);
});

describe("a pass's late entries between the two parts of its recent window (30 s lease, 3-minute lookahead)", () => {
  // The backlog's budget is half the lease: 15 s from the pass's start. From 35 s into a minute,
  // the recent buckets claimed before the backlog (or the first pass's scan) are those up to the
  // next minute's (the minutes that begin before the budget's end and a minute on, 1:50 on the
  // minute), the rest of the window after it. A 60 s lease would take the minute after that too.
  const time = shiftedClock();
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({
      clock: time.clock,
      settings: { shardCount: 1, maxShardCount: 1, leaseMs: 30 * SECOND, lookaheadMs: 3 * MINUTE },
    });
  });
  afterAll(() => f.destroy());

  /**
   * Seeds a tenant's entry due at `lateDueAt` (late for the pass at `passAt`), 30 of a tenant's
   * due 70 s after `passAt` (1:45 on the minute: in the first part, 55 s after the budget ends)
   * and 30 of a tenant's due 90 s after it (2:05 on: the window's rest); then passes at `passAt`
   * and returns the tenants of the runs it sends, in order.
   */
  async function passOrder(prefix: string, lateDueAt: Date, passAt: Date): Promise<string[]> {
    const seededAt = time.clock();
    await seedJobs(
      f,
      [
        ...oneOffs("t-late", `${prefix}a-`, 1, lateDueAt),
        ...oneOffs("t-due-soon", `${prefix}m-`, 30, new Date(passAt.getTime() + 70 * SECOND)),
        ...oneOffs("t-due-later", `${prefix}z-`, 30, new Date(passAt.getTime() + 90 * SECOND)),
      ],
      seededAt,
    );
    time.offsetMs += passAt.getTime() - seededAt.getTime();
    const recording = recordSends(f);
    try {
      expect(await dispatchShard(f.engine, 0, `pass-${prefix}`)).toMatchObject({
        outcome: "swept",
      });
      return [...recording.tenants];
    } finally {
      recording.stop();
    }
  }

  function expectOrder(sent: readonly string[]) {
    expect(sent.filter((t) => t === "t-due-soon")).toHaveLength(30);
    expect(sent.filter((t) => t === "t-due-later")).toHaveLength(30);
    // Due before the backlog's budget ends and a minute on: claimed before the late entry, so
    // not made late by it; due after that, claimed after it.
    expect(sent.indexOf("t-late")).toBe(30);
  }

  it("the first pass's scan for a shard's backlog goes between them", async () => {
    const at = Date.now();
    const passAt = new Date(Math.ceil(at / MINUTE) * MINUTE + 35 * SECOND);
    time.offsetMs = passAt.getTime() - 10 * SECOND - at;
    expectOrder(await passOrder("s7-", new Date(passAt.getTime() - 5 * MINUTE), passAt));
  }, 120_000);

  it("a backlog after passes that did not run goes between them", async () => {
    const at = time.clock().getTime();
    time.offsetMs += Math.ceil(at / MINUTE) * MINUTE + MINUTE + 35 * SECOND - at;
    const before = time.clock();
    expect((await dispatchShard(f.engine, 0, "before-gap")).outcome).toBe("swept");
    // Ten minutes without a pass; the late entry was due five minutes into them.
    const passAt = new Date(before.getTime() + 10 * MINUTE);
    expectOrder(await passOrder("b7-", new Date(before.getTime() + 5 * MINUTE), passAt));
  }, 120_000);
});

describe("a noisy tenant's trigger entries read ahead by a pass", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({ settings: { shardCount: 1, maxShardCount: 1 } });
  });
  afterAll(() => f.destroy());

  it("are held by what they weigh, not one each: 1,000 dependents' ids are 55 KB an entry", async () => {
    const now = new Date();
    const dependents = Array.from({ length: 1_000 }, (_, i) =>
      newJobId(new Date(now.getTime() + i)),
    );
    const upstreamId = newJobId(now);
    const entryOf = (n: number): DueEntry => {
      const runId = `${upstreamId}-run-${n}`;
      return {
        key: { pk: bucketKey(now, 0), sk: triggerSortKey(now, runId) },
        kind: "trigger",
        jobId: upstreamId,
        tenantId: "t-many-triggers",
        dueAt: now.toISOString(),
        scheduledFor: now.toISOString(),
        attempt: 1,
        jobVersion: 1,
        priority: "normal",
        schedule: { runAt: now.toISOString() },
        misfire: "fire_once",
        fanOut: { runId, status: "SUCCEEDED", dependents },
      };
    };
    // A bucket's Query pages of such entries (a page is 1 MB, 34 of them), 3,000 in all; the
    // reading stops the pass (it throws) once the case has looked at how far it read ahead.
    let read = 0;
    let stopReading = false;
    async function* pages(): AsyncGenerator<DueEntry[]> {
      while (!stopReading && read < 3_000) {
        const page = Array.from({ length: 34 }, (_, i) => entryOf(read + i));
        read += page.length;
        yield page;
      }
      throw new Error("the case stopped reading");
    }
    // One claim at a time, held at its first request until the case has read how far the pass
    // read ahead; then every request fails, and the pass, asking for the next page, stops.
    let stopClaims: (error: Error) => void = () => undefined;
    const claimsHeld = new Promise<never>((_, reject) => {
      stopClaims = reject;
    });
    claimsHeld.catch(() => undefined);
    f.engine.doc.middlewareStack.add(
      (next) => async (args) => {
        await claimsHeld;
        return next(args);
      },
      { step: "initialize", name: "holdClaims" },
    );
    const pass = claimPages(
      f.engine,
      0,
      pages(),
      { now, horizonEnd: new Date(now.getTime() + 6 * MINUTE), concurrency: 1 },
      emptySweepStats(),
    ).then(
      () => "ended",
      (error: unknown) => String(error),
    );
    // The pages are the case's, in memory: the pass reads them as fast as the machine lets it, and
    // stops at the bound however long that takes. So the case waits for it to read 350, then gives
    // it a second more to read past the bound if it would.
    let readAhead = Number.NaN;
    try {
      await waitFor("the pass to read 350 entries ahead", () => read >= 350, 30_000);
      await sleep(1_000);
      readAhead = read;
    } finally {
      stopReading = true;
      stopClaims(new Error("the case stopped the claims"));
    }
    expect(await pass).toContain("the case stopped reading");
    f.engine.doc.middlewareStack.remove("holdClaims");
    // 50,000 entries' worth of memory (some 25 MB) is about 400 of these: 22 MB. Counted one each,
    // all 3,000 were read at once (165 MB; 50,000 would be 2.7 GB).
    expect(readAhead).toBeLessThanOrEqual(450);
    expect(readAhead).toBeGreaterThanOrEqual(350);
  }, 120_000);
});
