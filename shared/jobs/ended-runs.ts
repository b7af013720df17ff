import type { Engine } from "../engine.js";
import { ConcurrentUpdateError } from "../errors.js";
import type { Job } from "../model.js";
import { recordEndedRuns } from "../storage/admission.js";
import { readListedRuns } from "../storage/job-runs.js";
import { getJob } from "../storage/run-reads.js";

const ATTEMPTS = 3;

/**
 * A frequent recurring run's ending leaves its activeRuns entry and the job's
 * lastRun to the job's next admission (job-runs.ts). A pause, cancel or edit
 * may put that admission off past the runs' retention, after which their items
 * are gone and could no longer bring lastRun up to them: such a change records
 * the runs that have ended now (nothing is written when none is listed or
 * ended). Returns the job as it then stands: as that write left it, or as
 * its listed runs stand when nothing was written.
 */
export async function recordRunsEndedBy(engine: Engine, changed: Job): Promise<Job> {
  let job: Job | null = changed;
  for (let attempt = 0; job !== null && attempt < ATTEMPTS; attempt++) {
    const [listed] = await readListedRuns(engine, [job]);
    if (listed === undefined || listed.ended.length === 0) return listed?.job ?? job;
    try {
      return await recordEndedRuns(engine, job, listed.ended, listed.job.lastRun);
    } catch (error) {
      if (!(error instanceof ConcurrentUpdateError)) throw error;
    }
    job = await getJob(engine, changed.jobId);
  }
  // Deleted, or busy with admissions, each of which records the ended runs itself.
  return job ?? changed;
}
