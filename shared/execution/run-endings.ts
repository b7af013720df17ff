import { CANCEL_REASONS } from "../cancel-reasons.js";
import type { Engine } from "../engine.js";
import { ConcurrentUpdateError, type RunCancelledError } from "../errors.js";
import { parseRunId } from "../keys.js";
import { CANCEL_SOURCES, type CancelSource, type DueEntry, type Job, type Run } from "../model.js";
import { METRICS, type RunLogKeys, runLogKeys } from "../observability.js";
import { isOneOffRun } from "../one-off.js";
import { sendRuns } from "../queue/work-queue.js";
import { finishedAfter, ranForLastRun } from "../storage/last-run.js";
import { endRunAsSeen } from "../storage/run-end-unowned.js";
import { type FinalStatus, finishRun } from "../storage/run-finish.js";
import { type JobEnding, repairRunOnJob } from "../storage/run-on-job.js";
import { getJob, getRun, type RunRef } from "../storage/run-reads.js";

/** How many times a repair decides again on the job as a refused write found it. */
const REPAIR_ATTEMPTS = 3;

/**
 * A delivery of a run that already ended: if its worker died after recording
 * the run and before the job's write (lastRun, activeRuns, completion), that
 * write is made now, decided on the job as it stands. Its conditions hold only
 * until the job's write lands, so a repeat changes nothing. A recurring run
 * still listed while its job's next admission comes soon is left to that
 * admission, as its ending was (`nextAdmissionSoon`): a repeat delivery costs
 * no write. A listed run that finished before the job's lastRun only leaves
 * activeRuns. A one-off's run that ran brings lastRun up to it whatever the
 * job's status, as its ending would have: a run other than its own occurrence
 * (a trigger's) too, and its own occurrence's after a pause or cancel, which
 * only stops it completing the job, and so does a replay of it (the replay's
 * run is the occurrence's now). A write refused because the job changed
 * meanwhile is decided again on the job as the refusal returns it.
 */
export async function repairJobAfterRun(engine: Engine, job: Job, run: Run): Promise<void> {
  let current: Job | null = job;
  for (let attempt = 0; attempt < REPAIR_ATTEMPTS; attempt++) {
    if (current === null) return;
    const ending = missingJobWrite(current, run, engine.clock());
    if (ending === null) return;
    const outcome = await repairRunOnJob(engine, run, ending);
    if (outcome.kind === "written") return;
    current = outcome.job;
  }
  // Redelivered, the message repairs it then.
  throw new ConcurrentUpdateError(
    `job ${run.jobId} kept changing while run ${run.runId}'s ending was written to it`,
  );
}

/** What the job still lacks of the run's ending, as the job stands; null when nothing. */
function missingJobWrite(job: Job, run: Run, now: Date): JobEnding | null {
  if (run.status === "QUEUED" || run.status === "RUNNING") return null;
  const newerThanLastRun =
    ranForLastRun(run) &&
    finishedAfter({ runId: run.runId, finishedAt: run.finishedAt ?? "" }, job.lastRun);
  if (!("runAt" in job.schedule)) {
    if (!ranForLastRun(run) || job.activeRuns[run.runId] === undefined) return null;
    if (nextAdmissionSoon(job, run, now)) return null;
    return { status: run.status, ran: newerThanLastRun, tracked: true, completesJob: false };
  }
  // A dead run replayed since is no longer its occurrence's latest attempt: the replay's ending
  // completes the one-off, not this one's repair (a target's repeat may come hours later).
  const completesJob =
    job.status === "ACTIVE" && !run.replayedBy && endsOneOff(job, run, run.status);
  if (!completesJob && !newerThanLastRun) return null;
  return { status: run.status, ran: newerThanLastRun, tracked: false, completesJob };
}

/** How soon a recurring job's next run must come for its run's ending to leave the job alone. */
const NEXT_ADMISSION_WITHIN_MS = 60 * 60_000;

/**
 * Whether a recurring run's ending may leave the job's write (lastRun, the run out of activeRuns)
 * to the job's next admission (job-runs.ts): the job, as the worker read it, is ACTIVE with its
 * next run within the hour, and the run's occurrence is within the last hour. The run's item then
 * outlives that admission by most of the retention (at least a day), so the admission can still
 * read it; a sparse schedule or a long run writes the job at once, as a one-off does.
 */
export function nextAdmissionSoon(job: Job, run: Pick<Run, "scheduledFor">, now: Date): boolean {
  if (job.status !== "ACTIVE" || job.nextRunAt === null) return false;
  const at = now.getTime();
  return (
    Date.parse(job.nextRunAt) - at <= NEXT_ADMISSION_WITHIN_MS &&
    at - Date.parse(run.scheduledFor) <= NEXT_ADMISSION_WITHIN_MS
  );
}

/**
 * Whether ending this run so leaves its one-off job nothing pending: its occurrence succeeded,
 * went dead (a replay can still run it), was skipped or cancelled. A FAILED run has its next
 * attempt, and so does a run a pause cancelled: the job's resume gives its occurrence a new run.
 * A run of an attempt before the one an edit or a resume filed the occurrence at since
 * (`isOneOffRun`) leaves it to that attempt.
 */
export function endsOneOff(
  job: Job,
  run: Pick<Run, "scheduledFor" | "attempt" | "cancelledBy">,
  status: FinalStatus,
): boolean {
  if (status === "CANCELLED" && run.cancelledBy === "pause") return false;
  return (
    isOneOffRun(job, run) &&
    (status === "SUCCEEDED" || status === "DEAD" || status === "SKIPPED" || status === "CANCELLED")
  );
}

/**
 * Ends a run that no worker holds (its message reached the DLQ, or its job is
 * gone): only a run not already finished is changed. Returns null when it was.
 * A run asked to cancel, before the DEAD write or while it is made, ends CANCELLED as asked.
 */
export async function endUnownedRun(
  engine: Engine,
  ref: RunRef,
  status: "DEAD" | "CANCELLED",
  reason: string,
  now: Date,
  /** The run as the caller already read it; the write is conditioned on it being unchanged. */
  seen?: Run,
  extra: {
    /** The trigger entry of the job's dependents, written with a DEAD ending (see run-finish.ts). */
    readonly trigger?: DueEntry | undefined;
    /** A CANCELLED ending: who cancelled it. */
    readonly by?: CancelSource | undefined;
    /** The redrive DLQ's ending: every delivery started the run and crashed its worker. */
    readonly crashedRunning?: boolean | undefined;
  } = {},
): Promise<Run | null> {
  const current = seen ?? (await getRun(engine, ref));
  if (current === null || (current.status !== "QUEUED" && current.status !== "RUNNING"))
    return null;
  // A worker still holding a live lease will record the outcome itself.
  if (current.status === "RUNNING" && (current.leaseUntil ?? "") > now.toISOString()) return null;
  // A run asked to cancel ends as asked, whatever else ends it (its worker crashed meanwhile).
  if (current.cancelRequestedAt) {
    const asked = current.cancelledBy ?? "api";
    return endRunAsSeen(engine, current, "CANCELLED", CANCEL_REASONS[asked], now, {
      by: asked,
      crashedRunning: extra.crashedRunning,
    });
  }
  const ended = await endRunAsSeen(engine, current, status, reason, now, extra);
  if (ended !== null || status !== "DEAD") return ended;
  // The DEAD write finds no cancel request (`endRunAsSeen`): a cancel accepted after the read above
  // leaves the run's status and fence as they were, and it ends CANCELLED as asked, as it would
  // have, read a moment later. Another change (a start, an ending) leaves it to whoever made it.
  const again = await getRun(engine, ref);
  if (again === null || !again.cancelRequestedAt) return null;
  if (again.status !== current.status || again.fence !== current.fence) return null;
  return endUnownedRun(engine, ref, status, reason, now, again, extra);
}

/** How far a started run got, for ending it CANCELLED when a cancel request stops it anywhere. */
export interface RunProgress {
  /** Admitted: the job's activeRuns lists it. */
  tracked: boolean;
  /** The handler ran (or the run was handed to its async target), under this job version. */
  executedVersion: number | null;
  /** The handler's error, when it failed: kept on the run if a cancel request ends it instead. */
  error?: string;
}

/**
 * Ends a started run whose cancel was requested (a fenced write of its holder failed on the
 * request): CANCELLED, with who asked and when already on the run, and no next attempt. Whatever
 * the handler did, no other ending could be written: every other write of the run fails on the
 * request. A one-off job's own occurrence completes the job (while ACTIVE). Throws
 * FenceLostError when the run is no longer held under its fence.
 */
export async function endOnCancelRequest(
  engine: Engine,
  run: Run,
  cancel: RunCancelledError,
  progress: RunProgress,
): Promise<void> {
  const by = CANCEL_SOURCES.find((source) => source === cancel.context.cancelledBy) ?? "api";
  const job = progress.tracked ? null : await getJob(engine, run.jobId);
  const completesJob =
    job !== null &&
    job.status === "ACTIVE" &&
    endsOneOff(job, { ...run, cancelledBy: by }, "CANCELLED");
  await finishRun(
    engine,
    run,
    {
      status: "CANCELLED",
      reason: CANCEL_REASONS[by],
      ran: progress.executedVersion !== null,
      tracked: progress.tracked,
      completesJob,
      honoursCancel: true,
      ...(progress.executedVersion !== null ? { executedVersion: progress.executedVersion } : {}),
      ...(progress.error !== undefined ? { error: progress.error } : {}),
    },
    engine.clock(),
  );
  reportRunCancelled(engine, run, {
    cancelledBy: by,
    cancelRequestedAt: cancel.context.cancelRequestedAt,
  });
  // An admitted run held its job's slot: a buffer_one run waiting for it goes now, as after any
  // other ending (the job's policy as it is now: it is read anyway).
  if (progress.tracked) await wakeBuffered(engine, run.jobId, run.runId);
}

/**
 * Counts a run ended CANCELLED as asked (`RunOutcome`), by its worker or by the DLQ consumer,
 * and logs who asked and when.
 */
export function reportRunCancelled(
  engine: Engine,
  run: RunLogKeys,
  asked: { readonly cancelledBy: string | null; readonly cancelRequestedAt: string | null },
): void {
  engine.obs.metrics.add(METRICS.runOutcome, 1, "Count", { status: "CANCELLED" });
  engine.obs.log.info("run cancelled on request", {
    ...runLogKeys(run),
    ...asked,
  });
}

/**
 * A buffer_one job's waiting run starts as soon as the run ahead of it ends, not at its next
 * recheck: its message is sent again, due now.
 */
export async function wakeBuffered(
  engine: Engine,
  jobId: string,
  finishedRunId: string,
): Promise<void> {
  const job = await getJob(engine, jobId);
  const buffered = job?.bufferedRunId ? parseRunId(job.bufferedRunId) : null;
  if (!job || !buffered || job.bufferedRunId === finishedRunId) return;
  const now = engine.clock();
  const message = {
    ...buffered,
    dueAt: now.toISOString(),
    jobVersion: job.version,
    priority: job.priority,
    tenantId: job.tenantId,
  };
  await sendRuns(engine.sqs, engine.queues, [{ message, dueAt: now }], now);
}
