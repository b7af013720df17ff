import type { Engine } from "../engine.js";
import { IllegalTransitionError } from "../errors.js";
import type { Job } from "../model.js";
import { writePausedJob } from "../storage/job-status.js";
import { withJob } from "./with-job.js";

/**
 * Pauses an active job: its pending due entry goes (nextRunAt stays, so resume
 * puts the occurrence back and the misfire policy judges it). Runs already
 * queued are parked by their workers in parkedRuns (empty while ACTIVE).
 */
export async function pauseJob(engine: Engine, tenantId: string, jobId: string): Promise<Job> {
  return withJob<Job>(engine, tenantId, jobId, (job, now) => {
    if (job.status === "PAUSED") return { done: job };
    if (job.status !== "ACTIVE") throw new IllegalTransitionError("pause", job.status);
    return { write: () => writePausedJob(engine, job, now) };
  });
}
