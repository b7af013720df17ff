import { beforeEach, describe, expect, it } from "vitest";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import { reap } from "../../shared/dispatch/reaper.js";
import { cancelRun, pauseJob, resumeJob } from "../../shared/jobs/index.js";
import { getTenantJob } from "../../shared/jobs/queries.js";
import type { Job, Run } from "../../shared/model.js";
import { SECOND, useClaimRace } from "../support/claim-race.js";
import type { EngineFixture } from "../support/engine-fixture.js";
import { useOneOffMoves } from "../support/one-off-moves.js";

/**
 * A one-off moved away while its run runs, that run cancelled through the API and failing: its
 * worker puts the failure's next attempt (a QUEUED run) before the refused ending, then takes it
 * back (SKIPPED: its predecessor never says FAILED). An edit back to the old `runAt` that reads
 * the occurrence while that retry is still QUEUED (between the put and the take-back, or after a
 * take-back that failed) took it for a run under way and filed the occurrence at attempt 1, whose
 * claim found that attempt's run handled: the one-off at its time again never ran.
 */

const race = useClaimRace();
const { clock, runsOf, fixture, withHooks, runsCalled, pastDeadlineOf } = race;
const { moveTo, retryingOneOff, failRun, attemptsOf } = useOneOffMoves(race);
let f: EngineFixture;
beforeEach(() => {
  f = fixture();
});

/** The worker's take-back of a next attempt: an update of a run conditioned on the put's fence. */
const isTakeBack = (input: Record<string, unknown>) =>
  input.TableName === f.engine.tables.runs &&
  String(input.ConditionExpression).includes("retryOf.fence = :fence");

/**
 * The one-off's first run fails while the job is moved 10 minutes away and the run is cancelled
 * through the API; `atTakeBack` acts on the take-back of its next attempt (before it, or in its
 * place).
 */
async function cancelledFailureMovedAway(atTakeBack: {
  before?: (job: Job, due: Date) => Promise<void>;
  fail?: boolean;
}) {
  const away = new Date(clock().getTime() + 600 * SECOND);
  const { job, due, first } = await retryingOneOff();
  const { hooked } = await withHooks(
    [
      {
        command: "UpdateItemCommand",
        when: isTakeBack,
        ...(atTakeBack.before
          ? { before: () => atTakeBack.before?.(job, due) ?? Promise.resolve() }
          : {}),
        ...(atTakeBack.fail ? { fail: () => new Error("throttled") } : {}),
      },
    ],
    () =>
      failRun(first, {
        before: async () => {
          await moveTo(job, 1, away);
          await cancelRun(f.engine, job.tenantId, job.jobId, first.runId);
        },
      }),
  );
  expect(hooked).toBe(1);
  return { job, due };
}

/** Past every deadline: the pass and the reaper run, and the queue's runs of the job are delivered. */
async function callsAfterPassAndReaper(job: Job, due: Date): Promise<[string, number][]> {
  await dispatchShard(f.engine, 0, "pass-after-edit-back");
  const calls = await runsCalled(job.jobId);
  for (const run of await runsOf(job.jobId)) pastDeadlineOf(new Date(run.dueAt));
  pastDeadlineOf(new Date(due.getTime() + 60 * SECOND));
  await reap(f.engine);
  return [...calls, ...(await runsCalled(job.jobId))].filter(([at]) => at === due.toISOString());
}

const latest = (runs: Run[]) => runs.reduce((a, b) => (b.attempt > a.attempt ? b : a));

describe("a one-off's cancelled failure, its retry still QUEUED, and an edit back to its runAt", () => {
  it("edited back before the worker takes the retry back: the one-off runs at its time, once", async () => {
    const { job, due } = await cancelledFailureMovedAway({
      before: async (j, at) => {
        await moveTo(j, 2, at);
      },
    });

    expect(await callsAfterPassAndReaper(job, due)).toEqual([[due.toISOString(), 1]]);
    const after = await getTenantJob(f.engine, job.tenantId, job.jobId);
    expect(after.status).toBe("COMPLETED");
    expect(latest(await runsOf(job.jobId)).status).toBe("SUCCEEDED");
  });

  it("the take-back failed, then edited back: the one-off runs at its time, once", async () => {
    const { job, due } = await cancelledFailureMovedAway({ fail: true });
    expect(await attemptsOf(job.jobId, due)).toEqual([
      [1, "CANCELLED"],
      [2, "QUEUED"],
    ]);
    await moveTo(job, 2, due);

    expect(await callsAfterPassAndReaper(job, due)).toEqual([[due.toISOString(), 1]]);
    const after = await getTenantJob(f.engine, job.tenantId, job.jobId);
    expect(after.status).toBe("COMPLETED");
  });

  it("the take-back failed, the one-off paused, edited back and resumed: it runs at its time, once", async () => {
    const { job, due } = await cancelledFailureMovedAway({ fail: true });
    await pauseJob(f.engine, job.tenantId, job.jobId);
    await moveTo(job, 2, due);
    await resumeJob(f.engine, job.tenantId, job.jobId);

    expect(await callsAfterPassAndReaper(job, due)).toEqual([[due.toISOString(), 1]]);
    const after = await getTenantJob(f.engine, job.tenantId, job.jobId);
    expect(after.status).toBe("COMPLETED");
  });

  it.each([
    ["edited back", async (job: Job, due: Date) => void (await moveTo(job, 2, due))],
    [
      "paused, edited back and resumed",
      async (job: Job, due: Date) => {
        await pauseJob(f.engine, job.tenantId, job.jobId);
        await moveTo(job, 2, due);
        await resumeJob(f.engine, job.tenantId, job.jobId);
      },
    ],
  ])(
    "the take-back failed, then %s: it runs at once, not at the retry's backoff",
    async (_, back) => {
      const { job, due } = await cancelledFailureMovedAway({ fail: true });
      await back(job, due);

      // The pass claims the occurrence, and the queue's messages due now are delivered: the retry
      // that will not run is due at its backoff, an hour on, and the occurrence no longer waits for it.
      await dispatchShard(f.engine, 0, "pass-after-edit-back");
      expect(await runsCalled(job.jobId)).toEqual([[due.toISOString(), 1]]);
      expect(await callsAfterPassAndReaper(job, due)).toEqual([]);
      expect(await attemptsOf(job.jobId, due)).toEqual([
        [1, "CANCELLED"],
        [2, "SKIPPED"],
        [3, "SUCCEEDED"],
      ]);
    },
  );

  // The retry taken back never ran, and no pause cancelled it: the occurrence filed after it stands
  // in for the one-off's first attempt (`rerun`), not for a retry (`retryAgain`), so a move away
  // before it runs skips it, as it skips a first attempt, and the one-off runs at its new time only.
  it("the take-back failed, paused, edited back and resumed, then moved away again before it ran: it does not run at its old time", async () => {
    const { job, due } = await cancelledFailureMovedAway({ fail: true });
    await pauseJob(f.engine, job.tenantId, job.jobId);
    await moveTo(job, 2, due);
    await resumeJob(f.engine, job.tenantId, job.jobId);
    await dispatchShard(f.engine, 0, "pass-after-resume");
    expect(await attemptsOf(job.jobId, due)).toEqual([
      [1, "CANCELLED"],
      [2, "SKIPPED"],
      [3, "QUEUED"],
    ]);

    const away = new Date(clock().getTime() + 3600 * SECOND);
    await moveTo(job, 3, away);

    expect(await callsAfterPassAndReaper(job, due)).toEqual([]);
    expect(await attemptsOf(job.jobId, due)).toEqual([
      [1, "CANCELLED"],
      [2, "SKIPPED"],
      [3, "SKIPPED"],
    ]);
    const after = await getTenantJob(f.engine, job.tenantId, job.jobId);
    expect([after.status, after.nextRunAt]).toEqual(["ACTIVE", away.toISOString()]);
  });
});
