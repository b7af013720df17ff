import type { Engine } from "../engine.js";
import { IllegalTransitionError } from "../errors.js";
import type { Job, PauseRunning } from "../model.js";
import { writePausedJob } from "../storage/job-status.js";
import { cancelRunsOfJob } from "./cancel-run.js";
import { recordRunsEndedBy } from "./ended-runs.js";
import { rerunIfResumedMeanwhile } from "./resume.js";
import { withJob } from "./with-job.js";

/**
 * Pauses an active job: its pending due entry goes (nextRunAt stays, so resume
 * puts the occurrence back and the misfire policy judges it). Runs already
 * queued are parked by their workers in parkedRuns (empty while ACTIVE). With
 * `running: "cancel"`, runs in progress are asked to cancel
 * (`cancelledBy: "pause"`) once the pause has committed; a repeat asks again, and records on the
 * job a run an earlier pause ended after its handler ran (`cancelRunsOfJob`).
 */
export async function pauseJob(
  engine: Engine,
  tenantId: string,
  jobId: string,
  options: { readonly running?: PauseRunning } = {},
): Promise<Job> {
  let repeat = false;
  const job = await withJob<Job>(engine, tenantId, jobId, (job, now) => {
    repeat = job.status === "PAUSED";
    if (repeat) return { done: job };
    if (job.status !== "ACTIVE") throw new IllegalTransitionError("pause", job.status);
    return { write: () => writePausedJob(engine, job, now) };
  });
  let after = job;
  if (options.running === "cancel") {
    // A repeat also brings lastRun up to a run an earlier pause ended and died before recording.
    // The answer is the job as those writes of the runs left it (their lastRun).
    after = await cancelRunsOfJob(engine, job, "pause", false, { repeat });
    if ("runAt" in job.schedule) await rerunIfResumedMeanwhile(engine, tenantId, jobId);
  }
  // No admission comes while it is paused: the runs that have ended are recorded now.
  return recordRunsEndedBy(engine, after);
}
