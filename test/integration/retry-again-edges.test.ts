import { beforeEach, describe, expect, it } from "vitest";
import { claimDueEntry } from "../../shared/dispatch/claim.js";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import { reap } from "../../shared/dispatch/reaper.js";
import { IllegalTransitionError } from "../../shared/errors.js";
import { cancelJob, deleteJob, editJob, pauseJob, resumeJob } from "../../shared/jobs/index.js";
import { getTenantJob } from "../../shared/jobs/queries.js";
import { runId } from "../../shared/keys.js";
import type { Job } from "../../shared/model.js";
import { startRun } from "../../shared/storage/run-start.js";
import { useCancelledAttempt } from "../support/cancelled-attempt.js";
import { SECOND, useClaimRace } from "../support/claim-race.js";
import type { EngineFixture } from "../support/engine-fixture.js";
import { useOneOffMoves } from "../support/one-off-moves.js";

/**
 * The edges of the retry a resume files in place of a one-off's failure retry that a pause
 * cancelled (`DueEntry.retryAgain`): an edit that moves the one-off away before that entry is
 * claimed, and a recurring job whose retry a pause cancelled, made a one-off since.
 */

const race = useClaimRace();
const {
  clock,
  time,
  claimOptions,
  runsOf,
  fixture,
  runsCalled,
  entriesOf,
  pastDeadlineOf,
  withHooks,
} = race;
const { moveTo, failedOnce, attemptsOf, recurringFailedOnce } = useOneOffMoves(race);
const {
  thirdPutAsPauseCancels,
  resumedUnclaimed,
  expectAttempt3RunsThenNewTime,
  expectAttempt3Skipped,
  expectRunsOnceCancelledEnded,
} = useCancelledAttempt(race);
let f: EngineFixture;
beforeEach(() => {
  f = fixture();
});

/**
 * A one-off due 5 s ago whose attempt 1 failed; its retry, attempt 2 (a QUEUED run: a draw of 0),
 * is running when a pause with `running: "cancel"` asks it to stop.
 */
async function retryCancelledByPause() {
  const { job, due, away } = await failedOnce(0);
  const retry = (await runsOf(job.jobId)).find((r) => r.attempt === 2);
  if (!retry) throw new Error("no retry");
  expect((await startRun(f.engine, retry, "worker-a", clock())).kind).toBe("started");
  await pauseJob(f.engine, job.tenantId, job.jobId, { running: "cancel" });
  return { job, due, away };
}

/**
 * The pause's cancel of attempt 2 lands: its worker died, the reaper sends it again past its
 * lease, and its delivery ends it CANCELLED, unrun.
 */
async function cancelLands(job: Job) {
  pastDeadlineOf(clock());
  expect((await reap(f.engine)).resent).toBe(1);
  expect(await runsCalled(job.jobId)).toEqual([]);
}

/**
 * After the job's last write (resumed, ACTIVE at `away`): a pass claims what is due, and attempt 3
 * of the occurrence at `due` has run once, after attempt 2 (`second`, as the pause left it), then
 * the one-off once at `away`.
 */
async function expectRetryThenNewTime(
  job: Job,
  due: Date,
  away: Date,
  second: "RUNNING" | "CANCELLED",
) {
  await dispatchShard(f.engine, 0, "pass-after-resume");
  await expectAttempt3RunsThenNewTime(job.jobId, due, away, second);
  expect((await getTenantJob(f.engine, job.tenantId, job.jobId)).status).toBe("COMPLETED");
}

describe("a one-off's failure retry that a pause cancelled, its retry filed by the resume, moved away before that entry's claim", () => {
  it("active: the edit claims the entry first (its planned time is the one-off's, which has passed), and the retry runs at its old time", async () => {
    const { job, due, away } = await retryCancelledByPause();
    await resumedUnclaimed(job);
    const [pending] = (await entriesOf(job.jobId)).filter((e) => e.retryAgain === true);
    expect([pending?.attempt, pending?.dueAt]).toEqual([3, due.toISOString()]);

    await moveTo(job, 1, away);
    await expectRetryThenNewTime(job, due, away, "RUNNING");
  });

  it("paused again before that claim, moved away while paused, then resumed: the retry still runs at its old time", async () => {
    const { job, due, away } = await retryCancelledByPause();
    await resumedUnclaimed(job);
    await pauseJob(f.engine, job.tenantId, job.jobId);
    await cancelLands(job);
    await moveTo(job, 1, away);
    await resumeJob(f.engine, job.tenantId, job.jobId);
    await expectRetryThenNewTime(job, due, away, "CANCELLED");
  });

  it("moved away while still paused by the pause that cancelled it, then resumed: the retry still runs at its old time", async () => {
    const { job, due, away } = await retryCancelledByPause();
    await cancelLands(job);
    await moveTo(job, 1, away);
    await resumeJob(f.engine, job.tenantId, job.jobId);
    await expectRetryThenNewTime(job, due, away, "CANCELLED");
  });
});

describe("a recurring job whose retry a pause cancelled as it failed (the narrow window), made a one-off at another time", () => {
  it("the retry's next attempt, put before the refused ending, is skipped: no resume gives a recurring job's cancelled run back", async () => {
    const { job, due, away } = await recurringFailedOnce("recurring-made-one-off");
    await thirdPutAsPauseCancels(job.jobId, due);

    await resumeJob(f.engine, job.tenantId, job.jobId);
    await editJob(f.engine, job.tenantId, job.jobId, 1, {
      schedule: { runAt: away.toISOString() },
    });
    await expectAttempt3Skipped(job, due, away);
  });
});

describe("a paused one-off whose failure retry a pause cancelled, moved away, back and away again before any pass", () => {
  it("files one retry entry for that cancelled attempt, not one per move away", async () => {
    const { job, due, away } = await retryCancelledByPause();
    await moveTo(job, 1, away);
    time.ms += 61 * SECOND;
    await moveTo(job, 2, due);
    time.ms += 61 * SECOND;
    const later = new Date(away.getTime() + 600 * SECOND);
    await moveTo(job, 3, later);
    const retries = (await entriesOf(job.jobId)).filter((e) => e.kind === "retry");
    expect(retries.map((e) => e.attempt)).toEqual([3]);

    await cancelLands(job);
    await resumeJob(f.engine, job.tenantId, job.jobId);
    await expectRetryThenNewTime(job, due, later, "CANCELLED");
  });

  it("the first entry claimed as the last move reads: still no second entry, whose claim would put over that run", async () => {
    const { job, due, away } = await retryCancelledByPause();
    await moveTo(job, 1, away);
    const [first] = (await entriesOf(job.jobId)).filter((e) => e.kind === "retry");
    if (!first) throw new Error("no retry entry");
    time.ms += 61 * SECOND;
    await moveTo(job, 2, due);
    time.ms += 61 * SECOND;
    const isFirst = (input: Record<string, unknown>) => {
      const key = input.Key as { pk?: string; sk?: string } | undefined;
      return key?.pk === first.key.pk && key.sk === first.key.sk;
    };
    const claimFirst = async () => {
      expect((await claimDueEntry(f.engine, first, claimOptions(clock()))).outcome).toBe("claimed");
    };
    const { hooked } = await withHooks(
      [{ command: "GetItemCommand", when: isFirst, before: claimFirst }],
      () => moveTo(job, 3, new Date(away.getTime() + 600 * SECOND)),
    );
    expect(hooked).toBe(1);
    expect((await entriesOf(job.jobId)).filter((e) => e.kind === "retry")).toEqual([]);
  });
});

describe("a paused one-off whose failure retry the pause cancelled, made recurring while paused", () => {
  it("the retry the edit files beside (retryLeftByMove) runs at its old time once resumed, as when moved to another runAt", async () => {
    const { job, due } = await retryCancelledByPause();
    await cancelLands(job);
    const startAt = new Date(clock().getTime() + 600 * SECOND);
    await editJob(f.engine, job.tenantId, job.jobId, 1, {
      schedule: { every: "PT1H", startAt: startAt.toISOString() },
    });
    await resumeJob(f.engine, job.tenantId, job.jobId);
    await dispatchShard(f.engine, 0, "pass-after-resume");
    expect(await runsCalled(job.jobId)).toEqual([[due.toISOString(), 1]]);
    expect((await runsOf(job.jobId)).find((r) => r.attempt === 3)?.status).toBe("SUCCEEDED");
  });
});

/**
 * A paused one-off whose failure retry (attempt 2) the pause cancelled, moved 20 minutes away 10
 * minutes later (more than a lookahead on): the edit files attempt 3 at the old time
 * (retryLeftByMove), and once resumed a pass queues it and a worker runs it. The new time stays
 * more than a lookahead past what the cases do before they reach it, and a pass at it sweeps 20
 * minutes of buckets, not an hour's.
 */
async function retryRunningAtOldTime() {
  const { job, due } = await retryCancelledByPause();
  await cancelLands(job);
  time.ms += 600 * SECOND;
  const away = new Date(clock().getTime() + 1200 * SECOND);
  await moveTo(job, 1, away);
  await resumeJob(f.engine, job.tenantId, job.jobId);
  await dispatchShard(f.engine, 0, "pass-after-resume");
  const retry = (await runsOf(job.jobId)).find((r) => r.attempt === 3);
  if (!retry) throw new Error("no retry");
  expect((await startRun(f.engine, retry, "worker-b", clock())).kind).toBe("started");
  return { job, due, away };
}

describe("a paused one-off's retry the edit filed at its old time (retryLeftByMove), running once resumed", () => {
  it("a second pause with running: cancel asks it to stop, however long ago its occurrence was", async () => {
    const { job } = await retryRunningAtOldTime();
    await pauseJob(f.engine, job.tenantId, job.jobId, { running: "cancel" });
    const asked = (await runsOf(job.jobId)).find((r) => r.attempt === 3);
    expect([asked?.status, asked?.cancelledBy]).toEqual(["RUNNING", "pause"]);
  });

  it("resumed again, the attempt that pause cancelled is filed again: it runs once, after the cancelled attempt ended, and the one-off at its new time", async () => {
    const { job, due, away } = await retryRunningAtOldTime();
    await pauseJob(f.engine, job.tenantId, job.jobId, { running: "cancel" });
    await resumeJob(f.engine, job.tenantId, job.jobId);
    expect(await attemptsOf(job.jobId, due)).toEqual([
      [1, "FAILED"],
      [2, "CANCELLED"],
      [3, "RUNNING"],
      [4, "QUEUED"],
    ]);
    const fourth = (await runsOf(job.jobId)).find((r) => r.attempt === 4);
    expect(fourth?.retryOf).toEqual({ runId: runId(job.jobId, due, 3), fence: 0, oneOff: true });

    await expectRunsOnceCancelledEnded(job.jobId, due, 4);
    const resumed = await getTenantJob(f.engine, job.tenantId, job.jobId);
    expect([resumed.status, resumed.nextRunAt]).toEqual(["ACTIVE", away.toISOString()]);
    time.ms = away.getTime() + 5 * SECOND;
    await dispatchShard(f.engine, 0, "pass-at-new-time");
    expect(await runsCalled(job.jobId)).toEqual([[away.toISOString(), 1]]);
  });

  it("resumed twice, and paused and resumed again before it ran: one attempt filed again, run once", async () => {
    const { job, due } = await retryRunningAtOldTime();
    await pauseJob(f.engine, job.tenantId, job.jobId, { running: "cancel" });
    await resumeJob(f.engine, job.tenantId, job.jobId);
    await resumeJob(f.engine, job.tenantId, job.jobId);
    await pauseJob(f.engine, job.tenantId, job.jobId);
    await resumeJob(f.engine, job.tenantId, job.jobId);
    await expectRunsOnceCancelledEnded(job.jobId, due, 4);
    expect((await attemptsOf(job.jobId, due)).map(([attempt]) => attempt)).toEqual([1, 2, 3, 4]);
  });

  it("moved away again while paused (its edit reads only the occurrence it leaves), then resumed: the attempt is filed again", async () => {
    const { job, due, away } = await retryRunningAtOldTime();
    await pauseJob(f.engine, job.tenantId, job.jobId, { running: "cancel" });
    await moveTo(job, 2, new Date(away.getTime() + 600 * SECOND));
    await resumeJob(f.engine, job.tenantId, job.jobId);
    await expectRunsOnceCancelledEnded(job.jobId, due, 4);
  });

  it("resumed between the pause's write and its cancel request: the pause's check files the attempt it cancelled", async () => {
    const { job, due } = await retryRunningAtOldTime();
    const isRunUpdate = (input: Record<string, unknown>) =>
      input.TableName === f.engine.tables.runs;
    const resume = async () => {
      await resumeJob(f.engine, job.tenantId, job.jobId);
    };
    const { hooked } = await withHooks(
      [{ command: "UpdateItemCommand", when: isRunUpdate, before: resume }],
      () => pauseJob(f.engine, job.tenantId, job.jobId, { running: "cancel" }),
    );
    expect(hooked).toBe(1);
    expect((await getTenantJob(f.engine, job.tenantId, job.jobId)).status).toBe("ACTIVE");
    await expectRunsOnceCancelledEnded(job.jobId, due, 4);
  });

  it("paused again with running: cancel, then the job cancelled: the attempt that pause cancelled is not filed again, and nothing runs", async () => {
    const { job, due } = await retryRunningAtOldTime();
    await pauseJob(f.engine, job.tenantId, job.jobId, { running: "cancel" });
    await cancelJob(f.engine, job.tenantId, job.jobId);
    await expect(resumeJob(f.engine, job.tenantId, job.jobId)).rejects.toBeInstanceOf(
      IllegalTransitionError,
    );
    await cancelLands(job);
    expect(await attemptsOf(job.jobId, due)).toEqual([
      [1, "FAILED"],
      [2, "CANCELLED"],
      [3, "CANCELLED"],
    ]);
  });

  it.each(["cancelled", "deleted"] as const)(
    "filed again by the resume, then the job %s before it ran: that attempt ends CANCELLED, unrun",
    async (end) => {
      const { job, due } = await retryRunningAtOldTime();
      await pauseJob(f.engine, job.tenantId, job.jobId, { running: "cancel" });
      await resumeJob(f.engine, job.tenantId, job.jobId);
      if (end === "cancelled") await cancelJob(f.engine, job.tenantId, job.jobId);
      else await deleteJob(f.engine, job.tenantId, job.jobId);
      await cancelLands(job);
      expect(await attemptsOf(job.jobId, due)).toEqual([
        [1, "FAILED"],
        [2, "CANCELLED"],
        [3, "CANCELLED"],
        [4, "CANCELLED"],
      ]);
    },
  );
});

describe("a one-off moved away while its failure retry was queued at its old time, that retry running", () => {
  it("paused with running: cancel, then resumed: the retry's next attempt is filed and runs once, after it ended", async () => {
    const { job, due } = await failedOnce(0, { moveAway: true });
    const retry = (await runsOf(job.jobId)).find((r) => r.attempt === 2);
    if (!retry) throw new Error("no retry");
    expect((await startRun(f.engine, retry, "worker-a", clock())).kind).toBe("started");
    await pauseJob(f.engine, job.tenantId, job.jobId, { running: "cancel" });
    await resumeJob(f.engine, job.tenantId, job.jobId);
    expect(await attemptsOf(job.jobId, due)).toEqual([
      [1, "FAILED"],
      [2, "RUNNING"],
      [3, "QUEUED"],
    ]);
    await expectRunsOnceCancelledEnded(job.jobId, due, 3);
  });
});
