import type { Engine } from "../engine.js";
import type { DueEntry, Job } from "../model.js";
import { deletePendingDueEntry, putDueEntry, updateJobFrom, writeJobChange } from "./job-update.js";
import { completedJobExpiresAt, jobExpiresAt, runsOnAfterEndMs } from "./retention.js";

/**
 * The status changes of a job as read (`ConcurrentUpdateError` when it has
 * changed since): each returns the job as it now stands.
 */

/**
 * PAUSED, with its pending due entry deleted. nextRunAt stays: resume puts the
 * pending occurrence back. parkedRuns starts empty: workers add the runs they
 * park while it is paused.
 */
export async function writePausedJob(engine: Engine, job: Job, now: Date): Promise<Job> {
  const set = {
    status: "PAUSED",
    nextDueKey: null,
    parkedRuns: {},
    updatedAt: now.toISOString(),
  } as const;
  await writeJobChange(engine, job, [
    updateJobFrom(engine, job, set),
    ...deletePendingDueEntry(engine, job),
  ]);
  return { ...job, ...set };
}

/**
 * ACTIVE, with `due` (its pending occurrence) as its due entry, conditioned on
 * the parked runs being the ones read: a run parked meanwhile would be left
 * unsent. COMPLETED instead when `completes` (its end condition left it
 * nothing to run), expiring at its retention.
 */
export async function writeResumedJob(
  engine: Engine,
  job: Job,
  due: DueEntry | null,
  now: Date,
  completes = false,
): Promise<Job> {
  const set = {
    status: completes ? "COMPLETED" : "ACTIVE",
    nextRunAt: due?.scheduledFor ?? null,
    nextDueKey: due?.key ?? null,
    parkedRuns: {},
    updatedAt: now.toISOString(),
  } as const;
  // Its parked runs, sent now, still run and retry.
  const expiry = completes
    ? { expiresAt: completedJobExpiresAt(now, runsOnAfterEndMs(job), engine.settings) }
    : {};
  await writeJobChange(engine, job, [
    updateJobFrom(engine, job, { ...set, ...expiry }, { sameParkedRuns: true }),
    ...(due ? [{ name: "dueEntry" as const, write: putDueEntry(engine, due) }] : []),
  ]);
  return { ...job, ...set };
}

/**
 * CANCELLED, with no next run and its pending due entry deleted, conditioned on
 * the parked runs being the ones read (the caller cancels those). The job
 * expires at its retention.
 */
export async function writeCancelledJob(engine: Engine, job: Job, now: Date): Promise<Job> {
  const set = {
    status: "CANCELLED",
    nextRunAt: null,
    nextDueKey: null,
    updatedAt: now.toISOString(),
  } as const;
  await writeJobChange(engine, job, [
    updateJobFrom(
      engine,
      job,
      { ...set, expiresAt: jobExpiresAt(now, engine.settings) },
      {
        sameParkedRuns: true,
      },
    ),
    ...deletePendingDueEntry(engine, job),
  ]);
  return { ...job, ...set };
}
