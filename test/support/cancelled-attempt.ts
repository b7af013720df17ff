import { expect } from "vitest";
import { claimDueEntry } from "../../shared/dispatch/claim.js";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import { reap } from "../../shared/dispatch/reaper.js";
import { type JobContext, JobError } from "../../shared/execution/job-contract.js";
import { pauseJob, resumeJob } from "../../shared/jobs/index.js";
import { getTenantJob } from "../../shared/jobs/queries.js";
import type { Job, Run } from "../../shared/model.js";
import type { ScheduleSpec } from "../../shared/schedule/index.js";
import { startRun } from "../../shared/storage/run-start.js";
import { SECOND, type useClaimRace } from "./claim-race.js";
import { deliveryOfRun } from "./engine-fixture.js";
import { withHeartbeatsHeld } from "./faults.js";
import { waitFor } from "./wait.js";

/**
 * An occurrence whose attempt 1 a pause cancelled while it ran, so that the occurrence runs next
 * as attempt 2: what the tests of a one-off's pending next attempt start from, bound to one
 * `useClaimRace`.
 */
export function useCancelledAttempt(race: ReturnType<typeof useClaimRace>) {
  const { clock, time, claimOptions, seedOne, runsOf, withHooks, isRunPut, fixture, runsCalled } =
    race;
  const { pastDeadlineOf } = race;

  /** The runs of the job's occurrence at `at`, [attempt, status], by attempt. */
  const attemptsAt = async (jobId: string, at: Date) =>
    (await runsOf(jobId))
      .filter((r) => r.scheduledFor === at.toISOString())
      .sort((a, b) => a.attempt - b.attempt)
      .map((r) => [r.attempt, r.status]);

  /** The job seeded due at `due` (5 s ago), claimed, its run started, then a pause that cancels it. */
  async function pausedWithRunCancelled(jobId: string, schedule?: ScheduleSpec) {
    const { engine } = fixture();
    const now = clock();
    const due = new Date(now.getTime() - 5 * SECOND);
    const { job, entry } = await seedOne(jobId, schedule ?? { runAt: due.toISOString() }, due, now);
    expect((await claimDueEntry(engine, entry, claimOptions(now))).outcome).toBe("claimed");
    const first = (await runsOf(jobId)).find((r) => r.scheduledFor === due.toISOString());
    if (!first) throw new Error("the claim queued no run");
    expect((await startRun(engine, first, "worker-a", clock())).kind).toBe("started");
    await pauseJob(engine, job.tenantId, job.jobId, { running: "cancel" });
    return { job, due };
  }

  /** The resume's fast path fails (throttled): its next attempt is left pending, unclaimed. */
  async function resumedUnclaimed(job: Job) {
    const { hooked } = await withHooks(
      [{ command: "PutItemCommand", when: isRunPut, fail: () => new Error("throttled") }],
      () => resumeJob(fixture().engine, job.tenantId, job.jobId),
    );
    expect(hooked).toBe(1);
  }

  /**
   * The occurrence at `due`: the cancelled attempt, then one next attempt, run once, and only once
   * the cancelled attempt has ended. The job has no run of another occurrence unless
   * `otherOccurrences` is "ignored" (a recurring job's).
   */
  async function expectNextAttemptRunsOnce(
    jobId: string,
    due: Date,
    otherOccurrences: "none" | "ignored" = "none",
  ) {
    const runs = await runsOf(jobId);
    const ofDue = runs.filter((r) => r.scheduledFor === due.toISOString());
    if (otherOccurrences === "none") expect(ofDue).toEqual(runs);
    expect(ofDue.map((r) => [r.attempt, r.status, r.cancelledBy ?? null])).toEqual([
      [1, "RUNNING", "pause"],
      [2, "QUEUED", null],
    ]);
    await expectRunsOnceCancelledEnded(jobId, due, 2);
  }

  /**
   * The pause's cancel of `run`, still running, lands: its worker's lease lapses, and a delivery
   * of it ends it CANCELLED, unrun.
   */
  async function cancelLands(run: Run) {
    const f = fixture();
    pastDeadlineOf(clock());
    await f.process(f.workerDeps("w", {}), deliveryOfRun(f.engine, run));
    const ended = (await runsOf(run.jobId)).find((r) => r.runId === run.runId);
    expect([ended?.status, ended?.cancelledBy]).toEqual(["CANCELLED", "pause"]);
  }

  /**
   * Attempt `next` of the occurrence at `due`, delivered while attempt `next - 1`, which a pause
   * cancelled, still runs (its worker holds it, or died holding it): it waits, unrun (two attempts
   * of one occurrence never run at once). Once that worker's lease lapses, a delivery of the
   * cancelled attempt ends it CANCELLED (the cancel lands); past the waiting attempt's recheck, the
   * reaper sends it, and it runs once. Another occurrence's runs (a recurring job's) are not counted.
   */
  async function expectRunsOnceCancelledEnded(jobId: string, due: Date, next: number) {
    const f = fixture();
    const { engine } = f;
    const ofDue = async () =>
      (await runsOf(jobId)).filter((r) => r.scheduledFor === due.toISOString());
    const attempt = async (n: number) => {
      const run = (await ofDue()).find((r) => r.attempt === n);
      if (!run) throw new Error(`no attempt ${n}`);
      return run;
    };
    const callsOfDue = async () =>
      (await runsCalled(jobId)).filter(([at]) => at === due.toISOString());
    const cancelled = await attempt(next - 1);
    expect(await callsOfDue()).toEqual([]);
    expect(await attempt(next)).toMatchObject({
      status: "QUEUED",
      reason: `waiting: ${cancelled.runId} has not ended (RUNNING)`,
      retryOf: { runId: cancelled.runId },
    });

    await cancelLands(cancelled);

    pastDeadlineOf(new Date((await attempt(next)).dueAt));
    await reap(engine);
    expect(await callsOfDue()).toEqual([[due.toISOString(), 1]]);
    expect((await attemptsAt(jobId, due)).slice(-2)).toEqual([
      [next - 1, "CANCELLED"],
      [next, "SUCCEEDED"],
    ]);
  }

  /**
   * `run` delivered to a handler that pauses its job with `running: "cancel"` once the run says
   * RUNNING, then fails retryably (the backoff's jitter drawn as `draw`): the failure's ending, not
   * a heartbeat (held: the fault), meets the pause's cancel, so the run ends CANCELLED with its
   * next attempt put before that refused ending (the narrow window).
   */
  async function failsAsPauseCancels(run: Run, draw: number) {
    const f = fixture();
    const beatsHeld = withHeartbeatsHeld(f.engine);
    const failsUnderPause = async (ctx: JobContext) => {
      await waitFor("the run's start", async () =>
        (await runsOf(ctx.jobId)).some((r) => r.runId === run.runId && r.status === "RUNNING"),
      );
      beatsHeld.hold();
      await pauseJob(f.engine, ctx.tenantId, ctx.jobId, { running: "cancel" });
      throw new JobError("failed as the pause cancelled it", { retryable: true });
    };
    const deps = f.workerDeps("w", { noop: failsUnderPause }, 200);
    try {
      await f.process(
        { ...deps, engine: { ...beatsHeld.engine, random: () => draw } },
        deliveryOfRun(f.engine, run),
      );
    } finally {
      beatsHeld.destroy();
    }
  }

  /**
   * The job's attempt 2 at `at` (a failure's retry, QUEUED) fails as a pause's cancel lands
   * (`failsAsPauseCancels`, a draw of 0): attempt 3 is a QUEUED run its refused ending never sent.
   */
  async function thirdPutAsPauseCancels(jobId: string, at: Date) {
    const retry = (await runsOf(jobId)).find((r) => r.attempt === 2);
    if (!retry) throw new Error("no retry");
    await failsAsPauseCancels(retry, 0);
    expect(await attemptsAt(jobId, at)).toEqual([
      [1, "FAILED"],
      [2, "CANCELLED"],
      [3, "QUEUED"],
    ]);
    return retry;
  }

  /**
   * The queue's runs of the job delivered: attempt 3 of the occurrence at `due` (the one-off moved
   * away since) runs once, after attempt 2 (`second`, as the pause left it: still running, it
   * waits for its cancel to land, `expectRunsOnceCancelledEnded`). Then, at `away`, the one-off
   * runs at its new time too, as it does beside a retry no pause cancelled.
   */
  async function expectAttempt3RunsThenNewTime(
    jobId: string,
    due: Date,
    away: Date,
    second: "RUNNING" | "CANCELLED",
  ) {
    if (second === "RUNNING") await expectRunsOnceCancelledEnded(jobId, due, 3);
    else expect(await runsCalled(jobId)).toEqual([[due.toISOString(), 1]]);
    expect(await attemptsAt(jobId, due)).toEqual([
      [1, "FAILED"],
      [2, "CANCELLED"],
      [3, "SUCCEEDED"],
    ]);
    time.ms = Math.max(time.ms, away.getTime() + 5 * SECOND);
    await dispatchShard(fixture().engine, 0, "pass-at-new-time");
    expect(await runsCalled(jobId)).toEqual([[away.toISOString(), 1]]);
  }

  /**
   * Attempt 3 of the job's occurrence at `at`, put as attempt 2 failed while a pause cancelled it
   * (a QUEUED run its refused ending never sent), sent by the reaper at its deadline: its worker
   * skips it, unrun, and the job stays ACTIVE for its one-off at `away`.
   */
  async function expectAttempt3Skipped(job: Job, at: Date, away: Date) {
    const { engine } = fixture();
    const next = (await runsOf(job.jobId)).find((r) => r.attempt === 3);
    if (!next) throw new Error("no attempt 3");
    pastDeadlineOf(new Date(next.dueAt));
    expect((await reap(engine)).resent).toBe(1);
    expect(await runsCalled(job.jobId)).toEqual([]);
    expect(await attemptsAt(job.jobId, at)).toEqual([
      [1, "FAILED"],
      [2, "CANCELLED"],
      [3, "SKIPPED"],
    ]);
    const after = await getTenantJob(engine, job.tenantId, job.jobId);
    expect([after.status, after.nextRunAt]).toEqual(["ACTIVE", away.toISOString()]);
  }

  return {
    expectAttempt3RunsThenNewTime,
    expectAttempt3Skipped,
    thirdPutAsPauseCancels,
    pausedWithRunCancelled,
    resumedUnclaimed,
    expectNextAttemptRunsOnce,
    expectRunsOnceCancelledEnded,
    cancelLands,
    failsAsPauseCancels,
  };
}
