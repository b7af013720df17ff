import type { Engine } from "../engine.js";
import type { DueEntry, Job, Run } from "../model.js";
import { endRunAsSeen } from "../storage/run-end-unowned.js";
import { type FinalStatus, recordRunOnJob } from "../storage/run-finish.js";
import { getRun, type RunRef } from "../storage/run-reads.js";

/**
 * A delivery of a run that already ended: if its worker died after recording
 * the run and before the job's write (lastRun, activeRuns, completion), that
 * write is made now. Both conditions hold only until the job's write lands,
 * so a repeat changes nothing.
 */
export async function repairJobAfterRun(engine: Engine, job: Job, run: Run): Promise<void> {
  if (run.status === "QUEUED" || run.status === "RUNNING") return;
  const recurring = !("runAt" in job.schedule);
  if (recurring) {
    if (run.durationMs === null || job.activeRuns[run.runId] === undefined) return;
  } else if (!(job.status === "ACTIVE" && endsOneOff(job, run, run.status))) {
    return;
  }
  await recordRunOnJob(
    engine,
    run,
    {
      status: run.status,
      ran: run.durationMs !== null,
      tracked: recurring,
      completesJob: !recurring,
    },
    { repair: true },
  );
}

/** Whether this run is the one occurrence of a one-off job (a replay of an older run is not). */
function completesOneOff(job: Job, run: Pick<Run, "scheduledFor">): boolean {
  return "runAt" in job.schedule && Date.parse(job.schedule.runAt) === Date.parse(run.scheduledFor);
}

/**
 * Whether ending this run so leaves its one-off job nothing pending: its occurrence succeeded,
 * went dead (a replay can still run it) or was skipped. A FAILED run has its next attempt.
 */
export function endsOneOff(job: Job, run: Pick<Run, "scheduledFor">, status: FinalStatus): boolean {
  return (
    completesOneOff(job, run) &&
    (status === "SUCCEEDED" || status === "DEAD" || status === "SKIPPED")
  );
}

/**
 * Ends a run that no worker holds (its message reached the DLQ, or its job is
 * gone): only a run not already finished is changed. Returns null when it was.
 */
export async function endUnownedRun(
  engine: Engine,
  ref: RunRef,
  status: "DEAD" | "CANCELLED",
  reason: string,
  now: Date,
  /** The run as the caller already read it; the write is conditioned on it being unchanged. */
  seen?: Run,
  /** The trigger entry of the job's dependents, written with a DEAD ending (see run-finish.ts). */
  trigger?: DueEntry,
): Promise<Run | null> {
  const current = seen ?? (await getRun(engine, ref));
  if (current === null || (current.status !== "QUEUED" && current.status !== "RUNNING"))
    return null;
  // A worker still holding a live lease will record the outcome itself.
  if (current.status === "RUNNING" && (current.leaseUntil ?? "") > now.toISOString()) return null;
  return endRunAsSeen(engine, current, status, reason, now, trigger);
}
