import { PutCommand } from "@aws-sdk/lib-dynamodb";
import { beforeEach, describe, expect, it } from "vitest";
import { forEachConcurrently } from "../../shared/concurrency.js";
import { reap } from "../../shared/dispatch/reaper.js";
import { IllegalTransitionError } from "../../shared/errors.js";
import { cancelRun, editJob, pauseJob, resumeJob } from "../../shared/jobs/index.js";
import { getTenantJob } from "../../shared/jobs/queries.js";
import { MAX_ATTEMPT, runId } from "../../shared/keys.js";
import type { Job, Run } from "../../shared/model.js";
import { startRun } from "../../shared/storage/run-start.js";
import { queuedRun } from "../../shared/storage/runs.js";
import { useCancelledAttempt } from "../support/cancelled-attempt.js";
import { SECOND, useClaimRace } from "../support/claim-race.js";
import { deliveryOfRun, type EngineFixture } from "../support/engine-fixture.js";
import { withSqsFaults } from "../support/faults.js";
import { useOneOffMoves } from "../support/one-off-moves.js";
import { copyRunToAttempt } from "../support/seed.js";

/**
 * Attacks on the next attempts a resume (or a pause's check after one) files for a one-off's
 * failure retries at occurrences it has left (`retriesCancelledElsewhere`).
 */

const race = useClaimRace();
const { clock, runsOf, fixture, runsCalled, pastDeadlineOf, withHooks, entriesOf } = race;
const {
  failedOnce,
  retryRunningAtOldTime,
  attemptsOf,
  retryingOneOff,
  recurringFailedOnce,
  failRun,
} = useOneOffMoves(race);
const { cancelLands, expectRunsOnceCancelledEnded } = useCancelledAttempt(race);
let f: EngineFixture;
beforeEach(() => {
  f = fixture();
});

/** The occurrence left: attempt 1 failed, its retry still running under the cancel, the next attempt filed. */
const THIRD_FILED = [
  [1, "FAILED"],
  [2, "RUNNING"],
  [3, "QUEUED"],
];

/**
 * The cancel of `retry` (attempt 2) lands (`cancelLands`), and past attempt 3's deadline the
 * reaper sends it: attempt 3, as it then stands.
 */
async function thirdSentOnceCancelLands(jobId: string, retry: Run) {
  await cancelLands(retry);
  const third = (await runsOf(jobId)).find((r) => r.attempt === 3);
  if (!third) throw new Error("no attempt 3");
  pastDeadlineOf(new Date(third.dueAt));
  await reap(f.engine);
  return third;
}

/** The occurrence at `due` ran once more, as attempt 3, after attempt 2 ended CANCELLED. */
async function expectThirdRanOnce(jobId: string, due: Date) {
  expect((await runsCalled(jobId)).filter(([at]) => at === due.toISOString())).toEqual([
    [due.toISOString(), 1],
  ]);
  expect(await attemptsOf(jobId, due)).toEqual([
    [1, "FAILED"],
    [2, "CANCELLED"],
    [3, "SUCCEEDED"],
  ]);
}

describe("a one-off's retry at an occurrence it left, cancelled through the API", () => {
  it.each(["finish", "cancel"] as const)(
    "paused (running: %s) and resumed before its worker saw the cancel: the cancelled retry is not filed again, and nothing runs",
    async (running) => {
      const { job, due, retry } = await retryRunningAtOldTime();
      const asked = await cancelRun(f.engine, job.tenantId, job.jobId, retry.runId);
      expect([asked.status, asked.cancelledBy]).toEqual(["RUNNING", "api"]);
      await pauseJob(f.engine, job.tenantId, job.jobId, { running });
      await resumeJob(f.engine, job.tenantId, job.jobId);
      expect(await attemptsOf(job.jobId, due)).toEqual([
        [1, "FAILED"],
        [2, "RUNNING"],
      ]);

      // The cancel lands: worker-a's lease lapses and a delivery ends attempt 2; nothing is left to run.
      pastDeadlineOf(clock());
      await f.process(f.workerDeps("w", {}), deliveryOfRun(f.engine, retry));
      pastDeadlineOf(clock());
      await reap(f.engine);
      expect(await runsCalled(job.jobId)).toEqual([]);
      expect(await attemptsOf(job.jobId, due)).toEqual([
        [1, "FAILED"],
        [2, "CANCELLED"],
      ]);
    },
  );
});

describe("a one-off's retry at an occurrence it left, cancelled by a pause", () => {
  it("resumed with every send refused (a resume dead before its sends), then the resume repeated: the reaper sends the attempt filed again, which runs once", async () => {
    const { job, due, retry } = await retryRunningAtOldTime();
    await pauseJob(f.engine, job.tenantId, job.jobId, { running: "cancel" });
    const refusing = withSqsFaults(f.engine, {
      operation: "SendMessageBatch",
      kind: "refuseEntries",
      times: Number.POSITIVE_INFINITY,
    });
    try {
      await resumeJob(refusing.engine, job.tenantId, job.jobId);
    } finally {
      refusing.destroy();
    }
    expect(refusing.injected.count).toBeGreaterThan(0);
    await resumeJob(f.engine, job.tenantId, job.jobId);
    expect(await attemptsOf(job.jobId, due)).toEqual(THIRD_FILED);

    await thirdSentOnceCancelLands(job.jobId, retry);
    await expectThirdRanOnce(job.jobId, due);
  });
});

describe("a one-off's retry at an occurrence it left failing there, its own retry running", () => {
  it("paused with running: cancel and resumed: that retry's next attempt is filed and runs once, after it ended", async () => {
    const { job, due } = await failedOnce(0, { moveAway: true });
    const retry = (await runsOf(job.jobId)).find((r) => r.attempt === 2);
    if (!retry) throw new Error("no retry");
    await failRun(retry);
    const third = (await runsOf(job.jobId)).find((r) => r.attempt === 3);
    if (!third) throw new Error("no attempt 3");
    expect((await startRun(f.engine, third, "worker-b", clock())).kind).toBe("started");
    await pauseJob(f.engine, job.tenantId, job.jobId, { running: "cancel" });
    await resumeJob(f.engine, job.tenantId, job.jobId);
    expect(await attemptsOf(job.jobId, due)).toEqual([
      [1, "FAILED"],
      [2, "FAILED"],
      [3, "RUNNING"],
      [4, "QUEUED"],
    ]);
    await expectRunsOnceCancelledEnded(job.jobId, due, 4);
  });
});

describe("a one-off's retry at an occurrence it left, cancelled by a pause, the resume dead after putting its next attempt", () => {
  it("before the job's write: the job stays PAUSED, the attempt's worker parks it, and the next resume runs it once", async () => {
    const { job, due, retry } = await retryRunningAtOldTime();
    await pauseJob(f.engine, job.tenantId, job.jobId, { running: "cancel" });
    const dies = () => new Error("the resume died before its job's write");
    const { result } = await withHooks([{ command: "TransactWriteItemsCommand", fail: dies }], () =>
      resumeJob(f.engine, job.tenantId, job.jobId).catch((error: unknown) => error),
    );
    expect(result).toBeInstanceOf(Error);
    expect((await getTenantJob(f.engine, job.tenantId, job.jobId)).status).toBe("PAUSED");
    expect(await attemptsOf(job.jobId, due)).toEqual(THIRD_FILED);

    const third = await thirdSentOnceCancelLands(job.jobId, retry);
    expect(await runsCalled(job.jobId)).toEqual([]);
    expect(Object.keys((await getTenantJob(f.engine, job.tenantId, job.jobId)).parkedRuns)).toEqual(
      [third.runId],
    );

    await resumeJob(f.engine, job.tenantId, job.jobId);
    await expectThirdRanOnce(job.jobId, due);
  });
});

describe("a recurring job's failure retry running, the job made a one-off at another time", () => {
  it("paused with running: cancel and resumed: the pause's cancel of a recurring job's retry stands, and nothing runs again", async () => {
    const { job, due, away } = await recurringFailedOnce("recurring-retry-made-one-off");
    const retry = (await runsOf(job.jobId)).find((r) => r.attempt === 2);
    if (!retry) throw new Error("no retry");
    expect(retry.retryOf?.oneOff).toBeUndefined();
    expect((await startRun(f.engine, retry, "worker-a", clock())).kind).toBe("started");
    await editJob(f.engine, job.tenantId, job.jobId, 1, {
      schedule: { runAt: away.toISOString() },
    });

    await pauseJob(f.engine, job.tenantId, job.jobId, { running: "cancel" });
    await resumeJob(f.engine, job.tenantId, job.jobId);
    expect(await attemptsOf(job.jobId, due)).toEqual([
      [1, "FAILED"],
      [2, "RUNNING"],
    ]);
    await cancelLands(retry);
    pastDeadlineOf(clock());
    await reap(f.engine);
    expect((await runsCalled(job.jobId)).filter(([at]) => at === due.toISOString())).toEqual([]);
  });
});

describe("a one-off moved on from 100 occurrences, each left with its failure retry running", () => {
  /**
   * What a one-off whose run fails as its handler moves it on (`failedOnce`'s `moveAway`), its
   * retry then started at the time it left, leaves after 100 such moves: at each occurrence it
   * left, attempt 2 (retryOf attempt 1's start, the one-off's) RUNNING. Written here as the
   * claim's fast path writes such a retry (`queuedRun`) and started by a worker, 100 moves through
   * the worker taking some 14 s.
   */
  async function retriesRunningAt100Occurrences() {
    const { job, due } = await retryingOneOff();
    const now = clock();
    const left = Array.from({ length: 100 }, (_, i) => new Date(due.getTime() - (i + 1) * SECOND));
    await forEachConcurrently(left, 16, async (at) => {
      const { run, item } = queuedRun(
        {
          jobId: job.jobId,
          tenantId: job.tenantId,
          scheduledFor: at,
          dueAt: now,
          attempt: 2,
          priority: job.priority,
          jobVersion: 1,
          retryOf: { runId: runId(job.jobId, at, 1), fence: 1, oneOff: true },
        },
        now,
        f.engine.settings,
      );
      await f.engine.doc.send(new PutCommand({ TableName: f.engine.tables.runs, Item: item }));
      expect((await startRun(f.engine, run, "worker-a", now)).kind).toBe("started");
    });
    return { job, left };
  }

  it("paused with running: cancel, then resumed: the resume commits and files each cancelled retry's next attempt", async () => {
    const { job, left } = await retriesRunningAt100Occurrences();
    await pauseJob(f.engine, job.tenantId, job.jobId, { running: "cancel" });
    await resumeJob(f.engine, job.tenantId, job.jobId);
    expect((await getTenantJob(f.engine, job.tenantId, job.jobId)).status).toBe("ACTIVE");
    const runs = await runsOf(job.jobId);
    const filedAgain = left.filter((at) =>
      runs.some(
        (r) => r.scheduledFor === at.toISOString() && r.attempt === 3 && r.status === "QUEUED",
      ),
    );
    expect(filedAgain).toHaveLength(left.length);
  });
});

/** The engine with its warnings collected: the lines that name the last attempt, their fields. */
function warningsOfLastAttempt() {
  const warned: { message: string; fields: Record<string, unknown> }[] = [];
  const warn = (message: string, fields: Record<string, unknown> = {}) =>
    void warned.push({ message, fields });
  const { engine } = f;
  return {
    engine: { ...engine, obs: { ...engine.obs, log: { ...engine.obs.log, warn } } },
    lines: () => warned.filter((l) => l.message.includes("last attempt")).map((l) => l.fields),
  };
}

/** A run's keys as its log line names them. */
const keysOf = (job: Job, runId: string, at: Date) => ({
  tenantId: job.tenantId,
  jobId: job.jobId,
  runId,
  attempt: MAX_ATTEMPT,
  scheduledFor: at.toISOString(),
});

describe("a one-off's retry at the last attempt a run can have, cancelled by a pause", () => {
  it("at an occurrence it left: the resume files no next attempt and logs the run's keys", async () => {
    const { job, due, retry } = await retryRunningAtOldTime();
    const lastId = await copyRunToAttempt(f.engine, retry, MAX_ATTEMPT);
    await pauseJob(f.engine, job.tenantId, job.jobId, { running: "cancel" });
    const last = (await runsOf(job.jobId)).find((r) => r.runId === lastId);
    expect([last?.status, last?.cancelledBy]).toEqual(["RUNNING", "pause"]);

    const warnings = warningsOfLastAttempt();
    const resumed = await resumeJob(warnings.engine, job.tenantId, job.jobId);

    expect(resumed.status).toBe("ACTIVE");
    expect((await attemptsOf(job.jobId, due)).map(([attempt]) => attempt)).toEqual([
      1,
      2,
      MAX_ATTEMPT,
    ]);
    expect(warnings.lines()).toEqual([keysOf(job, lastId, due)]);
  });

  it("at its own occurrence, moved away while paused: the edit files no next attempt and logs the run's keys", async () => {
    const { job, due } = await failedOnce(0);
    const retry = (await runsOf(job.jobId)).find((r) => r.attempt === 2);
    if (!retry) throw new Error("no retry");
    expect((await startRun(f.engine, retry, "worker-a", clock())).kind).toBe("started");
    const lastId = await copyRunToAttempt(f.engine, retry, MAX_ATTEMPT);
    await pauseJob(f.engine, job.tenantId, job.jobId, { running: "cancel" });

    const warnings = warningsOfLastAttempt();
    const away = new Date(clock().getTime() + 600 * SECOND);
    const moved = await editJob(warnings.engine, job.tenantId, job.jobId, 1, {
      schedule: { runAt: away.toISOString() },
    });

    expect(moved.status).toBe("PAUSED");
    expect((await attemptsOf(job.jobId, due)).map(([attempt]) => attempt)).toEqual([
      1,
      2,
      MAX_ATTEMPT,
    ]);
    expect(warnings.lines()).toEqual([keysOf(job, lastId, due)]);
  });
});

describe("a paused one-off moved back to a time whose run at the last attempt a run can have is running, then cancelled through the API", () => {
  // Filed at attempt 1 (the claim found attempt 1's run FAILED, its retry to come), the occurrence
  // never ran and the one-off completed; below the last attempt, it is filed at the next and runs.
  it("the resume is refused, and nothing is written", async () => {
    const { job, due, retry } = await retryRunningAtOldTime();
    const lastId = await copyRunToAttempt(f.engine, retry, MAX_ATTEMPT);
    await cancelRun(f.engine, job.tenantId, job.jobId, retry.runId);
    await pauseJob(f.engine, job.tenantId, job.jobId);
    // Still running uncancelled: the edit takes it for a run under way, met at attempt 1.
    const paused = await getTenantJob(f.engine, job.tenantId, job.jobId);
    await editJob(f.engine, job.tenantId, job.jobId, paused.version, {
      schedule: { runAt: due.toISOString() },
    });
    await cancelRun(f.engine, job.tenantId, job.jobId, lastId);

    const refused = await resumeJob(f.engine, job.tenantId, job.jobId).catch(
      (error: unknown) => error,
    );

    expect(refused).toBeInstanceOf(IllegalTransitionError);
    expect((refused as IllegalTransitionError).message).toContain(lastId);
    const after = await getTenantJob(f.engine, job.tenantId, job.jobId);
    expect([after.status, after.nextRunAt]).toEqual(["PAUSED", due.toISOString()]);
    expect(await entriesOf(job.jobId)).toEqual([]);
  });
});

describe("a one-off's failure retry running at the time it left, the one-off paused and moved back there meanwhile, the retry succeeding", () => {
  it("the resume files no next attempt and completes the one-off: the occurrence ran once", async () => {
    const { job, due } = await failedOnce(0, { moveAway: true });
    const retry = (await runsOf(job.jobId)).find((r) => r.attempt === 2);
    if (!retry) throw new Error("no retry");
    let calls = 0;
    // While it runs: paused, and moved back (the retry, running uncancelled, is met at attempt 1).
    const succeeds = async () => {
      calls++;
      await pauseJob(f.engine, job.tenantId, job.jobId);
      const paused = await getTenantJob(f.engine, job.tenantId, job.jobId);
      await editJob(f.engine, job.tenantId, job.jobId, paused.version, {
        schedule: { runAt: due.toISOString() },
      });
    };
    await f.process(f.workerDeps("w", { noop: succeeds }), deliveryOfRun(f.engine, retry));
    expect(await attemptsOf(job.jobId, due)).toEqual([
      [1, "FAILED"],
      [2, "SUCCEEDED"],
    ]);

    const resumed = await resumeJob(f.engine, job.tenantId, job.jobId);

    expect(calls).toBe(1);
    for (const run of await runsOf(job.jobId)) pastDeadlineOf(new Date(run.dueAt));
    pastDeadlineOf(new Date(due.getTime() + 60 * SECOND));
    await reap(f.engine);
    expect(await runsCalled(job.jobId)).toEqual([]);
    expect(await attemptsOf(job.jobId, due)).toEqual([
      [1, "FAILED"],
      [2, "SUCCEEDED"],
    ]);
    // The occurrence ran while the one-off was paused: the resume completes it.
    expect([resumed.status, resumed.nextRunAt]).toEqual(["COMPLETED", null]);
    expect(await entriesOf(job.jobId)).toEqual([]);
  });
});

describe("a one-off's retry at an occurrence it left, cancelled by a pause, the resume's first write refused by an edit", () => {
  it("the resume plans again and commits: the next attempt its first plan put is sent with it, and runs once", async () => {
    const { job, due, retry } = await retryRunningAtOldTime();
    await pauseJob(f.engine, job.tenantId, job.jobId, { running: "cancel" });
    // An edit lands between the resume's read and its job's write: the write is refused, and the
    // resume plans again from the edited job, on which the attempt its first plan put is there.
    const renames = async () => {
      const paused = await getTenantJob(f.engine, job.tenantId, job.jobId);
      await editJob(f.engine, job.tenantId, job.jobId, paused.version, { name: "renamed" });
    };
    const { hooked } = await withHooks(
      [{ command: "TransactWriteItemsCommand", before: renames }],
      () => resumeJob(f.engine, job.tenantId, job.jobId),
    );
    expect(hooked).toBe(1);
    const resumed = await getTenantJob(f.engine, job.tenantId, job.jobId);
    expect([resumed.status, resumed.name]).toEqual(["ACTIVE", "renamed"]);
    expect(await attemptsOf(job.jobId, due)).toEqual(THIRD_FILED);

    // The cancel lands; the queue's messages are delivered, no reaper pass: attempt 3 runs once.
    await cancelLands(retry);
    await expectThirdRanOnce(job.jobId, due);
  });
});
