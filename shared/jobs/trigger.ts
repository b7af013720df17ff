import type { Engine } from "../engine.js";
import { ConcurrentUpdateError, IllegalTransitionError } from "../errors.js";
import type { Run } from "../model.js";
import { LAST_STORABLE_MS } from "../schedule/index.js";
import { writeTriggeredRun } from "../storage/job-trigger.js";
import { getTenantJob } from "./queries.js";
import { runDueNow, sendRunDueNow } from "./run-now.js";

// A run's occurrence is its identity, so two triggers in one millisecond need two instants.
const TRIGGER_INSTANTS_TRIED = 20;

/**
 * One extra run now, outside the schedule; its occurrence is the current instant, or the first
 * millisecond after it that the job has no run for (another trigger in the same millisecond, or
 * an occurrence of the schedule already claimed for that instant).
 */
export async function triggerJob(engine: Engine, tenantId: string, jobId: string): Promise<Run> {
  const job = await getTenantJob(engine, tenantId, jobId);
  if (job.status === "PAUSED" || job.status === "CANCELLED")
    throw new IllegalTransitionError("trigger", job.status);
  const now = engine.clock();
  for (let shift = 0; shift < TRIGGER_INSTANTS_TRIED; shift++) {
    if (now.getTime() + shift > LAST_STORABLE_MS) break;
    const {
      run,
      item,
      now: dueAt,
    } = runDueNow(engine, {
      jobId,
      tenantId,
      scheduledFor: new Date(now.getTime() + shift),
      attempt: 1,
      priority: job.priority,
      jobVersion: job.version,
      triggered: true,
    });
    if (await writeTriggeredRun(engine, item)) {
      await sendRunDueNow(engine, run, dueAt);
      return run;
    }
  }
  throw new ConcurrentUpdateError(`job ${jobId} was triggered too often at once; try again`);
}
