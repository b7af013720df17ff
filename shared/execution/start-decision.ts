import { CANCEL_REASONS } from "../cancel-reasons.js";
import type { Engine } from "../engine.js";
import type { Job, Run } from "../model.js";
import {
  nextOccurrence,
  occurrences,
  plannedTime,
  type ScheduleSpec,
  windowMsOf,
} from "../schedule/index.js";
import { isBeingDeleted } from "../storage/items.js";
import type { RunEnding } from "../storage/run-finish.js";
import { readRun } from "../storage/run-reads.js";
import { lateStartSkipReason } from "./late-start.js";
import { endsOneOff } from "./run-endings.js";

export type StartDecision =
  | {
      readonly action: "run";
      readonly job: Job;
      /**
       * A failure's own next attempt the one-off's occurrence was filed at (`filedAtThisAttempt`),
       * run as that occurrence's run: judged late as the claim's put of it (`rerun`) would be.
       */
      readonly filedAttempt?: true;
    }
  | { readonly action: "park" }
  | {
      readonly action: "end";
      readonly ending: Pick<RunEnding, "status" | "reason" | "completesJob" | "honoursCancel"> &
        Partial<Pick<RunEnding, "ran" | "crashedRunning">>;
      /**
       * fire_once skipped the run for its schedule's next occurrence, which a job its end
       * (maxRuns) completed may never have queued: the skip stands only if that occurrence has a
       * run; without one, this run is the most recent missed occurrence, and runs.
       */
      readonly unlessNoRunFor?: Date;
    };

/**
 * `decideStart` with the runs it reads: the next occurrence's run where an edit since this run
 * was queued may have planned it otherwise (`nextRunToRead`), and, for a skip that stands only
 * if that occurrence has a run (`unlessNoRunFor`), whether it has one: fire_once's skip of a late
 * run of a job its end completed stands only while the schedule's next occurrence has a run; past
 * the last occurrence the end let the job queue, none does, and this run is the most recent
 * missed one (one read, only for a late run of a completed job).
 */
export async function decideStartReadingRuns(
  engine: Engine,
  job: Job | null,
  run: Run,
  now: Date,
): Promise<StartDecision> {
  const graceMs = engine.settings.misfireGraceMs;
  const readAt = job === null ? null : nextRunToRead(job, run, now, graceMs);
  const read = (at: Date) =>
    readRun(engine, { jobId: run.jobId, scheduledFor: at.toISOString(), attempt: 1 });
  const nextRead = readAt === null ? null : { at: readAt, run: await read(readAt) };
  const decided = decideStart(job, run, now, graceMs, nextRead);
  if (decided.action !== "end" || decided.unlessNoRunFor === undefined || job === null)
    return decided;
  const next = decided.unlessNoRunFor;
  const hasRun = nextRead?.at.getTime() === next.getTime() ? nextRead.run : await read(next);
  return hasRun === null ? { action: "run", job } : decided;
}

/**
 * The next occurrence whose run a late fire_once start reads, after an edit since this run was
 * queued. A queued run keeps the planned time it was claimed with, which an edit of the job's
 * window (added, changed, removed) does not move: that occurrence's run, where there is one, says
 * whether it is late too, not the planned time the window gives it now. Without a run, before the
 * job's pending occurrence, it was passed over: a new schedule starts at its edit, and its
 * occurrences before the edit never run. Nothing is read while the occurrence itself is not past
 * the grace: no window plans it earlier, so it is on time whatever its run says.
 */
function nextRunToRead(job: Job, run: Run, now: Date, graceMs: number): Date | null {
  // A paused or cancelled job's run is parked or ended before any misfire is judged.
  const judged = job.status === "ACTIVE" || job.status === "COMPLETED";
  if (!judged || job.policies.misfire !== "fire_once" || run.attempt !== 1) return null;
  if (run.jobVersion >= job.version) return null;
  const next = nextOccurrence(job.schedule, new Date(run.scheduledFor));
  return next !== null && next.getTime() < now.getTime() - graceMs ? next : null;
}

/**
 * What a started run does, from the job as read after the start. A paused
 * job's runs are parked for resume, never skipped. An edit does not skip
 * queued runs: they run the job's current definition, except first attempts
 * whose occurrence the edited schedule no longer has, and a one-off's occurrence claimed again
 * at a later attempt (`rerun`), which runs in place of its first (unless the edit said
 * `inFlight: complete`). Retries, replays, triggered runs and runs queued by
 * an upstream (`after`) are not occurrences of the schedule, so a schedule change leaves them to run.
 */
export function decideStart(
  job: Job | null,
  run: Run,
  now: Date,
  graceMs: number,
  /** The next occurrence's first attempt as read (null: none), see `nextRunToRead`. */
  nextRead: { readonly at: Date; readonly run: Run | null } | null = null,
): StartDecision {
  // Asked to cancel while an earlier worker held it (that worker died): it never runs again. That
  // worker started it (a cancel is asked only of a RUNNING run): its handler ran, as the DLQ's
  // ending of such a run counts it (`crashedRunning`), with no ending that measured it.
  if (run.cancelRequestedAt)
    return {
      action: "end",
      ending: {
        status: "CANCELLED",
        reason: CANCEL_REASONS[run.cancelledBy ?? "api"],
        honoursCancel: true,
        ran: true,
        crashedRunning: true,
        completesJob: job?.status === "ACTIVE" && endsOneOff(job, run, "CANCELLED"),
      },
    };
  // A completed job its delete has marked is as good as gone: the delete's cancel may have passed
  // this run over already, and the job item goes next (or a repeat of the delete removes it).
  if (job === null || isBeingDeleted(job))
    return { action: "end", ending: { status: "CANCELLED", reason: "job no longer exists" } };
  if (job.status === "CANCELLED")
    return { action: "end", ending: { status: "CANCELLED", reason: "job cancelled" } };
  if (job.status === "PAUSED") return { action: "park" };
  if (
    (run.attempt === 1 || run.rerun === true) &&
    run.triggered !== true &&
    run.trigger === undefined &&
    run.jobVersion < job.version &&
    job.policies.inFlight !== "complete" &&
    !isOccurrenceOf(job.schedule, new Date(run.scheduledFor))
  ) {
    return {
      action: "end",
      ending: {
        status: "SKIPPED",
        reason: `job edited (version ${run.jobVersion} → ${job.version}): ${run.scheduledFor} is not an occurrence of its new schedule`,
      },
    };
  }
  if (
    run.attempt === 1 &&
    run.triggered !== true &&
    job.endAt &&
    Date.parse(run.scheduledFor) > Date.parse(job.endAt)
  ) {
    // Queued before an edit moved endAt before its occurrence.
    return {
      action: "end",
      ending: { status: "SKIPPED", reason: `after the job's endAt (${job.endAt})` },
    };
  }
  const late = lateStartSkipReason({
    schedule: job.schedule,
    policy: job.policies.misfire,
    scheduledFor: new Date(run.scheduledFor),
    plannedFor: new Date(run.plannedFor ?? run.scheduledFor),
    plannedOf: (at) => {
      const queued = nextRead?.at.getTime() === at.getTime() ? nextRead.run : null;
      return queued === null
        ? plannedTime(job.jobId, at, windowMsOf(job.window), job.schedule)
        : new Date(queued.plannedFor ?? queued.scheduledFor);
    },
    passedOver: (at) =>
      nextRead?.at.getTime() === at.getTime() &&
      nextRead.run === null &&
      (job.nextRunAt === null || at.getTime() < Date.parse(job.nextRunAt)),
    // A one-off's occurrence claimed again (`rerun`) stands in for its first attempt: judged so.
    attempt: run.rerun === true ? 1 : run.attempt,
    queuedOffSchedule: run.triggered === true || run.trigger !== undefined,
    startedBefore: startedBefore(job, run),
    misfireFrom: run.misfireFrom === null ? null : new Date(run.misfireFrom),
    now,
    graceMs,
    endAt: job.endAt ? new Date(job.endAt) : null,
  });
  if (late) {
    const completesJob = job.status === "ACTIVE" && endsOneOff(job, run, "SKIPPED");
    const next =
      job.status === "COMPLETED" && job.policies.misfire === "fire_once"
        ? nextOccurrence(job.schedule, new Date(run.scheduledFor))
        : null;
    return {
      action: "end",
      ending: { status: "SKIPPED", reason: late, completesJob },
      ...(next === null ? {} : { unlessNoRunFor: next }),
    };
  }
  return { action: "run", job };
}

/**
 * Whether a worker started the run before. Every start takes the fence one higher, and a queued
 * run has fence 0. A start that parked the run (paused job) held it back: from there on, lateness
 * counts again. A first start held unwritten (run-fence.ts) leaves the fence at 0: a run its job
 * lists in activeRuns was admitted (its handler let on) and did not end, so its worker died
 * after starting it, written or not. Only a run with fence 0 holds its start unwritten (takeRun),
 * so a parked run's entry is from an admission before the park: the park resets it, as it does a
 * written start, and the fence alone decides.
 * One-offs' runs are not listed, so an unwritten start of one leaves no trace (Known limits).
 */
function startedBefore(job: Job, run: Run): boolean {
  if (run.fence - 1 > (run.parkedFence ?? 0)) return true;
  return run.parkedFence === undefined && job.activeRuns[run.runId] !== undefined;
}

function isOccurrenceOf(schedule: ScheduleSpec, at: Date): boolean {
  return occurrences(schedule, at, at, 1).length === 1;
}
