import { UpdateCommand } from "@aws-sdk/lib-dynamodb";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { CLOCK_DISAGREEMENT_MS } from "../../shared/clock.js";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import { REAPER_SETTLE_MS, reap } from "../../shared/dispatch/reaper.js";
import { REAPER_TIME_MARGIN_MS } from "../../shared/dispatch/reaper-time.js";
import { fanOutTick } from "../../shared/dispatch/tick-fan-out.js";
import { readTickShards } from "../../shared/dispatch/tick-shards.js";
import type { Engine } from "../../shared/engine.js";
import { recoverLostMessages } from "../../shared/execution/restart-recovery.js";
import { createJob, triggerJob } from "../../shared/jobs/index.js";
import { shardOf } from "../../shared/keys.js";
import { METRICS } from "../../shared/observability.js";
import { deleteMessages } from "../../shared/queue/work-queue.js";
import { inflightPk, reaperStartKey } from "../../shared/storage/items.js";
import {
  advanceReaperCursor,
  cursorDeadline,
  readReaperCursors,
  rewindReaperCursor,
} from "../../shared/storage/reaper-cursor.js";
import { getRunItem } from "../../shared/storage/run-reads.js";
import { runKey } from "../../shared/storage/runs.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { withFaults } from "../support/faults.js";
import { createTestClients, scanTable } from "../support/namespace.js";
import { putItems } from "../support/seed.js";

const LEASE_MS = 60_000;

/** The engine's clock runs `offsetMs` ahead of the machine's, so a test can reach a deadline. */
let offsetMs = 0;
const clock = () => new Date(Date.now() + offsetMs);

let f: EngineFixture;
beforeEach(async () => {
  offsetMs = 0;
  // One shard, so that every run's entry lies in the index range one cursor walks.
  f = await createEngineFixture({
    settings: { leaseMs: LEASE_MS, shardCount: 1, maxShardCount: 1 },
    clock,
  });
});
afterEach(() => f.destroy());

/** A one-off due now: its message is sent by the create (the fast path). */
async function dueNow() {
  const { job } = await createJob(
    f.engine,
    testJob({ schedule: { runAt: clock().toISOString() } }),
  );
  return { job, delivery: await f.nextDelivery(f.engine.queues.normal, job.jobId) };
}

async function finished() {
  const { job, delivery } = await dueNow();
  expect(await f.process(f.workerDeps("w"), delivery)).toBe("ack");
  return { job, run: runKey(job.jobId, delivery.message.scheduledFor, delivery.message.attempt) };
}

/** Claimed and queued, and its message lost before any worker took it. */
async function lost() {
  const { job, delivery } = await dueNow();
  await deleteMessages(f.engine.sqs, delivery.queueUrl, [delivery.receiptHandle]);
  return { job, run: runKey(job.jobId, delivery.message.scheduledFor, delivery.message.attempt) };
}

/**
 * A run claimed at once (the fast path) and queued due in five minutes, so its entry lies six
 * ahead, read and passed by a reaper on a clock ten minutes ahead.
 */
async function passedByAClockAhead() {
  await createJob(
    f.engine,
    testJob({ schedule: { runAt: new Date(clock().getTime() + 5 * 60_000).toISOString() } }),
  );
  offsetMs = 10 * 60_000;
  expect((await reap(f.engine)).examined).toBe(1);
}

/** The tick Lambda's timeout, and the time between ticks. */
const TICK_MS = 60_000;

/**
 * Ticks as Lambda invocations on the test's clock, each a minute after the one before began: a
 * request once its minute is up is never made (Lambda stops the process), and each request takes
 * `costMs` of it (DynamoDB throttling, the SDK's retries: slowness the emulator cannot be made to
 * show). `begin` starts the next tick and gives its `context.getRemainingTimeInMillis`.
 */
function lambdaTicks(
  engine: Engine,
  costMs: (command: string, input: Record<string, unknown>) => number,
  /** Taken once the answer is in: a cost that grows with what the request read. */
  answerCostMs: (command: string, output: Record<string, unknown>) => number = () => 0,
) {
  const clients = createTestClients({ maxSockets: 8 });
  let began = 0;
  const remainingMs = () => began + TICK_MS - clock().getTime();
  clients.doc.middlewareStack.add(
    (next, context) => async (args) => {
      if (began > 0 && remainingMs() <= 0) throw new Error("Task timed out after 60.00 seconds");
      offsetMs += costMs(String(context.commandName), args.input as Record<string, unknown>);
      const answer = await next(args);
      offsetMs += answerCostMs(
        String(context.commandName),
        answer.output as unknown as Record<string, unknown>,
      );
      return answer;
    },
    { step: "initialize", name: "lambdaTicks" },
  );
  return {
    engine: { ...engine, doc: clients.doc },
    begin() {
      offsetMs += began === 0 ? TICK_MS : began + TICK_MS - clock().getTime();
      began = clock().getTime();
      return remainingMs;
    },
    destroy: () => clients.destroy(),
  };
}

/** A read of a shard's `inflight` index: the reaper's one request for a shard with nothing due. */
const isIndexRead = (command: string, input: Record<string, unknown>) =>
  command.startsWith("Query") && input.IndexName === "inflight";

/** `count` ended runs' entries in shard 0 at `deadline(i)`, as bare items (keys, deadline, status). */
async function endedEntries(count: number, deadline: (i: number) => string) {
  const items = Array.from({ length: count }, (_, i) => ({
    pk: "JOB#ended-filler",
    sk: `RUN#${String(i).padStart(6, "0")}`,
    jobId: "ended-filler",
    status: "SUCCEEDED",
    inflightPk: inflightPk(0),
    inflightSk: deadline(i),
  }));
  await putItems(f, f.engine.tables.runs, items);
}

/**
 * `count` index entries of runs that ended, in shard 0, filed just before `before` (the deadline
 * of a lost run's entry, which they come ahead of), `apartMs` apart: what a busy shard holds
 * behind its cursor.
 */
async function endedEntriesBefore(before: string, count: number, apartMs = 1) {
  const at = Date.parse(before) - 1_000;
  await endedEntries(count, (i) => new Date(at - (count - i) * apartMs).toISOString());
}

/** Past every deadline written so far (a lease after now), as the next tick would be. */
const pastTheDeadlines = () => {
  offsetMs += LEASE_MS + 15_000;
};

describe("the reaper's cursor", () => {
  it("a run that ended keeps its index entry, which the reaper reads once and then passes", async () => {
    const { run } = await finished();
    // The end write leaves the entry: removing it would be an index write on every run.
    expect((await getRunItem(f.engine, run))?.inflightSk).toEqual(expect.any(String));

    pastTheDeadlines();
    expect(await reap(f.engine)).toEqual({ examined: 1, resent: 0, shardsReached: 1 });
    expect((await readReaperCursors(f.engine, [0])).get(0)).toMatchObject({ after: run });
    expect(await reap(f.engine)).toEqual({ examined: 0, resent: 0, shardsReached: 1 });
  }, 30_000);

  it("finds a lost run among ended ones, and passes it only once it is re-sent", async () => {
    await finished();
    const missing = await lost();
    await finished();
    pastTheDeadlines();

    const first = await reap(f.engine);
    expect(first).toEqual({ examined: 3, resent: 1, shardsReached: 1 });
    const again = await f.nextDelivery(f.engine.queues.normal, missing.job.jobId);
    expect(again.message.jobId).toBe(missing.job.jobId);
    // Re-filed a lease on: not read again until then.
    expect(await reap(f.engine)).toEqual({ examined: 0, resent: 0, shardsReached: 1 });
    await deleteMessages(f.engine.sqs, again.queueUrl, [again.receiptHandle]);
    pastTheDeadlines();
    expect(await reap(f.engine)).toEqual({ examined: 1, resent: 1, shardsReached: 1 });
  }, 30_000);

  it("reports how far a pass that stopped at its maximum left the reading behind, and 0 once caught up", async () => {
    await finished();
    await finished();
    pastTheDeadlines();
    const behind = () =>
      f.metrics.points.filter((p) => p.name === METRICS.reaperBehindMs).map((p) => p.value);

    expect((await reap(f.engine, { maxPerShard: 1 })).examined).toBe(1);
    const [cutShort] = behind();
    // It stopped at the first entry, a lease after its run was due; its settle line is 5 s behind
    // a clock a lease and 15 s on, so the second entry waits at least 10 s behind that line.
    expect(cutShort).toBeGreaterThanOrEqual(10_000);
    expect((await reap(f.engine)).examined).toBe(1);
    expect(behind().at(-1)).toBe(0);
  }, 30_000);

  it("stops before an entry it failed on, so the next pass sends that run", async () => {
    const before = await finished();
    const missing = await lost();
    pastTheDeadlines();
    const faulty = withFaults(f.engine, {
      operation: "UpdateItem",
      times: 1,
      match: (input) => (input.Key as { sk?: string } | undefined)?.sk === missing.run.sk,
      error: () =>
        Object.assign(new Error("Rate of requests exceeds the allowed throughput"), {
          name: "ThrottlingException",
        }),
    });
    try {
      await expect(reap(faulty.engine)).rejects.toThrow(/allowed throughput/);
      expect(faulty.injected.count).toBe(1);
    } finally {
      faulty.destroy();
    }
    // The ended run before it was passed; the lost run was not.
    expect((await readReaperCursors(f.engine, [0])).get(0)).toMatchObject({ after: before.run });
    expect(await reap(f.engine)).toEqual({ examined: 1, resent: 1, shardsReached: 1 });
    const resent = await f.nextDelivery(f.engine.queues.normal, missing.job.jobId);
    expect(await f.process(f.workerDeps("w"), resent)).toBe("ack");
  }, 30_000);

  it("a run that ended after the reaper read it is not sent again, and is passed", async () => {
    const { job, delivery } = await dueNow();
    pastTheDeadlines();
    // The reaper reads the run QUEUED; its worker finishes it before the reaper's conditional push.
    const clients = createTestClients({ maxSockets: 8 });
    let finishedFirst = false;
    clients.doc.middlewareStack.add(
      (next, context) => async (args) => {
        const update = String((args.input as { UpdateExpression?: string }).UpdateExpression);
        if (
          !finishedFirst &&
          String(context.commandName).startsWith("UpdateItem") &&
          update.startsWith("SET inflightSk")
        ) {
          finishedFirst = true;
          expect(await f.process(f.workerDeps("w"), delivery)).toBe("ack");
        }
        return next(args);
      },
      { step: "initialize", name: "finishBeforePush" },
    );
    try {
      expect(await reap({ ...f.engine, doc: clients.doc })).toEqual({
        examined: 1,
        resent: 0,
        shardsReached: 1,
      });
    } finally {
      clients.destroy();
    }
    expect(finishedFirst).toBe(true);
    expect((await f.runs()).filter((r) => r.jobId === job.jobId).map((r) => r.status)).toEqual([
      "SUCCEEDED",
    ]);
    expect(await reap(f.engine)).toEqual({ examined: 0, resent: 0, shardsReached: 1 });
  }, 30_000);

  it("a cursor moved by a clock ahead is read from well behind, so a run lost since is found", async () => {
    await passedByAClockAhead();
    // Back to the right time: a run queued now lies behind that cursor.
    offsetMs = 0;
    const missing = await lost();
    pastTheDeadlines();
    expect((await reap(f.engine)).resent).toBe(1);
    const resent = await f.nextDelivery(f.engine.queues.normal, missing.job.jobId);
    expect(resent.message.jobId).toBe(missing.job.jobId);
  }, 30_000);

  it("a cursor moved by a clock ahead: a run lost just behind it, due after the pass that read back, is found", async () => {
    await passedByAClockAhead();
    const cursor = (await readReaperCursors(f.engine, [0])).get(0);
    const ahead = cursor ? cursorDeadline(cursor) : "";
    // On the right clock again, a run is queued whose deadline lies a little behind that cursor,
    offsetMs = Date.parse(ahead) - Date.now() - LEASE_MS - 5_000;
    const missing = await lost();
    expect(String((await getRunItem(f.engine, missing.run))?.inflightSk) < ahead).toBe(true);
    // read back by a pass before it is due, and due only once the passes' line is past the cursor.
    offsetMs = Date.parse(ahead) - Date.now() - 10_000;
    expect((await reap(f.engine)).resent).toBe(0);
    offsetMs = Date.parse(ahead) - Date.now() + 60_000;
    expect((await reap(f.engine)).resent).toBe(1);
    const resent = await f.nextDelivery(f.engine.queues.normal, missing.job.jobId);
    expect(resent.message.jobId).toBe(missing.job.jobId);
  }, 30_000);

  it("a cursor moved back to a lost run's very deadline reads that run", async () => {
    const missing = await lost();
    const deadline = Date.parse(String((await getRunItem(f.engine, missing.run))?.inflightSk));
    // Moved 20 minutes past it by a pass on a clock ahead,
    const ahead = { pk: "JOB#ahead", sk: "RUN#x", deadline: new Date(deadline + 20 * 60_000) };
    await advanceReaperCursor(f.engine, 0, { ...ahead, deadline: ahead.deadline.toISOString() });
    // and back, by a pass whose line lies behind it, to exactly the lost run's deadline.
    const now = new Date(deadline + REAPER_SETTLE_MS + CLOCK_DISAGREEMENT_MS);
    expect((await reap(f.engine, { now })).resent).toBe(1);
    expect((await readReaperCursors(f.engine, [0])).get(0)).toMatchObject({
      after: { sk: missing.run.sk, deadline: new Date(deadline).toISOString() },
    });
  });

  it("a cursor is moved back only from where the pass read it", async () => {
    const entry = { pk: "JOB#a", sk: "RUN#x", deadline: "2030-01-01T00:10:00.000Z" };
    await advanceReaperCursor(f.engine, 0, entry);
    // A pass that read it elsewhere (another pass moved it since) leaves it.
    await rewindReaperCursor(
      f.engine,
      0,
      { from: "2030-01-01T00:20:00.000Z" },
      "2029-12-31T23:55:00.000Z",
    );
    expect((await readReaperCursors(f.engine, [0])).get(0)).toEqual({ after: entry });
    await rewindReaperCursor(f.engine, 0, { after: entry }, "2029-12-31T23:55:00.000Z");
    expect((await readReaperCursors(f.engine, [0])).get(0)).toEqual({
      from: "2029-12-31T23:55:00.000Z",
    });
    // And forward again from there.
    await advanceReaperCursor(f.engine, 0, entry);
    expect((await readReaperCursors(f.engine, [0])).get(0)).toEqual({ after: entry });
  });

  it("a pass out of the tick's time every minute still reaches every shard in turn", async () => {
    const shardCount = 4;
    const engine = {
      ...f.engine,
      settings: { ...f.engine.settings, shardCount, maxShardCount: shardCount },
    };
    // A lost run in every shard.
    const missing = new Map<number, string>();
    while (missing.size < shardCount) {
      const { job } = await createJob(
        engine,
        testJob({ schedule: { runAt: clock().toISOString() } }),
      );
      const delivery = await f.nextDelivery(engine.queues.normal, job.jobId);
      await deleteMessages(engine.sqs, delivery.queueUrl, [delivery.receiptHandle]);
      const shard = shardOf(job.jobId, shardCount);
      if (!missing.has(shard)) missing.set(shard, job.jobId);
    }
    // Each shard's read takes 25 s of the tick's minute.
    const ticks = lambdaTicks(engine, (command, input) =>
      isIndexRead(command, input) ? 25_000 : 0,
    );
    const resent = new Set<string>();
    offsetMs += LEASE_MS;
    try {
      for (let pass = 0; pass < shardCount; pass++) {
        // It stops before the Lambda's time is up (it would throw "Task timed out" here).
        await reap(ticks.engine, { remainingMs: ticks.begin() });
        const runs = await f.runs();
        for (const [, jobId] of missing) {
          const run = runs.find((r) => r.jobId === jobId);
          if (run?.misfireFrom) resent.add(jobId);
        }
      }
    } finally {
      ticks.destroy();
    }
    expect([...missing.values()].filter((jobId) => !resent.has(jobId))).toEqual([]);
  }, 60_000);

  it("a claim written late in a long dispatcher pass lies ahead of a cursor moved meanwhile", async () => {
    // A short lease (the least leaseSeconds allows is 6): a pass that runs longer than a lease
    // writes its late claims after a reaper on the same clock can have passed their deadline.
    const leaseMs = 10_000;
    const engine = { ...f.engine, settings: { ...f.engine.settings, leaseMs } };
    const start = clock().getTime();
    // Due past the fast-path window, so a dispatcher pass claims it.
    const dueAt = new Date(start + engine.settings.lookaheadMs + 5 * 60_000);
    const { job } = await createJob(engine, testJob({ schedule: { runAt: dueAt.toISOString() } }));
    offsetMs = dueAt.getTime() - Date.now();

    // The pass reads its clock, then stalls before reading its buckets (many claims ahead of it).
    const clients = createTestClients({ maxSockets: 8 });
    let release = () => {};
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    let stalled = false;
    clients.doc.middlewareStack.add(
      (next, context) => async (args) => {
        const input = args.input as { TableName?: string };
        if (
          !stalled &&
          String(context.commandName).startsWith("Query") &&
          input.TableName === engine.tables.jobs
        ) {
          stalled = true;
          await released;
        }
        return next(args);
      },
      { step: "initialize", name: "longPass" },
    );
    try {
      const pass = dispatchShard({ ...engine, doc: clients.doc }, 0, "long-pass");
      await expect.poll(() => stalled).toBe(true);
      // Meanwhile a run is queued, ends, and a reaper past its deadline moves the cursor over it.
      offsetMs += 2_000;
      const { job: other } = await createJob(
        engine,
        testJob({ schedule: { runAt: clock().toISOString() } }),
      );
      const delivery = await f.nextDelivery(engine.queues.normal, other.jobId);
      expect(await f.process({ ...f.workerDeps("w"), engine }, delivery)).toBe("ack");
      offsetMs += leaseMs + REAPER_SETTLE_MS + 3_000;
      expect(await reap(engine)).toEqual({ examined: 1, resent: 0, shardsReached: 1 });
      expect((await readReaperCursors(engine, [0])).get(0)).toMatchObject({
        after: { pk: `JOB#${other.jobId}` },
      });
      // The pass goes on: it claims the job and sends its run, and that message is lost.
      release();
      await pass;
    } finally {
      release();
      clients.destroy();
    }
    const sent = await f.nextDelivery(engine.queues.normal, job.jobId);
    await deleteMessages(engine.sqs, sent.queueUrl, [sent.receiptHandle]);

    offsetMs += leaseMs + REAPER_SETTLE_MS + 3_000;
    expect((await reap(engine)).resent).toBe(1);
    const again = await f.nextDelivery(engine.queues.normal, job.jobId);
    expect(await f.process({ ...f.workerDeps("w"), engine }, again)).toBe("ack");
  }, 60_000);
});

describe("the reaper within the tick's time", () => {
  it("a tick that cannot read every shard in its time still reaches every shard within a bounded number of ticks", async () => {
    // A stage at a high shard count (scaled down: what matters is that a tick cannot read them all).
    const shards = 32;
    const engine = {
      ...f.engine,
      settings: { ...f.engine.settings, shardCount: shards, maxShardCount: shards },
    };
    // A run queued in the last shard, its message lost; every other shard holds no run.
    const later = { runAt: new Date(clock().getTime() + 86_400_000).toISOString() };
    let lost: string | undefined;
    while (lost === undefined) {
      // A one-off a day ahead files a due entry only: no run, nothing in the `inflight` index.
      const { job } = await createJob(engine, testJob({ schedule: later }));
      if (shardOf(job.jobId, shards) !== shards - 1) continue;
      await triggerJob(engine, job.tenantId, job.jobId);
      await f.purge();
      lost = job.jobId;
    }
    offsetMs += LEASE_MS;
    // Each shard's read of its index takes 5 s of the tick's minute.
    const slowQueryMs = 5_000;
    const reached = new Set<unknown>();
    const ticks = lambdaTicks(engine, (command, input) => {
      if (!isIndexRead(command, input)) return 0;
      reached.add((input.ExpressionAttributeValues as Record<string, unknown>)[":pk"]);
      return slowQueryMs;
    });
    const everyShard = Array.from({ length: shards }, (_, shard) => inflightPk(shard));
    let tickCount = 0;
    let timedOut = 0;
    try {
      // Every tick reaches at least one shard, so this many ticks reach them all.
      while (tickCount < shards && everyShard.some((pk) => !reached.has(pk))) {
        tickCount++;
        const remainingMs = ticks.begin();
        const tickShards = await readTickShards(ticks.engine, clock());
        await reap(ticks.engine, { shards: tickShards, remainingMs }).catch((error: unknown) => {
          expect(String(error)).toMatch(/timed out/);
          timedOut++;
        });
      }
    } finally {
      ticks.destroy();
    }
    expect(everyShard.filter((pk) => !reached.has(pk))).toEqual([]);
    const [run] = (await f.runs()).filter((r) => r.jobId === lost);
    expect(run?.misfireFrom).toEqual(expect.any(String));
    // It stopped on its own each time, before the Lambda was stopped under it,
    expect(timedOut).toBe(0);
    // and went round in as many ticks as the shards a tick's time holds allow.
    const perTick = Math.floor((TICK_MS - REAPER_TIME_MARGIN_MS - slowQueryMs) / slowQueryMs);
    expect(tickCount).toBeLessThanOrEqual(Math.ceil(shards / perTick));
  }, 30_000);

  /** `ReaperLongestUnread` after each pass so far, in whole ticks. */
  const unreadTicks = () =>
    f.metrics.points
      .filter((p) => p.name === METRICS.reaperLongestUnreadMs)
      .map((p) => Math.round(p.value / TICK_MS));

  it("reports how long ago the shard longest unread was read, and 0 once a pass reads every shard", async () => {
    const shardCount = 4;
    const engine = {
      ...f.engine,
      settings: { ...f.engine.settings, shardCount, maxShardCount: shardCount },
    };
    // Each shard's read takes 25 s of the tick's minute: a tick reads one shard.
    let slow = true;
    const ticks = lambdaTicks(engine, (command, input) =>
      slow && isIndexRead(command, input) ? 25_000 : 0,
    );
    try {
      for (let pass = 0; pass < 6; pass++) await reap(ticks.engine, { remainingMs: ticks.begin() });
      // Round in 4 ticks: once round, the shard a pass leaves longest unread was read 3 ticks ago.
      expect(unreadTicks()).toEqual([0, 1, 2, 3, 3, 3]);
      slow = false;
      await reap(ticks.engine, { remainingMs: ticks.begin() });
      expect(unreadTicks().at(-1)).toBe(0);
    } finally {
      ticks.destroy();
    }
    // It owes no shard, so the passes after it write nothing.
    expect((await readTickShards(engine, clock())).reaperStart.unreadSince.size).toBe(0);
  }, 30_000);

  it("after ticks of code older than unreadSince (a rollback, then the deploy again), the shards it read are not reported unread since before it ran", async () => {
    const shardCount = 4;
    const engine = {
      ...f.engine,
      settings: { ...f.engine.settings, shardCount, maxShardCount: shardCount },
    };
    // Each shard's read takes 25 s of the tick's minute: a tick reads one shard, round in 4.
    const ticks = lambdaTicks(engine, (command, input) =>
      isIndexRead(command, input) ? 25_000 : 0,
    );
    try {
      for (let pass = 0; pass < 3; pass++) await reap(ticks.engine, { remainingMs: ticks.begin() });
      expect(unreadTicks()).toEqual([0, 1, 2]);
      // Ten ticks of the code before unreadSince (rolled back): each reads the next shard and
      // writes what that code wrote (its UpdateExpression as it was), leaving unreadSince be. Read
      // beside any recordedAt, the unreadSince left behind would say 14 ticks after them, past the
      // alarm's 5 as after an hour of them; how long the rollback lasted is not what is tested.
      for (let tick = 0; tick < 10; tick++) {
        ticks.begin();
        await f.engine.doc.send(
          new UpdateCommand({
            TableName: f.engine.tables.jobs,
            Key: reaperStartKey,
            UpdateExpression: "SET startShard = :shard, recordedAt = :now",
            ExpressionAttributeValues: {
              ":shard": (3 + tick + 1) % shardCount,
              ":now": clock().toISOString(),
            },
          }),
        );
      }
      // Deployed again: every shard was read within the last 4 ticks, by the older code.
      for (let pass = 0; pass < 2; pass++) await reap(ticks.engine, { remainingMs: ticks.begin() });
    } finally {
      ticks.destroy();
    }
    // Read round in 4 ticks all along, no shard went unread past 3: not past the alarm's 5. (The
    // passes after the older code count from their own time, as after the first deploy: 0, 1.)
    expect(Math.max(...unreadTicks().slice(3))).toBeLessThanOrEqual(3);
  }, 60_000);

  it("a shard whose first read alone outlasts the tick's time every time goes last, the others are reaped, and it is reported unread", async () => {
    const engine = {
      ...f.engine,
      settings: { ...f.engine.settings, shardCount: 2, maxShardCount: 2 },
    };
    // A run lost in each shard; every read of shard 0's index takes 45 s, however few entries it
    // asks for (DynamoDB that slow to answer): what the reaper's reads sized to the time leave.
    const lost = new Map<number, string>();
    while (lost.size < 2) {
      const { job } = await createJob(
        engine,
        testJob({ schedule: { runAt: clock().toISOString() } }),
      );
      await f.purge();
      const shard = shardOf(job.jobId, 2);
      if (!lost.has(shard)) lost.set(shard, job.jobId);
    }
    offsetMs += LEASE_MS;
    const ticks = lambdaTicks(engine, (command, input) =>
      isIndexRead(command, input) &&
      (input.ExpressionAttributeValues as Record<string, unknown>)[":pk"] === inflightPk(0)
        ? 45_000
        : 0,
    );
    const reached = () =>
      f.metrics.points.filter((p) => p.name === METRICS.reaperShardsReached).map((p) => p.value);
    try {
      for (let pass = 0; pass < 7; pass++) await reap(ticks.engine, { remainingMs: ticks.begin() });
    } finally {
      ticks.destroy();
    }
    const runs = await f.runs();
    const resent = (shard: number) =>
      typeof runs.find((r) => r.jobId === lost.get(shard))?.misfireFrom === "string";
    // Shard 1 goes first from the second pass on, and is reaped; shard 0 never gets through.
    expect([resent(0), resent(1)]).toEqual([false, true]);
    // Every pass begins both shards but the first: the shards reached say nothing of it,
    expect(reached()).toEqual([1, 2, 2, 2, 2, 2, 2]);
    // the time since shard 0 was last read through does, past the alarm's 5 minutes.
    expect(unreadTicks()).toEqual([0, 1, 2, 3, 4, 5, 6]);
  }, 30_000);

  /**
   * A run lost in shard 0 behind `ended` entries of runs that ended, each tick then reaping it;
   * returns the run's key.
   */
  async function lostBehindEnded(ended: number, apartMs = 1) {
    const { run } = await lost();
    const item = await getRunItem(f.engine, run);
    await endedEntriesBefore(String(item?.inflightSk), ended, apartMs);
    offsetMs += LEASE_MS;
    return run;
  }

  /**
   * Reaps a tick at a time until the lost run (`run`, read by its key: a scan of the runs would
   * read every entry behind it too) is re-sent, at most `ticks`; what each pass dealt with.
   */
  async function passesUntilResent(
    ticks: ReturnType<typeof lambdaTicks>,
    run: { readonly pk: string; readonly sk: string },
  ) {
    const examined: number[] = [];
    const resent = async () => typeof (await getRunItem(f.engine, run))?.misfireFrom === "string";
    try {
      while (examined.length < 12 && !(await resent()))
        examined.push((await reap(ticks.engine, { remainingMs: ticks.begin() })).examined);
    } finally {
      ticks.destroy();
    }
    return { examined, resent: await resent() };
  }

  it("a shard whose index is throttled (each entry read costs time) re-sends its lost run within a few ticks", async () => {
    const run = await lostBehindEnded(300);
    // Reading the shard's index costs 150 ms an entry (its partition throttled): its 301 entries
    // at once take 45 s, past what the tick has left above the reaper's margin.
    const ticks = lambdaTicks(
      f.engine,
      () => 0,
      (command, output) =>
        command.startsWith("Query") && Array.isArray(output.Items) ? output.Items.length * 150 : 0,
    );
    const { examined, resent } = await passesUntilResent(ticks, run);
    // Every pass takes entries in hand, so the passes go on through the shard,
    expect(examined.filter((count) => count === 0)).toEqual([]);
    // and reach the lost run within a few (each reads what it can deal with in its time: two here).
    expect(resent).toBe(true);
    expect(examined.length).toBeLessThanOrEqual(3);
  }, 60_000);

  it("a shard with pages of entries to read, each read slow, re-sends its lost run within a bounded number of ticks", async () => {
    const run = await lostBehindEnded(2_100);
    // Each read of the shard's index takes 14 s however many entries it returns: its three pages
    // of 1,000 take 42 s, past what the tick has left above the reaper's margin.
    const ticks = lambdaTicks(f.engine, (command, input) =>
      isIndexRead(command, input) ? 14_000 : 0,
    );
    const { examined, resent } = await passesUntilResent(ticks, run);
    expect(examined.filter((count) => count === 0)).toEqual([]);
    expect(resent).toBe(true);
    // Two reads a pass, each sized as if its time grew with its entries (slower than need be when
    // it does not: a page each would do), the cursor moving on by what the pass dealt with.
    expect(examined.reduce((sum, count) => sum + count, 0)).toBe(2_101);
  }, 120_000);

  it("h68: a shard worked through over several passes reports how far behind it stands, falling, and unread until a pass reads it through", async () => {
    // 2,100 ended runs' entries a second apart behind the lost run: 35 minutes of deadlines.
    await lostBehindEnded(2_100, 1_000);
    const ticks = lambdaTicks(f.engine, (command, input) =>
      isIndexRead(command, input) ? 14_000 : 0,
    );
    const metric = (name: string) =>
      f.metrics.points.filter((p) => p.name === name).map((p) => p.value);
    const examined: number[] = [];
    try {
      for (let pass = 0; pass < 14; pass++) {
        examined.push((await reap(ticks.engine, { remainingMs: ticks.begin() })).examined);
        // Read through: the passes after it would read the shard's tail (or nothing) again.
        if (metric(METRICS.reaperBehindMs).at(-1) === 0) break;
      }
    } finally {
      ticks.destroy();
    }
    const behind = metric(METRICS.reaperBehindMs);
    const figures = {
      examined,
      behindS: behind.map((ms) => Math.round(ms / 1_000)),
      unreadTicks: unreadTicks(),
    };
    // Behind falls each pass while part-read, and is 0 once read through; unread grows meanwhile.
    const through = examined.findIndex((_, i) => (behind[i] ?? 0) === 0);
    expect(through, JSON.stringify(figures)).toBeGreaterThan(0);
    for (let i = 1; i < through; i++)
      expect(behind[i], JSON.stringify(figures)).toBeLessThan(behind[i - 1] ?? 0);
    expect(unreadTicks().slice(0, through + 1), JSON.stringify(figures)).toEqual(
      // From the first pass that left it part-read (0: when it was last read through is not known).
      Array.from({ length: through + 1 }, (_, i) => (i === through ? 0 : i)),
    );
  }, 120_000);

  it("a shard whose index read fails every time does not keep the shards after it from being reaped", async () => {
    const engine = {
      ...f.engine,
      settings: { ...f.engine.settings, shardCount: 2, maxShardCount: 2 },
    };
    // A run lost in shard 1; shard 0's Query fails every time (say its throttled partition).
    let lost: string | undefined;
    while (lost === undefined) {
      const { job } = await createJob(
        engine,
        testJob({ schedule: { runAt: clock().toISOString() } }),
      );
      await f.purge();
      if (shardOf(job.jobId, 2) === 1) lost = job.jobId;
    }
    pastTheDeadlines();
    const faulty = withFaults(engine, {
      operation: "Query",
      times: Number.MAX_SAFE_INTEGER,
      match: (input) =>
        (input.ExpressionAttributeValues as Record<string, unknown> | undefined)?.[":pk"] ===
        inflightPk(0),
      error: () =>
        Object.assign(new Error("Rate of requests exceeds the allowed throughput"), {
          name: "ThrottlingException",
        }),
    });
    try {
      // The pass fails (the tick's errors alarm counts it), having reaped shard 1 all the same.
      await expect(reap(faulty.engine)).rejects.toThrow(/allowed throughput/);
    } finally {
      faulty.destroy();
    }
    const [run] = (await f.runs()).filter((r) => r.jobId === lost);
    expect(run?.misfireFrom).toEqual(expect.any(String));
  }, 30_000);

  it("a dispatcher invocation the tick could not make does not keep the reaper from running", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { runAt: clock().toISOString() } }),
    );
    await f.purge();
    pastTheDeadlines();
    const invoked: number[] = [];
    const tick = fanOutTick(f.engine, {
      // Lambda refuses the invocation past the SDK's retries (throttled, say).
      invoke: async (event) => {
        invoked.push(event.shard);
        throw Object.assign(new Error("Rate exceeded"), { name: "TooManyRequestsException" });
      },
      remainingMs: () => TICK_MS,
    });
    // The tick fails (its errors alarm counts it), having reaped all the same.
    await expect(tick).rejects.toThrow(/Rate exceeded/);
    expect(invoked).toEqual([0]);
    const [run] = (await f.runs()).filter((r) => r.jobId === job.jobId);
    expect(run?.misfireFrom).toEqual(expect.any(String));
  }, 30_000);

  // Also behind runs that ended, a first read's worth and more: the pass stops in its second read.
  for (const endedAhead of [0, 150])
    it(`a shard stopped part-way for time keeps its cursor before the first entry it did not deal with (${endedAhead} ended ahead)`, async () => {
      // More lost runs than the pass deals with at once (16), each re-send's write taking 3 s.
      const jobIds = await lostRuns(24);
      /** The lost runs' items: `inflightSk` is the entry's deadline, `resentCount` its re-sends. */
      const items = async () =>
        (await scanTable(f.engine.doc, f.engine.tables.runs)).filter((item) =>
          jobIds.includes(String(item.jobId)),
        );
      const deadlines = (await items()).map((item) => String(item.inflightSk)).sort();
      await endedEntriesBefore(deadlines[0] ?? "", endedAhead);
      offsetMs += LEASE_MS;
      const ticks = lambdaTicks(f.engine, (command, input) =>
        command.startsWith("UpdateItem") &&
        String(input.UpdateExpression).startsWith("SET inflightSk")
          ? 3_000
          : 0,
      );
      const resentRuns = async () => (await items()).filter((item) => item.misfireFrom != null);
      try {
        const first = await reap(ticks.engine, { remainingMs: ticks.begin() });
        expect(first.resent).toBeGreaterThan(0);
        expect(first.resent).toBeLessThan(jobIds.length);
        // It counts the entries it dealt with, not those it read and left for the next tick.
        expect(first.examined).toBe(endedAhead + first.resent);
        // Every run the pass moved on was sent, and the cursor passed exactly those.
        expect(await resentRuns()).toHaveLength(first.resent);
        const cursor = (await readReaperCursors(f.engine, [0])).get(0);
        const left = (await items()).filter((item) => item.misfireFrom == null);
        expect(left).toHaveLength(jobIds.length - first.resent);
        for (const item of left)
          expect(cursor && cursorDeadline(cursor) < String(item.inflightSk)).toBe(true);
        // The next tick deals with the rest, each run sent once in all.
        const second = await reap(ticks.engine, { remainingMs: ticks.begin() });
        expect(first.resent + second.resent).toBe(jobIds.length);
        expect(first.examined + second.examined).toBe(endedAhead + jobIds.length);
        expect((await resentRuns()).map((r) => r.resentCount)).toEqual(jobIds.map(() => 1));
      } finally {
        ticks.destroy();
      }
    }, 30_000);
});

/** Runs a create queues at once, at most: a claim's (MAX_RUNS_PER_CLAIM, claim-writes.ts). */
const RUNS_PER_CREATE = 50;

/**
 * `count` runs due in the minutes before now whose messages were lost (queue purged), as the job
 * id of each: per-second jobs, the first created a minute back and each next a minute before the
 * one before it (so no two runs share a second, nor an index deadline), each queuing its first
 * `maxRuns` (up to 50) in one claim and sending them ten a request, where a one-off a run would
 * make a create and a send a run.
 */
async function lostRuns(count: number) {
  const jobIds: string[] = [];
  const atStart = offsetMs;
  try {
    while (jobIds.length < count) {
      offsetMs -= 60_000;
      const maxRuns = Math.min(RUNS_PER_CREATE, count - jobIds.length);
      const schedule = { cron: "* * * * * *", timezone: "UTC" };
      const { job } = await createJob(f.engine, testJob({ schedule, maxRuns }));
      jobIds.push(...Array.from({ length: maxRuns }, () => job.jobId));
    }
  } finally {
    offsetMs = atStart;
  }
  await f.purge();
  return jobIds;
}

const runItems = async (jobIds: readonly string[]) =>
  (await scanTable(f.engine.doc, f.engine.tables.runs)).filter((item) =>
    jobIds.includes(String(item.jobId)),
  );

describe("h68: the reaper a page at a time", () => {
  it("restart recovery re-sends a run once, however many pages the shard holds", async () => {
    const [jobId = ""] = await lostRuns(1);
    const [item] = await runItems([jobId]);
    const deadline = Date.parse(String(item?.inflightSk));
    // 1,000 ended runs' entries just after the lost run's: the first page (1,000) ends among them.
    await endedEntries(1_000, (i) => new Date(deadline + 1 + i).toISOString());
    // The scheduler restarts five minutes on: the lost run is pushed to a lease from then, ahead
    // of every entry of the first page, where the second page reads on.
    offsetMs += 5 * 60_000;
    const result = await recoverLostMessages(f.engine);
    const [after] = await runItems([jobId]);
    // The pass sent it once and dealt with each entry once (its re-filed entry is not read again).
    expect({ ...result, resentCount: after?.resentCount }).toEqual({
      examined: 1_001,
      resent: 1,
      shardsReached: 1,
      resentCount: 1,
    });
  }, 60_000);

  it("a page ending among entries that share a deadline, its last entry moved on meanwhile, goes on exactly after it", async () => {
    // One past the first page (100): the page ends among them, at an entry the pass pushes on
    // (re-files) before it reads the second page from after it.
    const jobIds = await lostRuns(101);
    // Every lost run filed under one deadline (their items written back with it, 25 a request).
    const shared = new Date(clock().getTime() + 1_000).toISOString();
    const items = await runItems(jobIds);
    await putItems(
      f,
      f.engine.tables.runs,
      items.map((item) => ({ ...item, inflightSk: shared })),
    );
    offsetMs += LEASE_MS + 15_000;
    const result = await reap(f.engine, { remainingMs: () => 60_000 });
    expect(result).toMatchObject({ examined: 101, resent: 101 });
    expect((await runItems(jobIds)).map((r) => r.resentCount)).toEqual(jobIds.map(() => 1));
  }, 120_000);

  it("an entry that fails mid-page keeps the cursor before it through the pages after, and only it is sent by the next pass", async () => {
    // One past the first page (100), which the pass reads and deals with after the failure.
    const jobIds = await lostRuns(101);
    const ordered = (await runItems(jobIds)).sort((a, b) =>
      `${String(a.inflightSk)}|${String(a.pk)}|${String(a.sk)}` <
      `${String(b.inflightSk)}|${String(b.pk)}|${String(b.sk)}`
        ? -1
        : 1,
    );
    // The 50th entry of the first page (100) fails its push; the second page is read and dealt with.
    const failing = ordered[49];
    offsetMs += LEASE_MS + 15_000;
    const faulty = withFaults(f.engine, {
      operation: "UpdateItem",
      times: 1,
      match: (input) => (input.Key as { sk?: string } | undefined)?.sk === failing?.sk,
      error: () =>
        Object.assign(new Error("Rate of requests exceeds the allowed throughput"), {
          name: "ThrottlingException",
        }),
    });
    try {
      await expect(reap(faulty.engine, { remainingMs: () => 60_000 })).rejects.toThrow(
        /allowed throughput/,
      );
    } finally {
      faulty.destroy();
    }
    const cursor = (await readReaperCursors(f.engine, [0])).get(0);
    expect(cursor).toMatchObject({ after: { pk: ordered[48]?.pk, sk: ordered[48]?.sk } });
    expect((await runItems(jobIds)).filter((r) => r.resentCount === 1)).toHaveLength(100);
    expect(await reap(f.engine, { remainingMs: () => 60_000 })).toEqual({
      examined: 1,
      resent: 1,
      shardsReached: 1,
    });
    expect((await runItems(jobIds)).map((r) => r.resentCount)).toEqual(jobIds.map(() => 1));
  }, 120_000);

  it("a pass reaching its maximum mid-page leaves the cursor at its last entry, and the next reads on after it", async () => {
    await endedEntries(300, (i) => new Date(clock().getTime() - 120_000 + i * 10).toISOString());
    const pass = () => reap(f.engine, { maxPerShard: 150, remainingMs: () => 60_000 });
    expect((await pass()).examined).toBe(150);
    expect((await readReaperCursors(f.engine, [0])).get(0)).toMatchObject({
      after: { sk: "RUN#000149" },
    });
    expect((await pass()).examined).toBe(150);
    expect((await readReaperCursors(f.engine, [0])).get(0)).toMatchObject({
      after: { sk: "RUN#000299" },
    });
    expect((await pass()).examined).toBe(0);
  }, 60_000);

  it("a pass reaching its maximum among entries that share a deadline leaves the cursor there, and the next reads on after it, not from their first", async () => {
    // Entries share a deadline to the millisecond where one pass filed them: a restart's recovery
    // re-files every run due before it at its now plus one interval. Four of runs that ended, a
    // lost run's entry after them, and passes of two entries each.
    const [jobId = ""] = await lostRuns(1);
    const [lostItem] = await runItems([jobId]);
    await endedEntriesBefore(String(lostItem?.inflightSk), 4, 0);
    pastTheDeadlines();
    const passes = [];
    for (let i = 0; i < 4; i++) passes.push(await reap(f.engine, { maxPerShard: 2 }));
    expect(passes.map(({ examined, resent }) => ({ examined, resent }))).toEqual([
      { examined: 2, resent: 0 },
      { examined: 2, resent: 0 },
      { examined: 1, resent: 1 },
      { examined: 0, resent: 0 },
    ]);
  }, 60_000);

  /** What a steady tick sends DynamoDB for a shard with `count` ended entries to read. */
  async function steadyTickCost(count: number) {
    await endedEntries(count, (i) => new Date(clock().getTime() - 120_000 + i * 10).toISOString());
    const clients = createTestClients({ maxSockets: 8 });
    const calls: string[] = [];
    clients.doc.middlewareStack.add(
      (next, context) => async (args) => {
        const input = args.input as Record<string, unknown>;
        const name = String(context.commandName);
        if (name.startsWith("Query") && input.IndexName === "inflight") calls.push("indexQuery");
        else if (name.startsWith("UpdateItem") && String(input.UpdateExpression).includes("runPk"))
          calls.push("cursorWrite");
        else calls.push(name);
        return next(args);
      },
      { step: "initialize", name: "count" },
    );
    try {
      const result = await reap(
        { ...f.engine, doc: clients.doc },
        // A tick's time, as the Lambda gives it: the pages are sized to it.
        { remainingMs: () => 60_000 },
      );
      expect(result.examined).toBe(count);
    } finally {
      clients.destroy();
    }
    const counted = (name: string) => calls.filter((c) => c === name).length;
    return { queries: counted("indexQuery"), cursorWrites: counted("cursorWrite") };
  }

  for (const [count, expected] of [
    [50, { queries: 1, cursorWrites: 1 }],
    [100, { queries: 2, cursorWrites: 1 }],
    [150, { queries: 2, cursorWrites: 2 }],
    [1_050, { queries: 2, cursorWrites: 2 }],
  ] as const)
    it(`figures: a steady tick with ${count} entries in a shard (the code before read them in ${Math.ceil((count + 1) / 1_000)} Query, one cursor write)`, async () => {
      expect(await steadyTickCost(count)).toEqual(expected);
    }, 60_000);
});
