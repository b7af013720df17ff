import type { Engine } from "../engine.js";
import { ConcurrentUpdateError, IllegalTransitionError } from "../errors.js";
import type { Run } from "../model.js";
import { LAST_STORABLE_MS } from "../schedule/index.js";
import { recordShardCount } from "../shard-count.js";
import { keepCompletedJobForRun } from "../storage/job-status.js";
import { writeTriggeredRun } from "../storage/job-trigger.js";
import { getTenantJob } from "./queries.js";
import { runDueNow, sendRunDueNow } from "./run-now.js";

// A run's occurrence is its identity, so two triggers in one millisecond need two instants.
const TRIGGER_INSTANTS_TRIED = 20;

/**
 * The instants a trigger at `now` may take, in order: now and the milliseconds after it, and at
 * the end of the storable range, where there are none after it, the milliseconds before.
 */
function triggerInstants(now: number): number[] {
  const after = Math.max(0, Math.min(TRIGGER_INSTANTS_TRIED, LAST_STORABLE_MS - now + 1));
  const forward = Array.from({ length: after }, (_, shift) => now + shift);
  const backward = Array.from({ length: TRIGGER_INSTANTS_TRIED - after }, (_, i) => now - 1 - i);
  return [...forward, ...backward];
}

/**
 * One extra run now, outside the schedule; its occurrence is the current instant, or the first
 * millisecond after it that the job has no run for (another trigger in the same millisecond, or
 * an occurrence of the schedule already claimed for that instant); at the last storable instant,
 * the first millisecond before it.
 */
export async function triggerJob(engine: Engine, tenantId: string, jobId: string): Promise<Run> {
  const job = await getTenantJob(engine, tenantId, jobId);
  if (job.status === "PAUSED" || job.status === "CANCELLED")
    throw new IllegalTransitionError("trigger", job.status);
  await recordShardCount(engine);
  // Before the run is written: a run left without its job's TTL pushed could outlive the job.
  await keepCompletedJobForRun(engine, job, engine.clock());
  for (const instant of triggerInstants(engine.clock().getTime())) {
    const {
      run,
      item,
      now: dueAt,
    } = runDueNow(engine, {
      jobId,
      tenantId,
      scheduledFor: new Date(instant),
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
