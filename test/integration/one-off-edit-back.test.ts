import { beforeEach, describe, expect, it } from "vitest";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import { pauseJob, resumeJob, triggerJob } from "../../shared/jobs/index.js";
import { getTenantJob } from "../../shared/jobs/queries.js";
import { MAX_ATTEMPT } from "../../shared/keys.js";
import type { Job } from "../../shared/model.js";
import { ValidationError } from "../../shared/validation.js";
import { useCancelledAttempt } from "../support/cancelled-attempt.js";
import { SECOND, useClaimRace } from "../support/claim-race.js";
import type { EngineFixture } from "../support/engine-fixture.js";
import { useOneOffMoves } from "../support/one-off-moves.js";
import { copyRunToAttempt } from "../support/seed.js";

/**
 * An edit that gives a one-off a `runAt` (a move, or a recurring job made a one-off) at a time
 * whose attempt 1 has a run already, one a pause cancelled: the occurrence is filed at that run's
 * next attempt, as a resume files it. Filed at attempt 1, its claim found that attempt's run
 * handled and moved the job on with nothing pending: ACTIVE, nothing to run.
 */

const race = useClaimRace();
const { clock, seedOne, runsOf, fixture, entriesOf, runsCalled } = race;
const { pausedWithRunCancelled, resumedUnclaimed, expectNextAttemptRunsOnce } =
  useCancelledAttempt(race);
const { moveTo } = useOneOffMoves(race);
let f: EngineFixture;
beforeEach(() => {
  f = fixture();
});

describe("a one-off's pending next attempt (a resume's, unclaimed), then edits that move its runAt away and back", () => {
  it("the next attempt runs, once", async () => {
    const jobId = "back-pending";
    const { job, due } = await pausedWithRunCancelled(jobId);
    await resumedUnclaimed(job);
    expect((await entriesOf(jobId)).map((e) => e.attempt)).toEqual([2]);

    await moveTo(job, 1, new Date(clock().getTime() + 600 * SECOND));
    const back = await moveTo(job, 2, due);
    await dispatchShard(f.engine, 0, "pass-after-edits");

    expect(back.status).toBe("ACTIVE");
    await expectNextAttemptRunsOnce(jobId, due);
  });
});

describe("a one-off resumed after a pause cancelled its run (its next attempt claimed), then edits that move its runAt away and back", () => {
  it("the next attempt runs, once, and no third", async () => {
    const jobId = "back-claimed";
    const { job, due } = await pausedWithRunCancelled(jobId);
    await resumeJob(f.engine, job.tenantId, job.jobId);
    expect((await runsOf(jobId)).map((r) => r.attempt)).toEqual([1, 2]);

    await moveTo(job, 1, new Date(clock().getTime() + 600 * SECOND));
    await moveTo(job, 2, due);
    await dispatchShard(f.engine, 0, "pass-after-edits");

    await expectNextAttemptRunsOnce(jobId, due);
  });
});

describe("a paused one-off whose run the pause cancelled, its runAt moved away and back, then resumed", () => {
  it("the next attempt runs, once", async () => {
    const jobId = "back-paused";
    const { job, due } = await pausedWithRunCancelled(jobId);

    await moveTo(job, 1, new Date(clock().getTime() + 600 * SECOND));
    await moveTo(job, 2, due);
    await resumeJob(f.engine, job.tenantId, job.jobId);
    await dispatchShard(f.engine, 0, "pass-after-resume");

    await expectNextAttemptRunsOnce(jobId, due);
  });
});

describe("a one-off resumed with its next attempt pending, its runAt moved away, paused, moved back, and resumed", () => {
  it("the next attempt runs, once", async () => {
    const jobId = "back-paused-pending";
    const { job, due } = await pausedWithRunCancelled(jobId);
    await resumedUnclaimed(job);

    await moveTo(job, 1, new Date(clock().getTime() + 600 * SECOND));
    await pauseJob(f.engine, job.tenantId, job.jobId);
    await moveTo(job, 2, due);
    await resumeJob(f.engine, job.tenantId, job.jobId);
    await dispatchShard(f.engine, 0, "pass-after-resume");

    await expectNextAttemptRunsOnce(jobId, due);
  });
});

describe("a recurring job whose run a pause cancelled, resumed, then made a one-off at that run's time", () => {
  it("the one-off runs, once, as the run's next attempt", async () => {
    const jobId = "back-recurring";
    const start = new Date(clock().getTime() - 5 * SECOND);
    const { job, due } = await pausedWithRunCancelled(jobId, {
      every: "PT1H",
      startAt: start.toISOString(),
    });
    await resumeJob(f.engine, job.tenantId, job.jobId);

    const edited = await moveTo(job, 1, due);
    await dispatchShard(f.engine, 0, "pass-after-edit");

    expect(edited.status).toBe("ACTIVE");
    await expectNextAttemptRunsOnce(jobId, due, "ignored");
    const after = await getTenantJob(f.engine, job.tenantId, job.jobId);
    expect([after.nextRunAt, after.nextDueKey]).toEqual([null, null]);
  });
});

describe("a paused one-off whose run the pause cancelled, its runAt moved away, resumed, then moved back", () => {
  it("the next attempt runs, once", async () => {
    const jobId = "back-after-resume";
    const { job, due } = await pausedWithRunCancelled(jobId);
    await moveTo(job, 1, new Date(clock().getTime() + 600 * SECOND));
    await resumeJob(f.engine, job.tenantId, job.jobId);

    const back = await moveTo(job, 2, due);
    await dispatchShard(f.engine, 0, "pass-after-edit");

    expect(back.status).toBe("ACTIVE");
    await expectNextAttemptRunsOnce(jobId, due);
  });
});

describe("a one-off moved away while its run was queued (the run skipped by its worker), then moved back", () => {
  it("the occurrence runs, once, as that run's next attempt", async () => {
    const jobId = "back-after-skip";
    const now = clock();
    const due = new Date(now.getTime() - 5 * SECOND);
    const { job } = await seedOne(jobId, { runAt: due.toISOString() }, due, now);
    await dispatchShard(f.engine, 0, "pass-claims");
    await moveTo(job, 1, new Date(now.getTime() + 600 * SECOND));
    expect(await runsCalled(jobId)).toEqual([]);
    expect((await runsOf(jobId)).map((r) => [r.attempt, r.status])).toEqual([[1, "SKIPPED"]]);

    const back = await moveTo(job, 2, due);
    await dispatchShard(f.engine, 0, "pass-after-edit");

    expect(back.status).toBe("ACTIVE");
    expect((await runsOf(jobId)).map((r) => [r.attempt, r.status])).toEqual([
      [1, "SKIPPED"],
      [2, "QUEUED"],
    ]);
    expect(await runsCalled(jobId)).toEqual([[due.toISOString(), 1]]);
  });
});

/** A one-off whose queued run its worker skipped, the job moved away to `away` (version 2). */
async function skippedAway(jobId: string) {
  const now = clock();
  const due = new Date(now.getTime() - 5 * SECOND);
  const away = new Date(now.getTime() + 600 * SECOND);
  const { job } = await seedOne(jobId, { runAt: due.toISOString() }, due, now);
  await dispatchShard(f.engine, 0, "pass-claims");
  await moveTo(job, 1, away);
  expect(await runsCalled(jobId)).toEqual([]);
  const [skipped] = await runsOf(jobId);
  expect(skipped?.status).toBe("SKIPPED");
  if (!skipped) throw new Error("no run");
  return { job, due, away, skipped };
}

describe("a paused one-off moved away while its run was queued (the run skipped by its worker), moved back, then resumed", () => {
  it("the occurrence runs, once, as that run's next attempt", async () => {
    const jobId = "back-paused-skip";
    const { job, due } = await skippedAway(jobId);

    await pauseJob(f.engine, job.tenantId, job.jobId);
    await moveTo(job, 2, due);
    await resumeJob(f.engine, job.tenantId, job.jobId);
    await dispatchShard(f.engine, 0, "pass-after-resume");

    expect((await runsOf(jobId)).map((r) => [r.attempt, r.status])).toEqual([
      [1, "SKIPPED"],
      [2, "QUEUED"],
    ]);
    expect(await runsCalled(jobId)).toEqual([[due.toISOString(), 1]]);
  });
});

/** The edit refused naming schedule.runAt, the job ACTIVE at `version` for `away` still. */
async function expectRefusedKept(edit: Promise<Job>, job: Job, version: number, away: Date) {
  const refused = await edit.catch((error: unknown) => error);
  expect(refused).toBeInstanceOf(ValidationError);
  expect((refused as ValidationError).message).toContain("schedule.runAt: ");
  const after = await getTenantJob(f.engine, job.tenantId, job.jobId);
  expect([after.version, after.status, after.nextRunAt]).toEqual([
    version,
    "ACTIVE",
    away.toISOString(),
  ]);
}

describe("a one-off moved back to a time whose run ended at the last attempt a run can have", () => {
  it("the edit is refused naming schedule.runAt, and nothing is written", async () => {
    const jobId = "back-last-attempt";
    const { job, due, away, skipped } = await skippedAway(jobId);
    await copyRunToAttempt(f.engine, skipped, MAX_ATTEMPT);

    await expectRefusedKept(moveTo(job, 2, due), job, 2, away);
    expect((await entriesOf(jobId)).map((e) => e.jobVersion)).toEqual([2]);
  });
});

describe("a one-off moved to the time of a triggered run that ran (a trigger's run is no occurrence)", () => {
  it("the edit is refused naming schedule.runAt, and the triggered run keeps its time", async () => {
    const jobId = "back-to-trigger";
    const now = clock();
    const away = new Date(now.getTime() + 600 * SECOND);
    const { job } = await seedOne(jobId, { runAt: away.toISOString() }, away, now);
    const triggered = await triggerJob(f.engine, job.tenantId, job.jobId);
    const at = new Date(triggered.scheduledFor);
    expect(await runsCalled(jobId)).toEqual([[triggered.scheduledFor, 1]]);

    await expectRefusedKept(moveTo(job, 1, at), job, 1, away);
    await dispatchShard(f.engine, 0, "pass-after-edit");
    expect((await runsOf(jobId)).map((r) => [r.attempt, r.status, r.triggered ?? false])).toEqual([
      [1, "SUCCEEDED", true],
    ]);
    // Nothing more queued: no attempt 2 under the triggered run's key.
    expect(await runsCalled(jobId)).toEqual([]);
  });
});
