import { DeleteCommand, UpdateCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import { admitRun } from "../../shared/execution/admission.js";
import { resend } from "../../shared/execution/run-outcome.js";
import { cancelJob, createJob, editJob, pauseJob, triggerJob } from "../../shared/jobs/index.js";
import { jobAsItStands } from "../../shared/jobs/queries.js";
import type { Job, Run } from "../../shared/model.js";
import { type ReceivedRun, setVisibility } from "../../shared/queue/work-queue.js";
import { jobKey, runMessageOf } from "../../shared/storage/items.js";
import { getJob, runKeyOf } from "../../shared/storage/run-reads.js";
import {
  createEngineFixture,
  type EngineFixture,
  engineAt,
  testJob,
} from "../support/engine-fixture.js";
import { createTestClients } from "../support/namespace.js";
import { waitFor } from "../support/wait.js";

/** Every minute: the job's next run comes soon, so a run's ending leaves the job's write to it. */
const MINUTELY = { cron: "* * * * *", timezone: "UTC" };
/** Its next run is far off: a run's ending writes the job at once. */
const YEARLY = { cron: "0 0 1 1 *", timezone: "UTC" };

/**
 * The queue's delivery of a triggered run: near a minute's end a minutely job's next occurrence is
 * sent too, and may come first; it is made visible again and left for later.
 */
async function deliveryOf(f: EngineFixture, run: Run): Promise<ReceivedRun> {
  let received = await f.nextDelivery(f.engine.queues.normal, run.jobId);
  while (received.message.scheduledFor !== run.scheduledFor) {
    await setVisibility(f.engine.sqs, received.queueUrl, received.receiptHandle, 0);
    received = await f.nextDelivery(f.engine.queues.normal, run.jobId);
  }
  return received;
}

describe("a frequent recurring run's ending writes the run alone", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  /** Triggers a run of the job and has a worker (on `engine`) process its message to the end. */
  async function runOnce(job: Job, engine = f.engine): Promise<Run> {
    const run = await triggerJob(f.engine, job.tenantId, job.jobId);
    expect(await f.process({ ...f.workerDeps("worker"), engine }, await deliveryOf(f, run))).toBe(
      "ack",
    );
    const ended = (await f.runs()).find((r) => r.runId === run.runId);
    if (ended === undefined) throw new Error(`run ${run.runId} is gone`);
    return ended;
  }

  it("a run writes its job once, at its admission", async () => {
    const { job } = await createJob(f.engine, testJob({ schedule: MINUTELY }));
    // Counts the updates of the job item on a real client (the worker makes no other kind).
    const counted = createTestClients();
    const jobWrites: string[] = [];
    counted.doc.middlewareStack.add(
      (next) => async (args) => {
        const input: { TableName?: string; Key?: { pk?: unknown }; UpdateExpression?: string } =
          args.input as object;
        const ofTheJob =
          input.TableName === f.engine.tables.jobs && input.Key?.pk === `JOB#${job.jobId}`;
        if (ofTheJob && input.UpdateExpression !== undefined)
          jobWrites.push(String(input.UpdateExpression));
        return next(args);
      },
      { step: "initialize", name: "countJobWrites" },
    );
    try {
      const first = await runOnce(job, { ...f.engine, doc: counted.doc });
      expect(first.status).toBe("SUCCEEDED");
      expect(jobWrites).toHaveLength(1);
      expect(jobWrites[0]).toContain("activeRuns.#runId = :leaseUntil");
    } finally {
      counted.destroy();
    }
  });

  it("readers see it as lastRun at once; the next admission drops its entry and records it", async () => {
    const { job } = await createJob(f.engine, testJob({ schedule: MINUTELY }));
    const first = await runOnce(job);
    expect(first.status).toBe("SUCCEEDED");

    const stored = await jobOf(f, job.jobId);
    expect(Object.keys(stored.activeRuns)).toEqual([first.runId]);
    expect(stored.lastRun).toBeNull();
    const shown = await jobAsItStands(f.engine, stored);
    expect(shown.activeRuns).toEqual({});
    expect(shown.lastRun).toEqual({
      runId: first.runId,
      status: "SUCCEEDED",
      scheduledFor: first.scheduledFor,
      attempt: 1,
      finishedAt: first.finishedAt,
    });

    const second = await runOnce(job);
    expect(second.status).toBe("SUCCEEDED");
    const after = await jobOf(f, job.jobId);
    expect(Object.keys(after.activeRuns)).toEqual([second.runId]);
    expect(after.lastRun?.runId).toBe(first.runId);
    expect((await jobAsItStands(f.engine, after)).lastRun?.runId).toBe(second.runId);
  });

  it("under overlap skip, a run right after an ended one starts, though that one's lease is live", async () => {
    const { job } = await createJob(f.engine, testJob({ schedule: MINUTELY }));
    const first = await runOnce(job);
    const listed = (await jobOf(f, job.jobId)).activeRuns[first.runId] ?? "";
    expect(listed > f.engine.clock().toISOString()).toBe(true);
    const second = await runOnce(job);
    expect([first.status, second.status]).toEqual(["SUCCEEDED", "SUCCEEDED"]);
  });

  it("a stored lastRun that finished later than a listed run stays the job's lastRun", async () => {
    const { job } = await createJob(f.engine, testJob({ schedule: MINUTELY }));
    const listed = await runOnce(job);
    const stored = await jobOf(f, job.jobId);
    const later = {
      runId: "a-later-run",
      status: "FAILED" as const,
      scheduledFor: listed.scheduledFor,
      attempt: 1,
      finishedAt: new Date(Date.parse(listed.finishedAt ?? "") + 1).toISOString(),
    };
    const shown = await jobAsItStands(f.engine, { ...stored, lastRun: later });
    expect(shown.lastRun).toEqual(later);
    expect(shown.activeRuns).toEqual({});
  });

  it("a sparse schedule's run writes the job at once: lastRun does not wait for a run a year off", async () => {
    const { job } = await createJob(f.engine, testJob({ schedule: YEARLY }));
    const ran = await runOnce(job);
    const stored = await jobOf(f, job.jobId);
    expect(stored.activeRuns).toEqual({});
    expect(stored.lastRun).toMatchObject({ runId: ran.runId, status: "SUCCEEDED" });
  });
});

describe("buffer_one after an ending that writes the run alone", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  it("a run buffered behind a run that ended meanwhile starts at once, not at its recheck", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({
        type: "gated",
        schedule: MINUTELY,
        policies: { ...testJob().policies, overlap: "buffer_one" },
      }),
    );
    let open = () => {};
    const gate = new Promise<void>((resolve) => {
      open = resolve;
    });
    const gated = { gated: async () => gate };

    // The first run starts and holds the job (its handler waits at the gate).
    const firstRun = await triggerJob(f.engine, job.tenantId, job.jobId);
    const first = f.process(f.workerDeps("worker-1", gated), await deliveryOf(f, firstRun));
    await admittedOne(f, job.jobId);

    // The second run reads the first as running and decides to wait in the buffer; the first
    // ends (and wakes whoever is buffered) after that read and before the buffer write lands.
    const second = await triggerJob(f.engine, job.tenantId, job.jobId);
    const received = await deliveryOf(f, second);
    const racing = createTestClients();
    let raced = false;
    racing.doc.middlewareStack.add(
      (next) => async (args) => {
        const input: { UpdateExpression?: string } = args.input as object;
        if (!raced && String(input.UpdateExpression).includes("bufferedRunId = :runId")) {
          raced = true;
          open();
          expect(await first).toBe("ack");
        }
        return next(args);
      },
      { step: "initialize", name: "endTheFirstBeforeTheBufferWrite" },
    );
    try {
      const engine = { ...f.engine, doc: racing.doc };
      expect(await f.process({ ...f.workerDeps("worker-2", gated), engine }, received)).toBe("ack");
    } finally {
      racing.destroy();
    }
    expect(raced).toBe(true);
    const runs = await f.runs();
    const statusOf = (runId: string) => runs.find((r) => r.runId === runId)?.status;
    expect([statusOf(firstRun.runId), statusOf(second.runId)]).toEqual(["SUCCEEDED", "SUCCEEDED"]);
    expect((await getJob(f.engine, job.jobId))?.bufferedRunId).toBeNull();
  });
});

describe("a repeat delivery of a run whose ending left the job's write to the next admission", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  /** Sends the run's message again, as SQS may, and has a worker process it on `engine`. */
  async function deliverAgain(run: Run, engine = f.engine) {
    await resend(f.engine, runMessageOf(run), f.engine.clock());
    // Another run's message of the job (a retry sent with a jittered delay near zero) may come
    // first: it is left for its visibility to bring back.
    let received = await f.nextDelivery(f.engine.queues.normal, run.jobId);
    while (
      received.message.scheduledFor !== run.scheduledFor ||
      received.message.attempt !== run.attempt
    )
      received = await f.nextDelivery(f.engine.queues.normal, run.jobId);
    return f.process({ ...f.workerDeps("worker-again"), engine }, received);
  }

  it("makes no write of the job: its next admission drops the entry", async () => {
    const { job } = await createJob(f.engine, testJob({ schedule: MINUTELY }));
    const triggered = await triggerJob(f.engine, job.tenantId, job.jobId);
    expect(await f.process(f.workerDeps("worker"), await deliveryOf(f, triggered))).toBe("ack");
    const [ended] = (await f.runs()).filter((r) => r.jobId === job.jobId && r.status !== "QUEUED");
    if (ended === undefined) throw new Error("the run did not end");
    expect(ended.status).toBe("SUCCEEDED");

    const counted = createTestClients();
    const jobWrites: string[] = [];
    counted.doc.middlewareStack.add(
      (next) => async (args) => {
        const input: { TableName?: string; UpdateExpression?: string } = args.input as object;
        if (input.TableName === f.engine.tables.jobs && input.UpdateExpression !== undefined)
          jobWrites.push(input.UpdateExpression);
        return next(args);
      },
      { step: "initialize", name: "countJobWrites" },
    );
    try {
      expect(await deliverAgain(ended, { ...f.engine, doc: counted.doc })).toBe("ack");
    } finally {
      counted.destroy();
    }
    expect(jobWrites).toEqual([]);
    const shown = await jobAsItStands(f.engine, await jobOf(f, job.jobId));
    expect(shown.lastRun?.runId).toBe(ended.runId);
  });

  it("does not bring the job's lastRun back to it after a later run ended", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({
        type: "ordered",
        schedule: MINUTELY,
        policies: { ...testJob().policies, overlap: "allow", maxConcurrent: 2 },
      }),
    );
    let open = () => {};
    const gate = new Promise<void>((resolve) => {
      open = resolve;
    });
    const firstRun = await triggerJob(f.engine, job.tenantId, job.jobId);
    let first: Promise<"ack" | "keep"> = Promise.resolve("ack");
    // The first run waits at the gate; the second opens it, waits for the first to end, then
    // fails: it ends later, FAILED, and its ending (a retry) writes the job's lastRun.
    const handlers = {
      ordered: async (ctx: { runId: string }) => {
        if (ctx.runId === firstRun.runId) return gate;
        open();
        await first;
        throw new Error("the later run failed");
      },
    };
    first = f.process(f.workerDeps("worker-1", handlers), await deliveryOf(f, firstRun));
    await admittedOne(f, job.jobId);
    const secondRun = await triggerJob(f.engine, job.tenantId, job.jobId);
    expect(
      await f.process(f.workerDeps("worker-2", handlers), await deliveryOf(f, secondRun)),
    ).toBe("ack");
    const runs = await f.runs();
    const ran = (runId: string) => runs.find((r) => r.runId === runId && r.attempt === 1);
    expect([ran(firstRun.runId)?.status, ran(secondRun.runId)?.status]).toEqual([
      "SUCCEEDED",
      "FAILED",
    ]);
    const endedFirst = ran(firstRun.runId);
    if (endedFirst === undefined) throw new Error("the first run is gone");

    expect(await deliverAgain(endedFirst)).toBe("ack");
    const stored = await jobOf(f, job.jobId);
    const shown = await jobAsItStands(f.engine, stored);
    expect(shown.lastRun).toMatchObject({ runId: secondRun.runId, status: "FAILED" });
  });
});

/** Waits until the job lists one admitted run. */
async function admittedOne(f: EngineFixture, jobId: string): Promise<void> {
  await waitFor("the first run's admission", async () => {
    const stored = await getJob(f.engine, jobId);
    return Object.keys(stored?.activeRuns ?? {}).length === 1;
  });
}

describe("a run both listed and marked as the waiting rerun", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  // A first attempt whose worker died after its admission keeps its lapsed entry, and when it
  // comes back behind a live run it waits as a rerun and marks itself: one run, listed twice.
  it("is read once: the job's readers and the next admission do not send its key twice", async () => {
    const { job } = await createJob(f.engine, testJob({ schedule: MINUTELY }));
    const crashed = await triggerJob(f.engine, job.tenantId, job.jobId);
    const lapsed = new Date(Date.now() - 60_000).toISOString();
    await f.engine.doc.send(
      new UpdateCommand({
        TableName: f.engine.tables.jobs,
        Key: jobKey(job.jobId),
        UpdateExpression: "SET activeRuns.#run = :lapsed, rerunWaiting = :run",
        ExpressionAttributeNames: { "#run": crashed.runId },
        ExpressionAttributeValues: { ":lapsed": lapsed, ":run": crashed.runId },
      }),
    );
    const shown = await jobAsItStands(f.engine, await jobOf(f, job.jobId));
    expect(shown.activeRuns).toEqual({ [crashed.runId]: lapsed });
    const next = await triggerJob(f.engine, job.tenantId, job.jobId);
    const admitted = await admitRun(
      f.engine,
      await jobOf(f, job.jobId),
      next.runId,
      new Date(Date.now() + 60_000),
    );
    expect(admitted).toMatchObject({ decision: { action: "skip" } });
  });
});

async function jobOf(f: EngineFixture, jobId: string): Promise<Job> {
  const job = await getJob(f.engine, jobId);
  if (job === null) throw new Error(`job ${jobId} is gone`);
  return job;
}

describe("a change that puts the next admission off records the runs that ended", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  /** A minutely job whose one run ended, leaving its entry and lastRun to the next admission. */
  async function endedRun(): Promise<{ job: Job; run: Run }> {
    const { job } = await createJob(f.engine, testJob({ schedule: MINUTELY }));
    const triggered = await triggerJob(f.engine, job.tenantId, job.jobId);
    expect(await f.process(f.workerDeps("worker"), await deliveryOf(f, triggered))).toBe("ack");
    const run = (await f.runs()).find((r) => r.runId === triggered.runId);
    if (run === undefined) throw new Error("the run is gone");
    expect(run.status).toBe("SUCCEEDED");
    expect(Object.keys((await jobOf(f, job.jobId)).activeRuns)).toEqual([run.runId]);
    return { job, run };
  }

  /** The run's item outlived its retention: DynamoDB's TTL deleted it. */
  async function expire(run: Run) {
    await f.engine.doc.send(
      new DeleteCommand({ TableName: f.engine.tables.runs, Key: runKeyOf(run) }),
    );
  }

  const summaryOf = (run: Run) => ({
    runId: run.runId,
    status: run.status,
    scheduledFor: run.scheduledFor,
    attempt: run.attempt,
    finishedAt: run.finishedAt,
  });

  it("a pause: the job's lastRun outlives the run's item however long it stays paused", async () => {
    const { job, run } = await endedRun();
    await pauseJob(f.engine, job.tenantId, job.jobId);
    await expire(run);
    const stored = await jobOf(f, job.jobId);
    expect(stored.activeRuns).toEqual({});
    expect((await jobAsItStands(f.engine, stored)).lastRun).toEqual(summaryOf(run));
  });

  it("a cancel: no admission comes any more, and the lastRun stays", async () => {
    const { job, run } = await endedRun();
    await cancelJob(f.engine, job.tenantId, job.jobId);
    await expire(run);
    const stored = await jobOf(f, job.jobId);
    expect(stored.status).toBe("CANCELLED");
    expect((await jobAsItStands(f.engine, stored)).lastRun).toEqual(summaryOf(run));
  });

  it("an edit to a sparse schedule: the lastRun does not wait for a run a year off", async () => {
    const { job, run } = await endedRun();
    await editJob(f.engine, job.tenantId, job.jobId, job.version, { schedule: YEARLY });
    await expire(run);
    const stored = await jobOf(f, job.jobId);
    expect((await jobAsItStands(f.engine, stored)).lastRun).toEqual(summaryOf(run));
  });
});

describe("an admission that starts whatever the live leases say", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  /** An engine whose BatchGetItem keys are counted. */
  function countingReads(engine = f.engine) {
    const clients = createTestClients();
    const keys: number[] = [];
    clients.doc.middlewareStack.add(
      (next, context) => async (args) => {
        if (String(context.commandName).startsWith("BatchGet")) {
          const input = args.input as { RequestItems?: Record<string, { Keys?: unknown[] }> };
          for (const table of Object.values(input.RequestItems ?? {}))
            keys.push(table.Keys?.length ?? 0);
        }
        return next(args);
      },
      { step: "initialize", name: "countBatchGetKeys" },
    );
    return { engine: { ...engine, doc: clients.doc }, keys, destroy: () => clients.destroy() };
  }

  it("allow under its bound reads no run under way, and records a lapsed ended one as it drops it, keeping a lapsed one not ended", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({
        schedule: MINUTELY,
        policies: { ...testJob().policies, overlap: "allow", maxConcurrent: 3 },
      }),
    );
    const first = await triggerJob(f.engine, job.tenantId, job.jobId);
    expect(await f.process(f.workerDeps("worker"), await deliveryOf(f, first))).toBe("ack");
    const ended = (await f.runs()).find((r) => r.runId === first.runId);
    expect(ended?.status).toBe("SUCCEEDED");

    // The first run's entry stays, its lease live: a second run under the bound starts without
    // reading it.
    const second = await triggerJob(f.engine, job.tenantId, job.jobId);
    const reads = countingReads();
    try {
      const admitted = await admitRun(
        reads.engine,
        await jobOf(f, job.jobId),
        second.runId,
        new Date(Date.now() + 60_000),
      );
      expect(admitted.decision.action).toBe("start");
    } finally {
      reads.destroy();
    }
    expect(reads.keys).toEqual([]);
    expect(Object.keys((await jobOf(f, job.jobId)).activeRuns).sort()).toEqual(
      [first.runId, second.runId].sort(),
    );

    // Both leases lapse: the next admission reads the two entries, drops the ended one, which
    // becomes the job's lastRun, and keeps the second's: that run was admitted and has not ended
    // (its worker died), and its own admission reads the entry when it comes back.
    const later = countingReads(engineAt(f.engine, Date.now() + 5 * 60_000));
    const third = await triggerJob(f.engine, job.tenantId, job.jobId);
    try {
      const admitted = await admitRun(
        later.engine,
        await jobOf(f, job.jobId),
        third.runId,
        new Date(Date.now() + 6 * 60_000),
      );
      expect(admitted.decision.action).toBe("start");
    } finally {
      later.destroy();
    }
    expect(later.keys).toEqual([2]);
    const stored = await jobOf(f, job.jobId);
    expect(Object.keys(stored.activeRuns).sort()).toEqual([second.runId, third.runId].sort());
    expect(stored.lastRun).toMatchObject({ runId: first.runId, status: "SUCCEEDED" });
  });
});

describe("skip after a run whose ending left its entry", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  it("of two runs admitted at once, exactly one starts", async () => {
    const { job } = await createJob(f.engine, testJob({ schedule: MINUTELY }));
    const triggered = await triggerJob(f.engine, job.tenantId, job.jobId);
    expect(await f.process(f.workerDeps("worker"), await deliveryOf(f, triggered))).toBe("ack");
    const read = await jobOf(f, job.jobId);
    expect(Object.keys(read.activeRuns)).toHaveLength(1);
    for (let round = 0; round < 5; round++) {
      const [a, b] = await Promise.all([
        triggerJob(f.engine, job.tenantId, job.jobId),
        triggerJob(f.engine, job.tenantId, job.jobId),
      ]);
      if (a === undefined || b === undefined) throw new Error("no run triggered");
      // Both read the job as it was before either admission, as two workers starting at once do.
      const before = await jobOf(f, job.jobId);
      const lease = new Date(Date.now() + 60_000);
      const decisions = await Promise.all(
        [a, b].map((run) => admitRun(f.engine, before, run.runId, lease)),
      );
      expect(decisions.map((d) => d.decision.action).sort()).toEqual(["skip", "start"]);
      const started = decisions[0]?.decision.action === "start" ? a : b;
      const stored = await jobOf(f, job.jobId);
      expect(Object.keys(stored.activeRuns)).toContain(started.runId);
      // The started run ends, leaving its entry: the next round's runs find it ended.
      await endAsSucceeded(f, started.runId, job.jobId);
    }
  });
});

/**
 * Ends a run SUCCEEDED the way a deferred ending does: the run's item alone, under its worker's
 * start (a listed run ended at fence 0 was cancelled under a worker still running it; job-runs.ts).
 */
async function endAsSucceeded(f: EngineFixture, runId: string, jobId: string) {
  const run = (await f.runs()).find((r) => r.runId === runId && r.jobId === jobId);
  if (run === undefined) throw new Error(`run ${runId} is gone`);
  await f.engine.doc.send(
    new UpdateCommand({
      TableName: f.engine.tables.runs,
      Key: runKeyOf(run),
      UpdateExpression:
        "SET #status = :status, finishedAt = :at, durationMs = :ms, fence = if_not_exists(fence, :zero) + :one",
      ExpressionAttributeNames: { "#status": "status" },
      ExpressionAttributeValues: {
        ":status": "SUCCEEDED",
        ":at": new Date().toISOString(),
        ":ms": 1,
        ":zero": 0,
        ":one": 1,
      },
    }),
  );
}

describe("a trigger on the instant of an occurrence no claim has queued yet", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({ settings: { shardCount: 1, maxShardCount: 1 } });
  });
  afterAll(() => f.destroy());

  it("queues a run of its own, and the occurrence still runs as scheduled", async () => {
    const MINUTE = 60_000;
    // Past the lookahead: the create files the occurrence and claims nothing.
    const at = Math.ceil((Date.now() + 10 * MINUTE) / MINUTE) * MINUTE;
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { every: "PT1H", startAt: new Date(at).toISOString() } }),
    );
    // The dispatcher was down until then: the trigger comes on the occurrence's very millisecond.
    const triggered = await triggerJob(
      { ...f.engine, clock: () => new Date(at) },
      job.tenantId,
      job.jobId,
    );
    await dispatchShard(engineAt(f.engine, at + 1000), 0, "pass-after-outage");

    const runs = (await f.runs()).filter((r) => r.jobId === job.jobId);
    expect(runs.map((r) => r.scheduledFor).sort()).toEqual(
      [new Date(at).toISOString(), triggered.scheduledFor].sort(),
    );
    expect(triggered.scheduledFor).not.toBe(new Date(at).toISOString());
    expect(runs.filter((r) => r.triggered === true).map((r) => r.runId)).toEqual([triggered.runId]);
  });
});
