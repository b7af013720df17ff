import { expect } from "vitest";
import { claimDueEntry } from "../../shared/dispatch/claim.js";
import { type JobContext, JobError } from "../../shared/execution/job-contract.js";
import { pauseJob, resumeJob } from "../../shared/jobs/index.js";
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
  const { clock, claimOptions, seedOne, runsOf, withHooks, isRunPut, fixture, runsCalled } = race;

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
   * The occurrence at `due`: the cancelled attempt, then one next attempt, run once. The job has
   * no run of another occurrence unless `otherOccurrences` is "ignored" (a recurring job's).
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
    expect(await runsCalled(jobId)).toEqual([[due.toISOString(), 1]]);
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

  return {
    pausedWithRunCancelled,
    resumedUnclaimed,
    expectNextAttemptRunsOnce,
    failsAsPauseCancels,
  };
}
