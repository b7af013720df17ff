import type { Engine } from "../engine.js";
import {
  ConcurrentUpdateError,
  IdempotencyConflictError,
  IllegalTransitionError,
  JobNotFoundError,
} from "../errors.js";
import type { Job, Run } from "../model.js";
import { LAST_STORABLE_MS, nextOccurrence, type ScheduleSpec } from "../schedule/index.js";
import { recordShardCount } from "../shard-count.js";
import { isBeingDeleted } from "../storage/items.js";
import { keepCompletedJobForRun } from "../storage/job-status.js";
import { readTriggerRecord, type TriggerKey, writeTriggeredRun } from "../storage/job-trigger.js";
import { getRun } from "../storage/run-reads.js";
import { getTenantJob } from "./queries.js";
import { runDueNow, sendRunDueNow, sendRunIfUnsent } from "./run-now.js";

// A run's occurrence is its identity, so two triggers in one millisecond need two instants.
const TRIGGER_INSTANTS_TRIED = 20;
/** Reads of a job whose status kept changing under the trigger's write before giving up (503). */
const JOB_READS = 5;

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
 * Whether `instant` is an occurrence of the schedule. A trigger leaves those to the schedule: a
 * claim that comes later (after a dispatcher outage) would take a trigger's run there for the
 * occurrence's own, and the two would run once.
 */
function isOccurrence(schedule: ScheduleSpec, instant: number): boolean {
  return nextOccurrence(schedule, new Date(instant - 1))?.getTime() === instant;
}

/** A trigger's answer: the run it queued, or the one an earlier trigger with its key queued. */
export interface TriggerResult {
  readonly run: Run;
  readonly created: boolean;
}

/**
 * One extra run now, outside the schedule; its occurrence is the current instant, or the first
 * millisecond after it that the job has no run for (another trigger in the same millisecond) and
 * that is no occurrence of the schedule (claimed or not); at the last storable instant, the first
 * millisecond before it. With an idempotency key, a trigger repeated within the key's
 * window (24 hours) answers the run the first one queued and queues nothing.
 */
export async function triggerJobWithKey(
  engine: Engine,
  tenantId: string,
  jobId: string,
  idempotencyKey: string | undefined,
): Promise<TriggerResult> {
  const key = idempotencyKey === undefined ? undefined : { tenantId, jobId, key: idempotencyKey };
  // The run's write holds the job at the status and version read: one that moved meanwhile (a
  // cancel, delete or pause; an edit, whose new schedule may make the instant an occurrence) is
  // read again, and refused or triggered as it now stands.
  for (let read = 0; read < JOB_READS; read++) {
    const job = await getTenantJob(engine, tenantId, jobId);
    // The repeat answers what the first trigger did, whatever the job's status has become since.
    const earlier = key && (await earlierTrigger(engine, key));
    if (earlier) return { run: earlier, created: false };
    // A completed job whose delete has begun is as good as gone: its runs are being cancelled.
    if (isBeingDeleted(job)) throw new JobNotFoundError(jobId);
    if (job.status === "PAUSED" || job.status === "CANCELLED")
      throw new IllegalTransitionError("trigger", job.status);
    const triggered = await triggerAsRead(engine, job, key);
    if (triggered !== "jobChanged") return triggered;
  }
  throw new ConcurrentUpdateError(`job ${jobId} kept changing under its trigger; try again`);
}

/** The trigger of `job` as read (ACTIVE or COMPLETED); "jobChanged" when it is no longer so. */
async function triggerAsRead(
  engine: Engine,
  job: Job,
  key: TriggerKey | undefined,
): Promise<TriggerResult | "jobChanged"> {
  const { jobId, tenantId } = job;
  await recordShardCount(engine);
  // Before the run is written: a run left without its job's TTL pushed could outlive the job. One
  // that expired since the read is read again, and found gone.
  if ((await keepCompletedJobForRun(engine, job, engine.clock())) === "gone") return "jobChanged";
  for (const instant of triggerInstants(engine.clock().getTime())) {
    if (isOccurrence(job.schedule, instant)) continue;
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
    const written = await writeTriggeredRun(engine, job, item, key);
    if (written === "jobChanged") return written;
    if (written === "written") {
      await sendRunDueNow(engine, run, dueAt);
      return { run, created: true };
    }
    if (written === "keyTaken" && key) {
      const concurrent = await earlierTrigger(engine, key);
      if (concurrent) return { run: concurrent, created: false };
    }
  }
  throw new ConcurrentUpdateError(`job ${jobId} was triggered too often at once; try again`);
}

/** One extra run now, outside the schedule, without an idempotency key (`triggerJobWithKey`). */
export async function triggerJob(engine: Engine, tenantId: string, jobId: string): Promise<Run> {
  return (await triggerJobWithKey(engine, tenantId, jobId, undefined)).run;
}

/**
 * The run an earlier trigger with this key queued, within the key's window, its message sent when
 * it may be unsent: that trigger's write may have applied with every answer lost (a 500, which its
 * client sends again with the key), and it died before its send, leaving the run to the reaper a
 * lease past its due time, though a trigger is one extra run now.
 */
async function earlierTrigger(engine: Engine, key: TriggerKey): Promise<Run | null> {
  const scheduledFor = await readTriggerRecord(engine, key);
  if (scheduledFor === null) return null;
  const run = await getRun(engine, { jobId: key.jobId, scheduledFor, attempt: 1 });
  if (run === null)
    throw new IdempotencyConflictError(key.key, `queued run ${scheduledFor}, which is gone`);
  await sendRunIfUnsent(engine, run, engine.clock());
  return run;
}
