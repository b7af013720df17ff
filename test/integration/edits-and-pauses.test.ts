import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Clock, offsetClock } from "../../shared/clock.js";
import type { Engine } from "../../shared/engine.js";
import { type JobContext, JobError, type JobHandler } from "../../shared/execution/job-contract.js";
import { processRun } from "../../shared/execution/worker.js";
import {
  cancelJob,
  createJob,
  editJob,
  type JobChanges,
  pauseJob,
  replayDeadLetter,
  resumeJob,
} from "../../shared/jobs/index.js";
import { listDeadLetters } from "../../shared/jobs/queries.js";
import type { Run } from "../../shared/model.js";
import type { ReceivedRun } from "../../shared/queue/work-queue.js";
import { plannedTime } from "../../shared/schedule/index.js";
import { getJob } from "../../shared/storage/run-reads.js";
import {
  createEngineFixture,
  dailyAwayFrom,
  deliveryOfRun,
  type EngineFixture,
  engineAt,
  testJob,
} from "../support/engine-fixture.js";
import { withFaults } from "../support/faults.js";

const TENANT = "tenant-a";
const MINUTE = 60_000;
/** A retry due within a second, so the test does not wait out the default backoff. */
const QUICK_RETRY = { maxAttempts: 5, initialDelayMs: 1000, maxDelayMs: 1000 };

/**
 * Regression tests for issue 13 item 7: an edit, a pause or a replay while
 * paused never silently drops a run that should run.
 */
describe("edits, pauses and retries keep the runs that should run", () => {
  let f: EngineFixture;
  /** What each handler call saw: the payload of the job definition it ran. */
  let seen: { runId: string; payload: unknown }[];
  const handlers: Record<string, JobHandler> = {
    recorded: async (ctx: JobContext) => void seen.push({ runId: ctx.runId, payload: ctx.payload }),
    // Fails (retryably) until its payload says it is fixed: a payload fix is what a retry waits for.
    flaky: async (ctx: JobContext) => {
      seen.push({ runId: ctx.runId, payload: ctx.payload });
      if ((ctx.payload as { fixed?: boolean } | null)?.fixed !== true) throw new Error("broken");
    },
    broken: async () => {
      throw new JobError("bad request", { retryable: false });
    },
  };

  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  /** A clock that reads `ms` (epoch) now and runs on from there. */
  const at = (ms: number): Clock => offsetClock(ms - Date.now());
  const withClock = (clock: Clock): Engine => ({ ...f.engine, clock });
  const runsOf = async (jobId: string) =>
    (await f.runs())
      .filter((r) => r.jobId === jobId)
      .sort((a, b) =>
        a.scheduledFor === b.scheduledFor
          ? a.attempt - b.attempt
          : a.scheduledFor < b.scheduledFor
            ? -1
            : 1,
      );
  /** One delivery of a run's message to a worker whose clock reads `clock`; received with a lease-sized visibility. */
  const deliver = (run: Run, clock: Clock) => {
    const received = deliveryOfRun(f.engine, run);
    return processRun({ ...f.workerDeps("w", handlers), engine: withClock(clock) }, received);
  };

  /** The queue's next delivery of a job's run `attempt`; stale deliveries (of runs already delivered in the test) are processed on the way. */
  const deliveryOf = async (jobId: string, attempt: number): Promise<ReceivedRun> => {
    for (;;) {
      const received = await f.nextDelivery(f.engine.queues.normal, jobId);
      if (received.message.attempt === attempt) return received;
      await f.process(f.workerDeps("w", handlers), received);
    }
  };

  it("a schedule edit after a dispatcher outage records every occurrence the old schedule had due: none is dropped", async () => {
    const createdAt = Math.ceil((Date.now() + 60 * MINUTE) / MINUTE) * MINUTE;
    // Longer than a claim reaches (14 minutes), so some occurrences were never claimed.
    const editedAt = createdAt + 20 * MINUTE;
    const { job } = await createJob(
      withClock(() => new Date(createdAt)),
      testJob({ type: "recorded", schedule: { every: "PT1M" } }),
    );
    // No dispatcher pass runs for twenty minutes; then the schedule is edited.
    await editJob(
      withClock(() => new Date(editedAt)),
      TENANT,
      job.jobId,
      1,
      {
        schedule: { cron: "* * * * *", timezone: "UTC" },
      },
    );
    const after = await runsOf(job.jobId);
    const oldOccurrences = Array.from({ length: 20 }, (_, k) =>
      new Date(createdAt + k * MINUTE).toISOString(),
    );
    const unrecorded = oldOccurrences.filter((at) => !after.some((r) => r.scheduledFor === at));
    expect(unrecorded).toEqual([]);
    const skippedWithoutReason = after.filter((r) => r.status === "SKIPPED" && !r.reason);
    expect(skippedWithoutReason).toEqual([]);
    // fire_once: the latest missed occurrence runs, the earlier missed ones are SKIPPED as missed.
    const missed = after.filter(
      (r) => r.scheduledFor < new Date(editedAt - MINUTE).toISOString() && r.status === "SKIPPED",
    );
    expect(missed.length).toBeGreaterThan(0);
    for (const run of missed) expect(run.reason).toMatch(/misfire/);
  });

  it.each(["skip", "complete"] as const)(
    "a schedule edit after a dispatcher outage (inFlight %s) queues and records no occurrence of the old schedule that was not yet due at the edit",
    async (inFlight) => {
      const createdAt =
        Math.ceil((Date.now() + (inFlight === "skip" ? 180 : 240) * MINUTE) / MINUTE) * MINUTE;
      // Past what the create's claim reached (14 minutes), half a minute into a minute.
      const editedAt = createdAt + 20 * MINUTE + 30_000;
      const { job } = await createJob(
        withClock(() => new Date(createdAt)),
        testJob({ type: "recorded", schedule: { every: "PT1M" } }),
      );
      // Daily, twelve hours on: the new schedule has nothing near the edit.
      const daily = dailyAwayFrom(editedAt);
      // No dispatcher pass runs for twenty minutes; then the job is edited to run daily.
      await editJob(
        withClock(() => new Date(editedAt)),
        TENANT,
        job.jobId,
        1,
        {
          schedule: daily.schedule,
          policies: { ...testJob().policies, inFlight },
        },
      );
      const after = await runsOf(job.jobId);
      // Every occurrence due at the edit is decided (run or SKIPPED with its reason)...
      const due = Array.from({ length: 21 }, (_, k) =>
        new Date(createdAt + k * MINUTE).toISOString(),
      );
      expect(due.filter((at) => !after.some((r) => r.scheduledFor === at))).toEqual([]);
      const dueAtEdit = after.find((r) => r.scheduledFor === due.at(-1));
      expect(dueAtEdit).toMatchObject({ status: "QUEUED", jobVersion: 1 });
      // ...and none after it: the old schedule's 20:29 … was never due, under either inFlight.
      const editedIso = new Date(editedAt).toISOString();
      expect(
        after.filter((r) => r.scheduledFor > editedIso).map((r) => [r.scheduledFor, r.status]),
      ).toEqual([]);
      const edited = await getJob(f.engine, job.jobId);
      expect(edited).toMatchObject({ version: 2, status: "ACTIVE" });
      expect(new Date(edited?.nextRunAt ?? 0).getUTCHours()).toBe(daily.hour);
    },
  );

  it("a schedule edit after a dispatcher outage leaves a jittered occurrence whose planned time is after the edit: it was not due", async () => {
    const createdAt = Math.ceil((Date.now() + 300 * MINUTE) / MINUTE) * MINUTE;
    const { job } = await createJob(
      withClock(() => new Date(createdAt)),
      testJob({ type: "recorded", schedule: { every: "PT1M" }, window: "PT1M" }),
    );
    // The first occurrence past what the create claimed whose planned time is a second or more
    // after it: the edit comes between the two.
    const occurrence = Array.from({ length: 20 }, (_, k) => new Date(createdAt + (20 + k) * MINUTE))
      .map((at) => ({ at, planned: plannedTime(job.jobId, at, MINUTE, job.schedule) }))
      .find(({ at, planned }) => planned.getTime() - at.getTime() >= 2000);
    if (occurrence === undefined) throw new Error("no occurrence planned 2 s or more late");
    const editedAt = occurrence.planned.getTime() - 1000;
    const daily = dailyAwayFrom(editedAt);
    await editJob(
      withClock(() => new Date(editedAt)),
      TENANT,
      job.jobId,
      1,
      { schedule: daily.schedule },
    );
    const after = await runsOf(job.jobId);
    const due = Array.from({ length: (occurrence.at.getTime() - createdAt) / MINUTE }, (_, k) =>
      new Date(createdAt + k * MINUTE).toISOString(),
    );
    expect(due.filter((at) => !after.some((r) => r.scheduledFor === at))).toEqual([]);
    const notDue = occurrence.at.toISOString();
    expect(
      after.filter((r) => r.scheduledFor >= notDue).map((r) => [r.scheduledFor, r.status]),
    ).toEqual([]);
  });

  it("a schedule edit between a jittered occurrence and its planned time claims nothing of the old schedule", async () => {
    const createdAt = Math.ceil((Date.now() + 420 * MINUTE) / MINUTE) * MINUTE;
    const startAt = createdAt + 60 * MINUTE;
    const create = () =>
      createJob(
        withClock(() => new Date(createdAt)),
        testJob({
          type: "recorded",
          schedule: { every: "PT1H", startAt: new Date(startAt).toISOString() },
          window: "PT10M",
        }),
      );
    // The occurrence is planned a second or more after it (all but a few jobs in a thousand).
    let { job } = await create();
    for (let tries = 1; offsetOf(job.jobId, job.schedule) < 2000 && tries < 5; tries++) {
      job = (await create()).job;
    }
    const offset = offsetOf(job.jobId, job.schedule);
    expect(offset).toBeGreaterThanOrEqual(2000);
    const editedAt = startAt + offset - 1000;
    const daily = dailyAwayFrom(editedAt);
    await editJob(
      withClock(() => new Date(editedAt)),
      TENANT,
      job.jobId,
      1,
      { schedule: daily.schedule },
    );
    expect((await runsOf(job.jobId)).map((r) => [r.scheduledFor, r.status])).toEqual([]);
    const edited = await getJob(f.engine, job.jobId);
    expect(new Date(edited?.nextRunAt ?? 0).getUTCHours()).toBe(daily.hour);

    function offsetOf(jobId: string, schedule: Parameters<typeof plannedTime>[3]): number {
      return plannedTime(jobId, new Date(startAt), 10 * MINUTE, schedule).getTime() - startAt;
    }
  });

  /**
   * An hourly job created at `createdAt`, given `prepare` (its runs so far), then edited with
   * `changes` an hour and a minute on, no dispatcher pass having run past its next occurrence:
   * the edit is refused (`refusal`), and writes nothing, not even the old schedule's claim
   * (docs/api.md, "Editing a job": an edit refused decides none of them).
   */
  const refusedAfterOutage = async (
    changes: (createdAt: number) => JobChanges,
    refusal: RegExp,
    prepare: (jobId: string, createdAt: number) => Promise<void> = async () => {},
  ) => {
    const createdAt = Math.ceil((Date.now() + 30 * MINUTE) / MINUTE) * MINUTE;
    const { job } = await createJob(
      withClock(() => new Date(createdAt)),
      testJob({ type: "recorded", schedule: { every: "PT1H" } }),
    );
    await prepare(job.jobId, createdAt);
    const before = await getJob(f.engine, job.jobId);
    const runsBefore = await runsOf(job.jobId);
    const refused = editJob(
      withClock(() => new Date(createdAt + 61 * MINUTE)),
      TENANT,
      job.jobId,
      1,
      changes(createdAt),
    );
    await expect(refused).rejects.toThrow(refusal);
    expect(await runsOf(job.jobId)).toEqual(runsBefore);
    expect(await getJob(f.engine, job.jobId)).toEqual(before);
  };

  it("a schedule edit refused (an upstream that does not exist) after a dispatcher outage writes nothing, not even the old schedule's claim", async () => {
    await refusedAfterOutage(
      () => ({ schedule: { after: { jobs: ["01ZZZZZZZZZZZZZZZZZZZZZZZZ"], on: "success" } } }),
      /01ZZZZZZZZZZZZZZZZZZZZZZZZ/,
    );
  });

  it("an edit refused 400 for its runAt (the run there succeeded) after a dispatcher outage writes nothing, not even the old schedule's claim", async () => {
    // Made a one-off at the time of its run that succeeded: a 400 naming schedule.runAt.
    await refusedAfterOutage(
      (createdAt) => ({ schedule: { runAt: new Date(createdAt).toISOString() } }),
      /runAt/,
      async (jobId, createdAt) => {
        seen = [];
        const [first] = await runsOf(jobId);
        if (!first) throw new Error("the create claimed no run");
        await deliver(first, at(createdAt + 1000));
        expect((await runsOf(jobId)).map((r) => r.status)).toEqual(["SUCCEEDED"]);
      },
    );
  });

  it("a schedule edit after a resume whose claim failed records every occurrence due before it", async () => {
    const createdAt = Math.ceil((Date.now() + 120 * MINUTE) / MINUTE) * MINUTE;
    const editedAt = createdAt + 10 * MINUTE;
    const { job } = await createJob(
      withClock(() => new Date(createdAt)),
      testJob({ type: "recorded", schedule: { every: "PT1M" } }),
    );
    await pauseJob(
      withClock(() => new Date(createdAt)),
      TENANT,
      job.jobId,
    );
    // The resume commits, but its fast-path claim fails: the entry waits for a dispatcher pass.
    const faulty = withFaults(
      withClock(() => new Date(editedAt)),
      {
        operation: "TransactWriteItems",
        times: 1,
        match: (input) =>
          (
            (input.TransactItems as { Delete?: { Key?: { pk?: unknown; sk?: unknown } } }[]) ?? []
          ).some(
            (item) =>
              String(item.Delete?.Key?.pk).startsWith("DUE#") &&
              String(item.Delete?.Key?.sk).includes(`#${job.jobId}#`),
          ),
        reason: "ValidationError",
        conflictOn: (item) => item.Put !== undefined,
      },
    );
    try {
      await resumeJob(faulty.engine, TENANT, job.jobId);
      expect(faulty.injected.count).toBe(1);
    } finally {
      faulty.destroy();
    }
    await editJob(
      withClock(() => new Date(editedAt)),
      TENANT,
      job.jobId,
      1,
      {
        schedule: { cron: "* * * * *", timezone: "UTC" },
      },
    );
    const after = await runsOf(job.jobId);
    const unrecorded = Array.from({ length: 10 }, (_, k) =>
      new Date(createdAt + k * MINUTE).toISOString(),
    ).filter((at) => !after.some((r) => r.scheduledFor === at));
    expect(unrecorded).toEqual([]);
    expect(after.filter((r) => r.status === "SKIPPED" && !r.reason)).toEqual([]);
  });

  it("a rename and payload fix does not skip queued runs: they run the current definition and record its version", async () => {
    const startAt = new Date(Date.now() + MINUTE);
    const { job } = await createJob(
      f.engine,
      testJob({
        type: "recorded",
        schedule: { every: "PT1S", startAt: startAt.toISOString() },
        payload: { v: 1 },
      }),
    );
    const queued = (await runsOf(job.jobId)).filter((r) => r.status === "QUEUED");
    expect(queued.length).toBeGreaterThan(100);
    const edited = await editJob(f.engine, TENANT, job.jobId, 1, {
      name: "renamed",
      payload: { v: 2 },
    });
    expect(edited.version).toBe(2);
    expect(Date.parse(edited.nextRunAt ?? "")).toBeGreaterThanOrEqual(
      Date.parse(job.nextRunAt ?? ""),
    );

    seen = [];
    const first = queued[0];
    const later = queued[50];
    if (!first || !later) throw new Error("no queued runs");
    for (const run of [first, later]) {
      expect(run.jobVersion).toBe(1);
      await deliver(run, at(Date.parse(run.scheduledFor)));
    }
    const after = await runsOf(job.jobId);
    for (const run of [first, later]) {
      expect(after.find((r) => r.runId === run.runId)).toMatchObject({
        status: "SUCCEEDED",
        jobVersion: 1,
        executedVersion: 2,
      });
    }
    expect(seen).toEqual([
      { runId: first.runId, payload: { v: 2 } },
      { runId: later.runId, payload: { v: 2 } },
    ]);
  });

  it("a schedule change skips only the queued occurrences its new schedule does not have", async () => {
    const startAt = new Date(Math.ceil((Date.now() + MINUTE) / 1000) * 1000);
    const { job } = await createJob(
      f.engine,
      testJob({
        type: "recorded",
        schedule: { every: "PT10S", startAt: startAt.toISOString() },
      }),
    );
    const queued = (await runsOf(job.jobId)).filter((r) => r.status === "QUEUED").slice(0, 4);
    expect(queued.map((r) => Date.parse(r.scheduledFor) - startAt.getTime())).toEqual([
      0, 10_000, 20_000, 30_000,
    ]);
    await editJob(f.engine, TENANT, job.jobId, 1, {
      schedule: { every: "PT20S", startAt: startAt.toISOString() },
    });
    seen = [];
    for (const run of queued) await deliver(run, at(Date.parse(run.scheduledFor)));
    const after = await runsOf(job.jobId);
    const outcome = queued.map((q) => {
      const run = after.find((r) => r.scheduledFor === q.scheduledFor && r.attempt === 1);
      return [Date.parse(q.scheduledFor) - startAt.getTime(), run?.status, run?.reason ?? null];
    });
    expect(outcome).toEqual([
      [0, "SUCCEEDED", null],
      [
        10_000,
        "SKIPPED",
        `job edited (version 1 → 2): ${queued[1]?.scheduledFor} is not an occurrence of its new schedule`,
      ],
      [20_000, "SUCCEEDED", null],
      [
        30_000,
        "SKIPPED",
        `job edited (version 1 → 2): ${queued[3]?.scheduledFor} is not an occurrence of its new schedule`,
      ],
    ]);
    expect(seen).toHaveLength(2);
  });

  it("a pending retry survives an edit: the payload fix is what it runs, and the one-off completes", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({
        type: "flaky",
        schedule: { runAt: new Date().toISOString() },
        payload: {},
        policies: { ...testJob().policies, retry: QUICK_RETRY },
      }),
    );
    seen = [];
    const [attempt1] = await runsOf(job.jobId);
    if (!attempt1) throw new Error("no run");
    await deliver(attempt1, at(Date.now()));
    const retry = (await runsOf(job.jobId)).find((r) => r.attempt === 2);
    expect(retry).toMatchObject({ status: "QUEUED", jobVersion: 1 });
    if (!retry) throw new Error("no retry");

    await editJob(f.engine, TENANT, job.jobId, 1, { payload: { fixed: true } });
    await deliver(retry, at(Date.parse(retry.dueAt)));
    expect((await runsOf(job.jobId)).map((r) => [r.attempt, r.status, r.executedVersion])).toEqual([
      [1, "FAILED", 1],
      [2, "SUCCEEDED", 2],
    ]);
    expect(seen.map((s) => s.payload)).toEqual([{}, { fixed: true }]);
    expect(await getJob(f.engine, job.jobId)).toMatchObject({
      status: "COMPLETED",
      nextRunAt: null,
    });
  });

  it("a pending retry survives a pause: it is parked and runs after resume", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({
        type: "flaky",
        schedule: { runAt: new Date().toISOString() },
        payload: {},
        policies: { ...testJob().policies, retry: QUICK_RETRY },
      }),
    );
    seen = [];
    const [attempt1] = await runsOf(job.jobId);
    if (!attempt1) throw new Error("no run");
    await deliver(attempt1, at(Date.now()));
    const retry = (await runsOf(job.jobId)).find((r) => r.attempt === 2);
    if (!retry) throw new Error("no retry");

    await pauseJob(f.engine, TENANT, job.jobId);
    await editJob(f.engine, TENANT, job.jobId, 1, { payload: { fixed: true } });
    await deliver(retry, at(Date.parse(retry.dueAt)));
    const parked = (await runsOf(job.jobId)).find((r) => r.attempt === 2);
    expect(parked).toMatchObject({ status: "QUEUED", reason: "waiting: job paused" });
    expect((await getJob(f.engine, job.jobId))?.parkedRuns).toHaveProperty(retry.runId);

    const resumed = await resumeJob(f.engine, TENANT, job.jobId);
    expect(resumed).toMatchObject({ status: "ACTIVE", parkedRuns: {} });
    const delivery = await deliveryOf(job.jobId, 2);
    expect(delivery.message.scheduledFor).toBe(retry.scheduledFor);
    await f.process(f.workerDeps("w", handlers), delivery);
    expect((await runsOf(job.jobId)).map((r) => [r.attempt, r.status])).toEqual([
      [1, "FAILED"],
      [2, "SUCCEEDED"],
    ]);
    expect((await getJob(f.engine, job.jobId))?.status).toBe("COMPLETED");
  }, 30_000);

  it("pausing a one-off after its run was claimed keeps the run: it runs after resume", async () => {
    const runAt = new Date(Date.now() + 3000);
    const { job } = await createJob(
      f.engine,
      testJob({ type: "recorded", schedule: { runAt: runAt.toISOString() } }),
    );
    expect(job.nextRunAt).toBeNull();
    const [claimed] = await runsOf(job.jobId);
    if (!claimed) throw new Error("not claimed at create");
    await pauseJob(f.engine, TENANT, job.jobId);
    seen = [];
    await deliver(claimed, at(runAt.getTime()));
    expect(seen).toEqual([]);
    await resumeJob(f.engine, TENANT, job.jobId);
    const delivery = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    await f.process(f.workerDeps("w", handlers), delivery);
    expect((await runsOf(job.jobId)).map((r) => r.status)).toEqual(["SUCCEEDED"]);
    expect(seen).toHaveLength(1);
    expect((await getJob(f.engine, job.jobId))?.status).toBe("COMPLETED");
  }, 30_000);

  it("cancelling a paused job cancels its parked runs, which have no message left", async () => {
    const runAt = new Date(Date.now() + MINUTE);
    const { job } = await createJob(
      f.engine,
      testJob({ type: "recorded", schedule: { runAt: runAt.toISOString() } }),
    );
    const [claimed] = await runsOf(job.jobId);
    if (!claimed) throw new Error("not claimed at create");
    await pauseJob(f.engine, TENANT, job.jobId);
    await deliver(claimed, at(runAt.getTime()));
    expect((await runsOf(job.jobId))[0]?.reason).toBe("waiting: job paused");
    // Cancelled a day later: the run lies outside the window cancel queries; the parked list names it.
    await cancelJob(engineAt(f.engine, runAt.getTime() + 24 * 60 * MINUTE), TENANT, job.jobId);
    expect((await runsOf(job.jobId)).map((r) => [r.status, r.reason])).toEqual([
      ["CANCELLED", "job cancelled"],
    ]);
  });

  it("a one-off parked through a long pause is judged by its misfire policy at resume, and never left ACTIVE with nothing pending", async () => {
    const runAt = new Date(Date.now() + MINUTE);
    const { job } = await createJob(
      f.engine,
      testJob({
        type: "recorded",
        schedule: { runAt: runAt.toISOString() },
        policies: { ...testJob().policies, misfire: "skip" },
      }),
    );
    const [claimed] = await runsOf(job.jobId);
    if (!claimed) throw new Error("not claimed at create");
    await pauseJob(f.engine, TENANT, job.jobId);
    await deliver(claimed, at(runAt.getTime()));
    // Resumed an hour later: under `skip`, the occurrence is an hour past its grace.
    const later = at(runAt.getTime() + 60 * MINUTE);
    await resumeJob(withClock(later), TENANT, job.jobId);
    seen = [];
    const delivery = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    await processRun({ ...f.workerDeps("w", handlers), engine: withClock(later) }, delivery);
    expect(seen).toEqual([]);
    const [run] = await runsOf(job.jobId);
    expect(run?.status).toBe("SKIPPED");
    expect(run?.reason).toMatch(/^misfire: .*policy skip$/);
    expect(await getJob(f.engine, job.jobId)).toMatchObject({
      status: "COMPLETED",
      nextRunAt: null,
    });
  }, 30_000);

  it("a one-off created past its grace under skip is COMPLETED, not ACTIVE with nothing pending", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({
        schedule: { runAt: new Date(Date.now() - 10 * MINUTE).toISOString() },
        policies: { ...testJob().policies, misfire: "skip" },
      }),
    );
    expect((await runsOf(job.jobId)).map((r) => r.status)).toEqual(["SKIPPED"]);
    expect(await getJob(f.engine, job.jobId)).toMatchObject({
      status: "COMPLETED",
      nextRunAt: null,
    });
  });

  it("replaying a dead letter while the job is paused keeps it: the new attempt waits and runs after resume", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({
        type: "broken",
        schedule: { every: "PT1H", startAt: new Date(Date.now() + 1000).toISOString() },
      }),
    );
    const [first] = await runsOf(job.jobId);
    if (!first) throw new Error("no run");
    await deliver(first, at(Date.parse(first.scheduledFor)));
    const dead = (await runsOf(job.jobId)).find((r) => r.status === "DEAD");
    if (!dead) throw new Error("not dead");
    await pauseJob(f.engine, TENANT, job.jobId);
    await editJob(f.engine, TENANT, job.jobId, 1, { name: "fixed" });
    // The fix: from now on the job's handler succeeds.
    handlers.broken = async () => undefined;
    const replay = (await replayDeadLetter(f.engine, TENANT, dead.runId)).run;
    const waiting = await deliveryOf(job.jobId, 2);
    await f.process(f.workerDeps("w", handlers), waiting);
    expect((await runsOf(job.jobId)).find((r) => r.runId === replay.runId)).toMatchObject({
      status: "QUEUED",
      reason: "waiting: job paused",
    });

    await resumeJob(f.engine, TENANT, job.jobId);
    const delivery = await deliveryOf(job.jobId, 2);
    await f.process(f.workerDeps("w", handlers), delivery);
    expect((await runsOf(job.jobId)).find((r) => r.runId === replay.runId)).toMatchObject({
      status: "SUCCEEDED",
      executedVersion: 2,
    });
    const listed = await listDeadLetters(f.engine, TENANT, { limit: 50 });
    expect(listed.items.map((r) => r.runId)).not.toContain(dead.runId);
  }, 30_000);
});
