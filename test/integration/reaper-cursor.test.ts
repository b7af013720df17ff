import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import { REAPER_SETTLE_MS, reap } from "../../shared/dispatch/reaper.js";
import { createJob } from "../../shared/jobs/index.js";
import { shardOf } from "../../shared/keys.js";
import { METRICS } from "../../shared/observability.js";
import { deleteMessages } from "../../shared/queue/work-queue.js";
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
import { createTestClients } from "../support/namespace.js";

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
    expect(await reap(f.engine)).toEqual({ examined: 1, resent: 0 });
    expect((await readReaperCursors(f.engine, [0])).get(0)).toMatchObject({ after: run });
    expect(await reap(f.engine)).toEqual({ examined: 0, resent: 0 });
  }, 30_000);

  it("finds a lost run among ended ones, and passes it only once it is re-sent", async () => {
    await finished();
    const missing = await lost();
    await finished();
    pastTheDeadlines();

    const first = await reap(f.engine);
    expect(first).toEqual({ examined: 3, resent: 1 });
    const again = await f.nextDelivery(f.engine.queues.normal, missing.job.jobId);
    expect(again.message.jobId).toBe(missing.job.jobId);
    // Re-filed a lease on: not read again until then.
    expect(await reap(f.engine)).toEqual({ examined: 0, resent: 0 });
    await deleteMessages(f.engine.sqs, again.queueUrl, [again.receiptHandle]);
    pastTheDeadlines();
    expect(await reap(f.engine)).toEqual({ examined: 1, resent: 1 });
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
    expect(await reap(f.engine)).toEqual({ examined: 1, resent: 1 });
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
      expect(await reap({ ...f.engine, doc: clients.doc })).toEqual({ examined: 1, resent: 0 });
    } finally {
      clients.destroy();
    }
    expect(finishedFirst).toBe(true);
    expect((await f.runs()).filter((r) => r.jobId === job.jobId).map((r) => r.status)).toEqual([
      "SUCCEEDED",
    ]);
    expect(await reap(f.engine)).toEqual({ examined: 0, resent: 0 });
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

  it("a pass cut short by the tick's timeout every minute still reaches every shard in turn", async () => {
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
    // Each shard's read takes 25 s of the pass; the tick's Lambda is stopped at 60 s.
    const clients = createTestClients({ maxSockets: 8 });
    let passStarted = 0;
    clients.doc.middlewareStack.add(
      (next, context) => async (args) => {
        const input = args.input as { IndexName?: string };
        if (String(context.commandName).startsWith("Query") && input.IndexName === "inflight") {
          if (Date.now() + offsetMs - passStarted >= 60_000) throw new Error("Task timed out");
          offsetMs += 25_000;
        }
        return next(args);
      },
      { step: "initialize", name: "slowShards" },
    );
    const resent = new Set<string>();
    try {
      for (let pass = 0; pass < shardCount; pass++) {
        offsetMs += 60_000 + LEASE_MS;
        passStarted = Date.now() + offsetMs;
        await reap({ ...engine, doc: clients.doc }).catch((error: unknown) => {
          expect(String(error)).toMatch(/timed out/);
        });
        const runs = await f.runs();
        for (const [, jobId] of missing) {
          const run = runs.find((r) => r.jobId === jobId);
          if (run?.misfireFrom) resent.add(jobId);
        }
      }
    } finally {
      clients.destroy();
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
      expect(await reap(engine)).toEqual({ examined: 1, resent: 0 });
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
