import { GetCommand, PutCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { claimDueEntry } from "../../shared/dispatch/claim.js";
import type { Engine } from "../../shared/engine.js";
import { FenceLostError } from "../../shared/errors.js";
import { JobError, type JobHandler } from "../../shared/execution/job-contract.js";
import { recordResult } from "../../shared/execution/run-outcome.js";
import { processRun } from "../../shared/execution/worker.js";
import {
  cancelJob,
  cancelRun,
  createJob,
  deleteJob,
  editJob,
  pauseJob,
  replayDeadLetter,
  resumeJob,
} from "../../shared/jobs/index.js";
import type { Job, Run } from "../../shared/model.js";
import { getJob } from "../../shared/storage/run-reads.js";
import { startRun } from "../../shared/storage/run-start.js";
import { runKey } from "../../shared/storage/runs.js";
import {
  createEngineFixture,
  deliveryOfRun,
  type EngineFixture,
  testJob,
} from "../support/engine-fixture.js";
import { dyingAtFailedEnding, withHeartbeatsHeld, withLostAnswers } from "../support/faults.js";
import { waitFor } from "../support/wait.js";

const TENANT = "tenant-a";
const HOUR = 3_600_000;
/** A retry due a second after the failure: written as a QUEUED run and sent at once. */
const SOON = { maxAttempts: 3, initialDelayMs: 1000, maxDelayMs: 1000 };
/** A retry due near an hour after the failure (jitter drawn at 0.99): a due entry. */
const LATER = { maxAttempts: 3, initialDelayMs: HOUR, maxDelayMs: HOUR };

/**
 * A failure's next attempt is put before the run's FAILED ending, with plain writes, and runs only
 * once the attempt before it says FAILED (docs/architecture.md "Result"). These are the
 * interleavings between the two writes.
 */
describe("a failure's next attempt, written before its ending", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    // A first delivery holds its start unwritten while its first write can come before the
    // reaper's deadline (a lease after it was due): 10 s keeps that so on a loaded machine.
    f = await createEngineFixture({ settings: { leaseMs: 10_000 } });
  });
  afterAll(() => f.destroy());

  /** A handler that fails (retryable) the first `failures` times it is called, then succeeds. */
  function flaky(failures: number): { handler: JobHandler; calls: () => number } {
    let calls = 0;
    return {
      handler: async () => {
        calls++;
        if (calls <= failures) throw new JobError(`failure ${calls}`, { retryable: true });
      },
      calls: () => calls,
    };
  }

  async function oneOff(retry: typeof SOON): Promise<Job> {
    const { job } = await createJob(
      f.engine,
      testJob({
        type: "flaky",
        schedule: { runAt: new Date().toISOString() },
        policies: { ...testJob().policies, retry },
      }),
    );
    return job;
  }

  async function runsOf(jobId: string): Promise<Run[]> {
    return (await f.runs()).filter((r) => r.jobId === jobId).sort((a, b) => a.attempt - b.attempt);
  }

  async function attempt(job: Job, n: number): Promise<Run> {
    const run = (await runsOf(job.jobId)).find((r) => r.attempt === n);
    if (!run) throw new Error(`no attempt ${n}`);
    return run;
  }

  /** Two starts of the run: worker a's, whose lease then lapsed, and worker b's, which took it over. */
  async function twoHolders(queued: Run) {
    const a = await startRun(f.engine, queued, "a", new Date());
    if (a.kind !== "started") throw new Error(a.kind);
    const b = await startRun(
      f.engine,
      queued,
      "b",
      new Date(Date.parse(a.run.leaseUntil ?? "") + 1),
    );
    if (b.kind !== "started") throw new Error(b.kind);
    return { a, b };
  }

  /**
   * Processes one delivery of the run as it stands now (made by hand, not received), as its
   * message arrives when due: a recheck's or a retry's due time is what the test skips ahead to.
   */
  async function deliver(job: Job, n: number, handler: JobHandler) {
    const run = await attempt(job, n);
    const delivery = deliveryOfRun(f.engine, run);
    return processRun(f.workerDeps(`w-${n}`, { flaky: handler }), {
      ...delivery,
      message: { ...delivery.message, dueAt: new Date().toISOString() },
    });
  }

  /**
   * The first delivery of attempt 1, whose worker dies right after it put the next attempt: the
   * run's FAILED write never lands.
   */
  async function dieAfterNextAttempt(job: Job, handler: JobHandler, random?: number) {
    const dying = dyingAtFailedEnding(f.engine);
    try {
      const first = await attempt(job, 1);
      const engine =
        random === undefined ? dying.engine : { ...dying.engine, random: () => random };
      await expect(
        processRun(
          { ...f.workerDeps("dies", { flaky: handler }, 100), engine },
          deliveryOfRun(f.engine, first),
        ),
      ).rejects.toThrow("process died");
    } finally {
      dying.destroy();
    }
    expect(dying.injected.count).toBe(1);
  }

  it("a worker that dies between the writes leaves attempt 2 waiting for attempt 1; attempt 1 succeeding on its redelivery skips it", async () => {
    const job = await oneOff(SOON);
    const { handler, calls } = flaky(1);
    await dieAfterNextAttempt(job, handler);
    const first = await attempt(job, 1);
    // Its start was held unwritten (its first write was to be its ending): it reads QUEUED.
    expect(first).toMatchObject({ status: "QUEUED", fence: 0 });
    expect(await attempt(job, 2)).toMatchObject({
      status: "QUEUED",
      fence: 0,
      retryOf: { runId: first.runId, fence: 1 },
    });

    // Attempt 2's message comes first (the reaper sends it at its deadline): it waits.
    expect(await deliver(job, 2, handler)).toBe("ack");
    expect(await attempt(job, 2)).toMatchObject({
      status: "QUEUED",
      reason: `waiting: ${first.runId} has not ended (QUEUED)`,
    });
    expect(calls()).toBe(1);

    // Attempt 1 again (the reaper re-sends it too): it succeeds this time.
    expect(await deliver(job, 1, handler)).toBe("ack");
    expect(await attempt(job, 1)).toMatchObject({ status: "SUCCEEDED" });
    expect(await deliver(job, 2, handler)).toBe("ack");
    expect(await runsOf(job.jobId)).toMatchObject([
      { attempt: 1, status: "SUCCEEDED" },
      {
        attempt: 2,
        status: "SKIPPED",
        reason: `${first.runId} ended SUCCEEDED, not FAILED: this retry does not run`,
        executedVersion: null,
      },
    ]);
    expect(calls()).toBe(2);
    expect((await getJob(f.engine, job.jobId))?.status).toBe("COMPLETED");
  }, 30_000);

  it("attempt 1 failing again on its redelivery gets its one attempt 2: the one put before, which then runs", async () => {
    const job = await oneOff(SOON);
    const { handler, calls } = flaky(2);
    await dieAfterNextAttempt(job, handler);
    expect(await deliver(job, 1, handler)).toBe("ack");
    const first = await attempt(job, 1);
    expect(first).toMatchObject({ status: "FAILED", error: "failure 2" });
    expect(await deliver(job, 2, handler)).toBe("ack");
    expect(await runsOf(job.jobId)).toMatchObject([
      { attempt: 1, status: "FAILED" },
      { attempt: 2, status: "SUCCEEDED", retryOf: { runId: first.runId, fence: 1 } },
    ]);
    expect(calls()).toBe(3);
  }, 30_000);

  it("a worker that lost its fence after the put leaves attempt 2 to the new holder's ending: success skips it", async () => {
    const job = await oneOff(SOON);
    const queued = await attempt(job, 1);
    const { a, b } = await twoHolders(queued);
    const failed = { kind: "failed", error: "a's failure", retryable: true } as const;
    await expect(
      recordResult(f.engine, job, a.run, failed, new Date(), job.version),
    ).rejects.toBeInstanceOf(FenceLostError);
    // Not taken back: b may fail too, and its ending would let it run.
    expect(await attempt(job, 2)).toMatchObject({
      status: "QUEUED",
      retryOf: { runId: queued.runId, fence: 1 },
    });
    expect(await attempt(job, 1)).toMatchObject({ status: "RUNNING", workerId: "b", fence: 2 });

    await recordResult(f.engine, job, b.run, { kind: "succeeded" }, new Date(), job.version);
    const { handler, calls } = flaky(0);
    expect(await deliver(job, 2, handler)).toBe("ack");
    expect(calls()).toBe(0);
    expect((await runsOf(job.jobId)).map((r) => [r.attempt, r.status])).toEqual([
      [1, "SUCCEEDED"],
      [2, "SKIPPED"],
    ]);
  }, 30_000);

  /**
   * Attempt 1 of a new one-off (its retry `retry`) delivered to a handler that cancels its own run
   * once its start is written, then fails: its ending meets the cancel request, after the next
   * attempt's put. With `takeBackFails`, the take-back's one write (the QUEUED run's SKIPPED update,
   * the entry's delete) is refused as throttled. Later attempts succeed; `calls` counts every call.
   */
  async function failedAsCancelled(retry: typeof SOON, takeBackFails = false) {
    const job = await oneOff(retry);
    const beatsHeld = withHeartbeatsHeld(f.engine);
    const takeBacks = { refused: 0 };
    if (takeBackFails)
      beatsHeld.engine.doc.middlewareStack.add(
        (next) => async (args) => {
          const { ConditionExpression } = args.input as { ConditionExpression?: string };
          if (!String(ConditionExpression).includes("retryOf.fence = :fence")) return next(args);
          takeBacks.refused++;
          throw new Error("throttled");
        },
        { step: "initialize", name: "takeBackFails" },
      );
    const calls = { count: 0 };
    const cancelsItself: JobHandler = async (ctx) => {
      calls.count++;
      if (ctx.attempt !== 1) return;
      await waitFor("the run's start", async () =>
        (await runsOf(ctx.jobId)).some((r) => r.status === "RUNNING"),
      );
      beatsHeld.hold();
      await cancelRun(f.engine, TENANT, ctx.jobId, ctx.runId);
      throw new JobError("failed as it was cancelled", { retryable: true });
    };
    const first = await attempt(job, 1);
    const deps = {
      ...f.workerDeps("w", { flaky: cancelsItself }, 200),
      engine: { ...beatsHeld.engine, random: () => 0.99 },
    };
    try {
      expect(await processRun(deps, deliveryOfRun(f.engine, first))).toBe("ack");
    } finally {
      beatsHeld.destroy();
    }
    return { job, first, cancelsItself, calls, takeBacks };
  }

  it("a cancel asked during the ending takes the next attempt back at once: a run SKIPPED, a retry entry deleted", async () => {
    for (const retry of [SOON, LATER]) {
      const { job, first } = await failedAsCancelled(retry);
      const runs = await runsOf(job.jobId);
      expect(runs[0]).toMatchObject({ attempt: 1, status: "CANCELLED", cancelledBy: "api" });
      if (retry === SOON)
        expect(runs[1]).toMatchObject({
          attempt: 2,
          status: "SKIPPED",
          reason: `${first.runId} ended CANCELLED, not FAILED: this retry does not run`,
        });
      else expect(runs).toHaveLength(1);
      expect((await f.dueEntries()).filter((d) => d.jobId === job.jobId)).toEqual([]);
    }
  }, 30_000);

  it("a cancel asked during the ending whose take-back of the next attempt fails (throttled): its worker skips the run, a claim of the entry queues one it skips, and nothing runs again", async () => {
    for (const retry of [SOON, LATER]) {
      const { job, first, cancelsItself, calls, takeBacks } = await failedAsCancelled(retry, true);
      expect(takeBacks.refused).toBe(1);
      expect((await runsOf(job.jobId))[0]).toMatchObject({
        status: "CANCELLED",
        cancelledBy: "api",
      });
      if (retry === LATER) {
        // The entry left: its claim queues attempt 2, naming attempt 1.
        const [entry, ...others] = (await f.dueEntries()).filter((d) => d.jobId === job.jobId);
        expect([entry?.kind, others]).toEqual(["retry", []]);
        if (!entry) throw new Error("no retry entry");
        const due = new Date(entry.dueAt);
        await claimDueEntry(f.engine, entry, {
          now: due,
          horizonEnd: new Date(due.getTime() + 60_000),
        });
      }
      expect(await attempt(job, 2)).toMatchObject({
        status: "QUEUED",
        retryOf: { runId: first.runId },
      });
      expect(await deliver(job, 2, cancelsItself)).toBe("ack");
      expect(await runsOf(job.jobId)).toMatchObject([
        { attempt: 1, status: "CANCELLED" },
        {
          attempt: 2,
          status: "SKIPPED",
          reason: `${first.runId} ended CANCELLED, not FAILED: this retry does not run`,
        },
      ]);
      expect(calls.count).toBe(1);
      expect((await getJob(f.engine, job.jobId))?.status).toBe("COMPLETED");
      expect((await f.dueEntries()).filter((d) => d.jobId === job.jobId)).toEqual([]);
    }
  }, 30_000);

  /**
   * A one-off whose worker died between attempt 2's put and attempt 1's FAILED ending, then
   * `endJob` (a delete or a cancel): each attempt's delivery ends it CANCELLED, and neither runs
   * again.
   */
  async function bothAttemptsCancelledAfter(
    endJob: (engine: Engine, tenantId: string, jobId: string) => Promise<unknown>,
  ) {
    const job = await oneOff(SOON);
    const { handler, calls } = flaky(1);
    await dieAfterNextAttempt(job, handler);
    await endJob(f.engine, TENANT, job.jobId);
    expect(await deliver(job, 2, handler)).toBe("ack");
    expect(await deliver(job, 1, handler)).toBe("ack");
    expect((await runsOf(job.jobId)).map((r) => [r.attempt, r.status])).toEqual([
      [1, "CANCELLED"],
      [2, "CANCELLED"],
    ]);
    expect(calls()).toBe(1);
  }

  it("a job deleted between the writes: its cancel ends both attempts, and neither runs", async () => {
    await bothAttemptsCancelledAfter(deleteJob);
  }, 30_000);

  it("a retry entry put before a crash is claimed as a run that names attempt 1, and skipped once attempt 1 succeeded", async () => {
    const job = await oneOff(LATER);
    const { handler, calls } = flaky(1);
    await dieAfterNextAttempt(job, handler, 0.99);
    const first = await attempt(job, 1);
    const [entry] = (await f.dueEntries()).filter((d) => d.jobId === job.jobId);
    expect(entry).toMatchObject({
      kind: "retry",
      attempt: 2,
      retryOf: { runId: first.runId, fence: 1 },
    });
    if (!entry) throw new Error("no retry entry");
    expect(await deliver(job, 1, handler)).toBe("ack");

    const due = new Date(entry.dueAt);
    const claimed = await claimDueEntry(f.engine, entry, {
      now: due,
      horizonEnd: new Date(due.getTime() + 60_000),
    });
    expect(claimed.outcome).toBe("claimed");
    expect(await attempt(job, 2)).toMatchObject({
      status: "QUEUED",
      retryOf: { runId: first.runId, fence: 1 },
    });
    expect(await deliver(job, 2, handler)).toBe("ack");
    expect((await runsOf(job.jobId)).map((r) => [r.attempt, r.status])).toEqual([
      [1, "SUCCEEDED"],
      [2, "SKIPPED"],
    ]);
    expect(calls()).toBe(2);
  }, 30_000);

  it("a next attempt's put whose answer was lost meets itself when the SDK sends it again: one attempt, then FAILED", async () => {
    for (const [retry, table] of [
      [SOON, f.engine.tables.runs],
      [LATER, f.engine.tables.jobs],
    ] as const) {
      const job = await oneOff(retry);
      const { handler } = flaky(1);
      const lossy = withLostAnswers(f.engine, {
        operation: "PutItem",
        times: 1,
        match: (input) => input.TableName === table,
      });
      try {
        const first = await attempt(job, 1);
        const deps = {
          ...f.workerDeps("w", { flaky: handler }),
          engine: { ...lossy.engine, random: () => 0.99 },
        };
        expect(await processRun(deps, deliveryOfRun(f.engine, first))).toBe("ack");
      } finally {
        lossy.destroy();
      }
      expect(lossy.injected.count).toBe(1);
      const runs = await runsOf(job.jobId);
      expect(runs[0]).toMatchObject({ attempt: 1, status: "FAILED" });
      const entries = (await f.dueEntries()).filter((d) => d.jobId === job.jobId);
      if (retry === SOON) {
        expect(runs.map((r) => [r.attempt, r.status])).toEqual([
          [1, "FAILED"],
          [2, "QUEUED"],
        ]);
        expect(entries).toEqual([]);
      } else {
        expect(runs).toHaveLength(1);
        expect(entries).toMatchObject([{ kind: "retry", attempt: 2 }]);
      }
    }
  }, 30_000);
  it("a predecessor that dies (DEAD) after a crash between the writes stays replayable: its replay takes the key of the retry it skipped", async () => {
    const job = await oneOff(SOON);
    let calls = 0;
    const failsThenDies: JobHandler = async () => {
      calls++;
      throw new JobError(`failure ${calls}`, { retryable: calls === 1 });
    };
    await dieAfterNextAttempt(job, failsThenDies);
    // Attempt 1 again: this time a failure that is not retryable, so it is DEAD.
    expect(await deliver(job, 1, failsThenDies)).toBe("ack");
    const dead = await attempt(job, 1);
    expect(dead).toMatchObject({ status: "DEAD", error: "failure 2" });
    // The retry put before the crash has not looked yet: its message is out, it is not replaced.
    await expect(replayDeadLetter(f.engine, TENANT, dead.runId)).rejects.toThrow(
      "still waits for it to end",
    );
    // Once it looks, it is skipped: attempt 1 never said FAILED.
    expect(await deliver(job, 2, failsThenDies)).toBe("ack");
    expect(await attempt(job, 2)).toMatchObject({ status: "SKIPPED", executedVersion: null });

    const replay = (await replayDeadLetter(f.engine, TENANT, dead.runId)).run;
    expect(replay).toMatchObject({ attempt: 2, status: "QUEUED" });
    expect(replay.retryOf).toBeUndefined();
    const { handler, calls: replayed } = flaky(0);
    expect(await deliver(job, 2, handler)).toBe("ack");
    expect(replayed()).toBe(1);
    expect((await runsOf(job.jobId)).map((r) => [r.attempt, r.status])).toEqual([
      [1, "DEAD"],
      [2, "SUCCEEDED"],
    ]);
  }, 30_000);
  it("two starts of attempt 1 that each fail file two retry entries; the later claim does not queue attempt 2 again beside a delivery that runs it", async () => {
    const job = await oneOff(LATER);
    const queued = await attempt(job, 1);
    const { a, b } = await twoHolders(queued);
    const failed = { kind: "failed", error: "failed", retryable: true } as const;
    const late = { ...f.engine, random: () => 0.99 };
    // a outlived its lease: its retry entry is put, its ending refused.
    await expect(
      recordResult(late, job, a.run, failed, new Date(), job.version),
    ).rejects.toBeInstanceOf(FenceLostError);
    // b fails a minute on, with its own entry (another due time, another key), and says FAILED.
    await recordResult(late, job, b.run, failed, new Date(Date.now() + 60_000), job.version);
    const entries = (await f.dueEntries())
      .filter((d) => d.jobId === job.jobId)
      .sort((x, y) => x.dueAt.localeCompare(y.dueAt));
    expect(entries.map((e) => e.retryOf?.fence)).toEqual([1, 2]);
    const [first, second] = entries;
    if (!first || !second) throw new Error("two retry entries expected");
    const claim = (entry: typeof first) =>
      claimDueEntry(f.engine, entry, {
        now: new Date(entry.dueAt),
        horizonEnd: new Date(Date.parse(entry.dueAt) + 60_000),
      });
    const firstClaim = await claim(first);
    if (firstClaim.outcome !== "claimed") throw new Error(firstClaim.outcome);
    expect(firstClaim.runs).toHaveLength(1);

    // Attempt 2's delivery runs it with its start unwritten; meanwhile the second entry is claimed,
    // and every run that claim queues gets its message (delivered here, as SQS would).
    let calls = 0;
    const handler: JobHandler = async () => {
      calls++;
      if (calls > 1) return;
      const secondClaim = await claim(second);
      if (secondClaim.outcome !== "claimed") throw new Error(secondClaim.outcome);
      for (const run of secondClaim.runs) {
        const delivery = deliveryOfRun(f.engine, run);
        await processRun(f.workerDeps("w-again", { flaky: handler }), {
          ...delivery,
          message: { ...delivery.message, dueAt: new Date().toISOString() },
        });
      }
    };
    expect(await deliver(job, 2, handler)).toBe("ack");
    expect(calls).toBe(1);
    expect((await runsOf(job.jobId)).map((r) => [r.attempt, r.status])).toEqual([
      [1, "FAILED"],
      [2, "SUCCEEDED"],
    ]);
    expect((await f.dueEntries()).filter((d) => d.jobId === job.jobId)).toEqual([]);
  }, 30_000);
  it("the FAILED ending's answer lost, sent again by the SDK: it meets its own ending, the job's write follows, one attempt 2 runs", async () => {
    const job = await oneOff(SOON);
    const { handler, calls } = flaky(1);
    const lossy = withLostAnswers(f.engine, {
      operation: "UpdateItem",
      times: 1,
      match: (input) =>
        JSON.stringify(input.ExpressionAttributeValues ?? {}).includes('{"S":"FAILED"}'),
    });
    try {
      const deps = { ...f.workerDeps("w", { flaky: handler }), engine: lossy.engine };
      expect(await processRun(deps, deliveryOfRun(f.engine, await attempt(job, 1)))).toBe("ack");
    } finally {
      lossy.destroy();
    }
    expect(lossy.injected.count).toBe(1);
    const first = await attempt(job, 1);
    expect(first).toMatchObject({ status: "FAILED", error: "failure 1" });
    expect((await getJob(f.engine, job.jobId))?.lastRun?.runId).toBe(first.runId);
    expect(await deliver(job, 2, handler)).toBe("ack");
    expect((await runsOf(job.jobId)).map((r) => [r.attempt, r.status])).toEqual([
      [1, "FAILED"],
      [2, "SUCCEEDED"],
    ]);
    expect(calls()).toBe(2);
  }, 30_000);

  it("a job cancelled between the writes: both attempts end CANCELLED and neither runs again", async () => {
    await bothAttemptsCancelledAfter(cancelJob);
  }, 30_000);

  it("a one-off edited to a new runAt between the writes: the old occurrence's attempt 1 is skipped by the edit, and its attempt 2 after it", async () => {
    const job = await oneOff(SOON);
    const { handler, calls } = flaky(1);
    await dieAfterNextAttempt(job, handler);
    const runAt = new Date(Date.now() + 1000).toISOString();
    const edited = await editJob(f.engine, TENANT, job.jobId, job.version, {
      schedule: { runAt },
    });
    // Attempt 2 first: it waits for attempt 1, which the edit then skips; attempt 2 follows it.
    expect(await deliver(job, 2, handler)).toBe("ack");
    expect(await deliver(job, 1, handler)).toBe("ack");
    expect(await deliver(job, 2, handler)).toBe("ack");
    const occurrence = (await attempt(job, 1)).scheduledFor;
    const old = (await runsOf(job.jobId)).filter((r) => r.scheduledFor === occurrence);
    expect(old.map((r) => [r.attempt, r.executedVersion])).toEqual([
      [1, null],
      [2, null],
    ]);
    expect(old.map((r) => r.status)).toEqual(["SKIPPED", "SKIPPED"]);
    expect(calls()).toBe(1);
    expect(edited.version).toBeGreaterThan(job.version);
  }, 30_000);

  it("an older version's next attempt (no retryOf: written with its FAILED predecessor in one transaction) runs without waiting", async () => {
    const job = await oneOff(SOON);
    const { handler, calls } = flaky(1);
    expect(await deliver(job, 1, handler)).toBe("ack");
    const second = await attempt(job, 2);
    // As an older worker wrote it: the same item without retryOf.
    const item = await f.engine.doc.send(
      new GetCommand({
        TableName: f.engine.tables.runs,
        Key: runKey(job.jobId, second.scheduledFor, 2),
      }),
    );
    const { retryOf: _dropped, ...older } = item.Item ?? {};
    await f.engine.doc.send(new PutCommand({ TableName: f.engine.tables.runs, Item: older }));
    expect(await deliver(job, 2, handler)).toBe("ack");
    expect(calls()).toBe(2);
    const ran = await attempt(job, 2);
    expect(ran).toMatchObject({ status: "SUCCEEDED" });
    expect(ran.retryOf).toBeUndefined();
  }, 30_000);
  it("a replay of a run that died after a crash between the writes runs, and the crashed start's retry entry, claimed after it, does not take it over", async () => {
    const job = await oneOff(LATER);
    let calls = 0;
    const failsThenDies: JobHandler = async () => {
      calls++;
      if (calls <= 2) throw new JobError(`failure ${calls}`, { retryable: calls === 1 });
    };
    await dieAfterNextAttempt(job, failsThenDies, 0.99);
    const [entry] = (await f.dueEntries()).filter((d) => d.jobId === job.jobId);
    if (!entry) throw new Error("no retry entry");
    expect(await deliver(job, 1, failsThenDies)).toBe("ack");
    const dead = await attempt(job, 1);
    expect(dead).toMatchObject({ status: "DEAD" });
    const replay = (await replayDeadLetter(f.engine, TENANT, dead.runId)).run;
    expect(replay).toMatchObject({ attempt: 2, status: "QUEUED" });

    // The entry the crashed start filed comes due before the replay's message is taken.
    const due = new Date(entry.dueAt);
    const claimed = await claimDueEntry(f.engine, entry, {
      now: due,
      horizonEnd: new Date(due.getTime() + 60_000),
    });
    if (claimed.outcome !== "claimed") throw new Error(claimed.outcome);
    expect(claimed.runs).toEqual([]);
    expect(await deliver(job, 2, failsThenDies)).toBe("ack");
    expect(calls).toBe(3);
    expect((await runsOf(job.jobId)).map((r) => [r.attempt, r.status])).toEqual([
      [1, "DEAD"],
      [2, "SUCCEEDED"],
    ]);
    expect((await f.dueEntries()).filter((d) => d.jobId === job.jobId)).toEqual([]);
  }, 30_000);
  it("attempt 1 cancelled by its route after a crash between the writes: attempt 2 is skipped, nothing runs again", async () => {
    const job = await oneOff(SOON);
    const { handler, calls } = flaky(1);
    await dieAfterNextAttempt(job, handler);
    const first = await attempt(job, 1);
    await cancelRun(f.engine, TENANT, job.jobId, first.runId);
    expect(await deliver(job, 2, handler)).toBe("ack");
    expect(await deliver(job, 1, handler)).toBe("ack");
    expect(await runsOf(job.jobId)).toMatchObject([
      { attempt: 1, status: "CANCELLED", cancelledBy: "api" },
      {
        attempt: 2,
        status: "SKIPPED",
        reason: `${first.runId} ended CANCELLED, not FAILED: this retry does not run`,
      },
    ]);
    expect(calls()).toBe(1);
  }, 30_000);

  it("a pause and resume after a crash between the writes: attempt 2 parks, then waits for attempt 1, which fails again and lets it run once", async () => {
    const job = await oneOff(SOON);
    const { handler, calls } = flaky(2);
    await dieAfterNextAttempt(job, handler);
    await pauseJob(f.engine, TENANT, job.jobId);
    expect(await deliver(job, 2, handler)).toBe("ack");
    expect((await getJob(f.engine, job.jobId))?.parkedRuns).toHaveProperty(
      (await attempt(job, 2)).runId,
    );
    await resumeJob(f.engine, TENANT, job.jobId);
    expect(await deliver(job, 2, handler)).toBe("ack");
    expect(await attempt(job, 2)).toMatchObject({
      status: "QUEUED",
      reason: expect.stringMatching(/^waiting: .* has not ended/),
    });
    expect(await deliver(job, 1, handler)).toBe("ack");
    expect(await deliver(job, 2, handler)).toBe("ack");
    expect((await runsOf(job.jobId)).map((r) => [r.attempt, r.status])).toEqual([
      [1, "FAILED"],
      [2, "SUCCEEDED"],
    ]);
    expect(calls()).toBe(3);
  }, 30_000);

  /**
   * A handler whose attempt 1 pauses its job with `running: "cancel"` once its start is written
   * (a first delivery writes it while the handler runs: the pause must find it running), then
   * fails retryably; later attempts succeed. `called` counts every call.
   */
  const failingUnderPause =
    (called: () => void, beatsHeld: { hold(): void }): JobHandler =>
    async (ctx) => {
      called();
      if (ctx.attempt !== 1) return;
      await waitFor("the run's start", async () =>
        (await runsOf(ctx.jobId)).some((r) => r.status === "RUNNING"),
      );
      beatsHeld.hold();
      await pauseJob(f.engine, TENANT, ctx.jobId, { running: "cancel" });
      throw new JobError("failed as the pause cancelled it", { retryable: true });
    };

  it("a one-off's attempt 1 failing under a pause's cancel leaves its retry entry; resume's re-filed occurrence and that entry give one attempt 2, run once", async () => {
    // The retry entry comes due while resume's attempt 2 is still queued, or once it has run.
    for (const retryClaimed of ["before attempt 2 runs", "after attempt 2 ran"] as const) {
      const job = await oneOff(LATER);
      let calls = 0;
      const beatsHeld = withHeartbeatsHeld(f.engine);
      const failsUnderPause = failingUnderPause(() => calls++, beatsHeld);
      const first = await attempt(job, 1);
      const deps = {
        ...f.workerDeps("w", { flaky: failsUnderPause }, 200),
        engine: { ...beatsHeld.engine, random: () => 0.99 },
      };
      try {
        expect(await processRun(deps, deliveryOfRun(f.engine, first))).toBe("ack");
      } finally {
        beatsHeld.destroy();
      }
      expect(await runsOf(job.jobId)).toMatchObject([
        { attempt: 1, status: "CANCELLED", cancelledBy: "pause" },
      ]);
      // The failure's next attempt, put before its refused ending, is not taken back for a pause.
      const entries = async () => (await f.dueEntries()).filter((d) => d.jobId === job.jobId);
      const [retryEntry, ...others] = await entries();
      expect(others).toEqual([]);
      expect(retryEntry).toMatchObject({
        kind: "retry",
        attempt: 2,
        retryOf: { runId: first.runId },
      });
      if (!retryEntry) throw new Error("no retry entry");

      // Resume files the occurrence again at attempt 2 and claims it at once (it is overdue): its
      // run is attempt 2, which names attempt 1 under the fence of no start, so the retry entry's
      // claim (its start's fence) finds it handled. The retry entry is left as it was.
      expect((await resumeJob(f.engine, TENANT, job.jobId)).status).toBe("ACTIVE");
      const queued = await attempt(job, 2);
      expect(queued).toMatchObject({ status: "QUEUED" });
      expect(queued.retryOf).toEqual({ runId: first.runId, fence: 0, oneOff: true });
      expect(await entries()).toEqual([retryEntry]);

      const claimRetryEntry = async () => {
        const due = new Date(retryEntry.dueAt);
        const claimed = await claimDueEntry(f.engine, retryEntry, {
          now: due,
          horizonEnd: new Date(due.getTime() + 60_000),
        });
        if (claimed.outcome !== "claimed") throw new Error(claimed.outcome);
        return claimed.runs;
      };
      if (retryClaimed === "before attempt 2 runs") {
        expect(await claimRetryEntry()).toEqual([]);
        expect(await attempt(job, 2)).toEqual(queued);
      }
      expect(await deliver(job, 2, failsUnderPause)).toBe("ack");
      if (retryClaimed === "after attempt 2 ran") expect(await claimRetryEntry()).toEqual([]);

      expect((await runsOf(job.jobId)).map((r) => [r.attempt, r.status])).toEqual([
        [1, "CANCELLED"],
        [2, "SUCCEEDED"],
      ]);
      expect(calls, retryClaimed).toBe(2);
      expect(await entries()).toEqual([]);
      expect((await getJob(f.engine, job.jobId))?.status).toBe("COMPLETED");
    }
  }, 60_000);

  it("a one-off's attempt 1 failing under a pause's cancel with its retry due soon: resume files nothing beside that attempt 2, which runs once", async () => {
    const job = await oneOff(SOON);
    let calls = 0;
    const beatsHeld = withHeartbeatsHeld(f.engine);
    const failsUnderPause = failingUnderPause(() => calls++, beatsHeld);
    const first = await attempt(job, 1);
    try {
      expect(
        await processRun(
          { ...f.workerDeps("w", { flaky: failsUnderPause }, 200), engine: beatsHeld.engine },
          deliveryOfRun(f.engine, first),
        ),
      ).toBe("ack");
    } finally {
      beatsHeld.destroy();
    }
    expect(await runsOf(job.jobId)).toMatchObject([
      { attempt: 1, status: "CANCELLED", cancelledBy: "pause" },
      { attempt: 2, status: "QUEUED", retryOf: { runId: first.runId } },
    ]);
    // Its delivery while paused parks it; resume sends it again and files no entry of its own.
    expect(await deliver(job, 2, failsUnderPause)).toBe("ack");
    expect(calls).toBe(1);
    await resumeJob(f.engine, TENANT, job.jobId);
    expect((await f.dueEntries()).filter((d) => d.jobId === job.jobId)).toEqual([]);
    expect(await deliver(job, 2, failsUnderPause)).toBe("ack");
    expect((await runsOf(job.jobId)).map((r) => [r.attempt, r.status])).toEqual([
      [1, "CANCELLED"],
      [2, "SUCCEEDED"],
    ]);
    expect(calls).toBe(2);
  }, 30_000);
});
