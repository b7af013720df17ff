import { CANCEL_REASONS } from "../cancel-reasons.js";
import { forEachConcurrently } from "../concurrency.js";
import type { Engine } from "../engine.js";
import { IllegalTransitionError } from "../errors.js";
import { endUnownedRun } from "../execution/run-endings.js";
import { parseRunId } from "../keys.js";
import type { Job } from "../model.js";
import { endedJobShare } from "../quotas/ended-share.js";
import { giveBackJobQuotas } from "../quotas/usage.js";
import { detachFromUpstream } from "../storage/dependents.js";
import { retryOnContention } from "../storage/dynamo-errors.js";
import { isBeingDeleted } from "../storage/items.js";
import { writeCancelledJob, writeDeletingJob } from "../storage/job-status.js";
import { getRun } from "../storage/run-reads.js";
import { cancelRunsOfJob } from "./cancel-run.js";
import { upstreamsOf } from "./dependencies.js";
import { recordRunsEndedBy } from "./ended-runs.js";
import { rearmParkedRuns } from "./resume.js";
import { withJob } from "./with-job.js";

/**
 * Cancels a job that has not completed: its pending due entry goes, its
 * queued runs are cancelled and its running runs asked to cancel (see `cancelJobRuns`). A repeat also finishes
 * what a cancel that died after its commit left queued, and the job's `lastRun` of a run it ended
 * after its handler ran (`cancelRunsOfJob`).
 */
export function cancelJob(engine: Engine, tenantId: string, jobId: string): Promise<Job> {
  return endJob(engine, tenantId, jobId, "cancel");
}

/**
 * Ends a job for good: a job that has not ended is cancelled as `cancelJob`
 * does; a COMPLETED one stays so for `delete` (a cancel of it is refused), marked
 * `deleteRequestedAt` first. Either way the job's queued runs end CANCELLED, so a
 * repeat finishes what an earlier call that died after its commit left queued.
 */
export async function endJob(
  engine: Engine,
  tenantId: string,
  jobId: string,
  action: "cancel" | "delete",
): Promise<Job> {
  const { job, parked, repeat } = await withJob<{ job: Job; parked: string[]; repeat: boolean }>(
    engine,
    tenantId,
    jobId,
    (current, now) => {
      const ended = { parked: Object.keys(current.parkedRuns), repeat: false };
      if (current.status === "CANCELLED")
        return { done: { ...ended, job: current, repeat: action === "cancel" } };
      if (current.status === "COMPLETED" && action === "delete") {
        // Marked before its runs are cancelled: a trigger, replay or fan-out that reads the job
        // COMPLETED must not write a run once the cancel below has passed (a repeat is marked).
        if (isBeingDeleted(current)) return { done: { ...ended, job: current } };
        return {
          write: async () => ({ ...ended, job: await writeDeletingJob(engine, current, now) }),
        };
      }
      if (current.status === "COMPLETED") throw new IllegalTransitionError(action, current.status);
      return {
        write: async () => {
          // Read before the job ends: a recount after it must not see the share taken off too.
          const share = await endedJobShare(engine, current, now);
          // Each parked run gets its reaper deadline back (and its TTL) before the cancel commits,
          // as a resume does: the cancel ends them after its commit, and one killed in between
          // leaves them QUEUED with no message, which the reaper then re-sends and their worker
          // ends CANCELLED. A cancel then refused leaves them for the reaper too (parked again).
          await rearmParkedRuns(engine, current, now);
          const cancelled = await writeCancelledJob(engine, current, now);
          await giveBackJobQuotas(engine, share);
          return { ...ended, job: cancelled };
        },
      };
    },
  );
  // The job as the writes of the runs it ended left it (their lastRun), not as it was before them.
  const after = await cancelJobRuns(engine, job, parked, repeat);
  // No admission comes any more: the runs that have ended are recorded now.
  const ended = action === "cancel" ? await recordRunsEndedBy(engine, after) : after;
  // An ended dependent leaves its upstreams' dependents (a repeat finishes what a crash left).
  await Promise.all(upstreamsOf(job.schedule).map((id) => detachFromUpstream(engine, id, jobId)));
  return ended;
}

/**
 * Marks the job's QUEUED runs CANCELLED now rather than when their messages
 * arrive (up to the lookahead later), so the history says so at once: the
 * runs parked while it was paused (they have no message), and the runs in
 * the job's own partition scheduled from one lookahead (and its jitter window,
 * which plans an occurrence up to that much later) back to the end of the
 * fast-path window, which holds every claimed occurrence. Older QUEUED runs
 * (retries of older occurrences, replays, a worker backlog) still have their
 * message, and their worker cancels them. Its running runs get a cancel
 * request (`cancelledBy: "job-cancel"`) their workers carry out within a heartbeat. Returns the
 * job as its writes of the runs left it (`cancelRunsOfJob`).
 */
async function cancelJobRuns(
  engine: Engine,
  job: Job,
  parked: readonly string[],
  repeat: boolean,
): Promise<Job> {
  await forEachConcurrently(parked, 16, async (runId) => {
    const ref = parseRunId(runId);
    const run = ref ? await getRun(engine, ref) : null;
    if (run?.status === "QUEUED")
      await retryOnContention(engine, "cancel parked run", () =>
        endUnownedRun(engine, run, "CANCELLED", CANCEL_REASONS["job-cancel"], engine.clock(), run, {
          by: "job-cancel",
        }),
      );
  });
  return cancelRunsOfJob(engine, job, "job-cancel", true, { repeat });
}
