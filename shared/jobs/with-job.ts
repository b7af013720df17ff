import type { Engine } from "../engine.js";
import { ConcurrentUpdateError } from "../errors.js";
import type { Job } from "../model.js";
import { getTenantJob } from "./queries.js";

const ATTEMPTS = 5;

/** What a change planned from a job does: nothing more (`done`), or a write conditioned on that job. */
type JobStep<T> = { write: () => Promise<T> } | { done: T };

/**
 * Reads the job and lets `plan` decide from it; plans again from a fresh read
 * when the job changed between the read and the write (a claim moved it, a
 * worker parked a run): the write's `ConcurrentUpdateError`.
 */
export async function withJob<T>(
  engine: Engine,
  tenantId: string,
  jobId: string,
  plan: (job: Job, now: Date) => Promise<JobStep<T>> | JobStep<T>,
): Promise<T> {
  for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
    const job = await getTenantJob(engine, tenantId, jobId);
    const step = await plan(job, engine.clock());
    if ("done" in step) return step.done;
    try {
      return await step.write();
    } catch (error) {
      if (!(error instanceof ConcurrentUpdateError)) throw error;
    }
  }
  throw new ConcurrentUpdateError(`job ${jobId} kept changing; try again`);
}
