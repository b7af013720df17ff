import type { MisfirePolicy, OverlapPolicy } from "./policies.js";
import type { RetryPolicy } from "./retry.js";
import type { ScheduleSpec } from "./schedule/index.js";

export type JobStatus = "ACTIVE" | "PAUSED" | "CANCELLED" | "COMPLETED";
export type RunStatus =
  | "QUEUED"
  | "RUNNING"
  | "SUCCEEDED"
  | "FAILED"
  | "DEAD"
  | "SKIPPED"
  | "CANCELLED";
export type Priority = "high" | "normal" | "low";
export const PRIORITIES: readonly Priority[] = ["high", "normal", "low"];

/** Where a webhook (`http` job) is delivered. */
export interface HttpTarget {
  readonly url: string;
  readonly headers?: Readonly<Record<string, string>>;
  readonly timeoutSeconds?: number;
  /**
   * `async`: the target answers 202 and takes the run over, heartbeating and completing it with
   * its run token (docs/api.md "Long jobs"). Absent: the delivery's answer is the run's result.
   */
  readonly mode?: "async";
}

export interface JobPolicies {
  readonly retry: RetryPolicy;
  readonly misfire: MisfirePolicy;
  readonly overlap: OverlapPolicy;
  readonly maxConcurrent: number;
  /**
   * What happens to first attempts already queued when an edit changes the schedule and their
   * occurrence is not in the new one: skipped (default) or left to complete. Queued runs of
   * occurrences the schedule keeps always run, under the job's definition when they start.
   */
  readonly inFlight: "skip" | "complete";
}

/** The summary of a job's newest finished run, kept on the job for listings. */
export interface RunSummary {
  readonly runId: string;
  readonly status: RunStatus;
  readonly scheduledFor: string;
  readonly attempt: number;
  readonly finishedAt: string;
}

/** Which edit wrote a job's version (`Job.lastEdit`). */
export interface EditMark {
  /** The version the edit was sent at, one below the version it wrote. */
  readonly from: number;
  /** `requestHash` of the edit's body as parsed (keys sorted: key order and whitespace aside). */
  readonly requestHash: string;
}

export interface Job {
  readonly jobId: string;
  readonly tenantId: string;
  readonly name: string;
  readonly type: string;
  readonly schedule: ScheduleSpec;
  readonly payload: unknown;
  readonly target?: HttpTarget;
  readonly priority: Priority;
  readonly timeoutSeconds: number;
  readonly policies: JobPolicies;
  /**
   * Jitter: an ISO-8601 duration; each occurrence runs at a stable offset inside
   * [occurrence, occurrence + window) (shared/schedule/jitter.ts). Absent or null: on the occurrence.
   */
  readonly window?: string | null;
  readonly status: JobStatus;
  readonly version: number;
  /**
   * The edit that wrote this version: the version it was sent at (`If-Match`) and the hash of its
   * body as parsed, so that a client's retry of that edit (its answer lost) is answered the job it
   * edited, not a 412 against the version it wrote. Absent until the job's first edit.
   */
  readonly lastEdit?: EditMark;
  /** The pending occurrence, or null when none is pending (completed one-off, cancelled, or schedule ended). */
  readonly nextRunAt: string | null;
  /** Sort/partition key of the due entry that holds `nextRunAt`, so edits and pauses can remove it. */
  readonly nextDueKey: DueKey | null;
  /** The latest retry entry an edit filed beside it (`retryLeftByMove`): the next such edit keeps it. */
  readonly retryLeftKey?: DueKey;
  /**
   * A one-off's floor, the occurrences below it its runs have (`oneOffBelow`, read each on its
   * own), and a one-off's era once made recurring: reads of its runs (one-off-floor.ts).
   */
  readonly oneOffFrom?: string;
  readonly oneOffBelow?: readonly string[];
  readonly oneOffEra?: {
    readonly from: string;
    readonly until: string;
    readonly below?: readonly string[];
  };
  /**
   * The attempt an edit or a resume filed the one-off's occurrence `at` at (runs there ended): an
   * earlier attempt's ending completes nothing (`isOneOffRun`). Absent, or another time's: 1.
   */
  readonly oneOffAttempt?: { readonly at: string; readonly attempt: number };
  readonly createdAt: string;
  readonly updatedAt: string;
  /** Runs of this job holding a live lease: runId → leaseUntil. Used only for overlap decisions. */
  readonly activeRuns: Readonly<Record<string, string>>;
  /**
   * How long before its listed lease (`activeRuns`) the start of the run last admitted with its
   * start unwritten falls due for its first write: the lister's lease less its heartbeat. Another
   * delivery of that run tells from it whether the lister is still within its time, whatever its
   * own lease (a deploy may have changed leaseSeconds). Absent: this worker's lease less its beat.
   */
  readonly firstWriteLeadMs?: number;
  /**
   * runId → the random mark of that run's latest admission write, for the runs the job holds
   * (listed, buffered, a waiting rerun): a write the SDK sent again finds its own
   * (storage/admission.ts). Absent until an admission of this version writes the job.
   */
  readonly admissionMarks?: Readonly<Record<string, string>>;
  /** Bumped on every change of activeRuns/bufferedRunId, to serialise overlap admissions. */
  readonly activeRevision: number;
  readonly bufferedRunId: string | null;
  /**
   * A retry or replay (attempt > 1) that waits for a run under way (under `allow`, for a slot
   * under maxConcurrent), recorded by it when it goes back to wait: an occurrence's admission
   * that finds it still waiting yields to it. Absent when none waits (set only then, so runs of
   * other jobs pay nothing).
   */
  readonly rerunWaiting?: string | null;
  /** Runs parked while PAUSED (runId → parkedAt): QUEUED, unsent, till a resume (or cancel). */
  readonly parkedRuns: Readonly<Record<string, string>>;
  readonly lastRun: RunSummary | null;
  /** Recurring jobs: no occurrence after this instant runs; reaching it completes the job. */
  readonly endAt?: string | null;
  /** Recurring jobs: occurrences queued in all (triggers and retries excluded) before the job completes. */
  readonly maxRuns?: number | null;
  /** Occurrences of the schedule the claims have queued so far (each counts once, retries not). */
  readonly occurrencesQueued?: number;
  /**
   * fire_all: missed occurrences the catch-up under way has run, as the pending due entry counts
   * them. Kept on the job so that an edit or a resume, which writes the entry again, carries it and
   * the catch-up's cap holds. Absent: 0 (no catch-up under way). Read it with `catchUpCountOf`.
   */
  readonly catchUpCount?: number;
  /**
   * The occurrence (scheduledFor) of the pending entry `catchUpCount` counts for. A claim of an
   * earlier version moves the job on without removing a count a later version wrote: the count
   * then names an occurrence the job has left, and counts for nothing.
   */
  readonly catchUpOf?: string;
  /**
   * Jobs whose `after` schedule names this one, sorted (a string set on the item, added to when
   * a dependent is created or edited to name it, taken from when it is cancelled or edited away).
   */
  readonly dependents: readonly string[];
  /**
   * One more each time a job below this one (a dependent, or one of theirs) is linked in: an edit
   * of this job's schedule is conditioned on it (shared/storage/dependents.ts). Absent: 0.
   */
  readonly linkRevision?: number;
  /**
   * Set on a COMPLETED job by its delete before the delete cancels its runs (a job not yet ended
   * needs none: the delete's cancel makes it CANCELLED, which refuses the same writes). From then
   * on a trigger, a replay and a fan-out of its runs take the job as deleted and write nothing, so
   * no run lands that the delete has passed over. A delete that dies after setting it leaves the
   * job COMPLETED with it; a repeat finishes the delete.
   */
  readonly deleteRequestedAt?: string;
}

/**
 * Whether the run is a failure's retry or a replay: past attempt 1, and not a one-off's occurrence
 * run again in place of its first attempt (`rerun`). Moved away from its one-off's time before it
 * starts, such a run still runs there. A pause that cancels one leaves its next attempt one too.
 */
export const isRetryOrReplay = (run: Pick<Run, "attempt" | "rerun">) =>
  run.attempt > 1 && run.rerun !== true;

/** Whether the job has an end condition (endAt or maxRuns). */
export const hasEnd = (job: Pick<Job, "endAt" | "maxRuns">) =>
  (job.endAt !== undefined && job.endAt !== null) ||
  (job.maxRuns !== undefined && job.maxRuns !== null);

/** Where a recurring job ends, copied onto its due entries so a claim decides without a read. */
interface JobEnd {
  readonly endAt?: string | null;
  readonly maxRuns?: number | null;
  /** How long the job's runs may go on once it completes (runsOnAfterEndMs): what its TTL waits for. */
  readonly runsOnMs?: number;
}

export interface DueKey {
  readonly pk: string;
  readonly sk: string;
}

type DueKind = "occurrence" | "retry" | "trigger";

/**
 * What a `trigger` entry carries: an upstream run that ended, and the dependents its job had
 * when the run started (each checks its own `after` schedule when it is fanned out to).
 */
export interface TriggerFanOut {
  readonly runId: string;
  readonly status: "SUCCEEDED" | "DEAD";
  readonly dependents: readonly string[];
}

/** The upstream run that queued a dependent's run, as the run records it and its handler sees it. */
export interface RunTrigger {
  readonly jobId: string;
  readonly runId: string;
  readonly scheduledFor: string;
}

/**
 * The failed attempt a next attempt was written for, written before that attempt's FAILED ending
 * (run-finish.ts): the next attempt runs only once this one says FAILED (retry-predecessor.ts
 * `decideOnPredecessor`). `fence`: the predecessor's start whose failure wrote it (0 after a cancel).
 */
export interface RetryOf {
  readonly runId: string;
  readonly fence: number;
  /**
   * The failed attempt was its one-off's occurrence's run (the job as its worker read it), or a
   * retry of such a run (failing at a time the one-off has left since): a pause that cancels it
   * gives a retry, which its next attempt is (`retriedAfterPause`), even once the one-off is
   * moved away. A recurring job's, made a one-off since, has none: a pause's cancel of
   * it stands. A version before it writes none, and such an attempt is skipped, as before.
   */
  readonly oneOff?: true;
}

/**
 * One pending occurrence or retry, stored in its minute bucket. It carries
 * what the dispatcher needs to claim it without reading the job.
 */
export interface DueEntry {
  readonly key: DueKey;
  readonly kind: DueKind;
  readonly jobId: string;
  readonly tenantId: string;
  readonly dueAt: string;
  readonly scheduledFor: string;
  readonly attempt: number;
  readonly jobVersion: number;
  readonly priority: Priority;
  readonly schedule: ScheduleSpec;
  readonly misfire: MisfirePolicy;
  /** The job's jitter window, so a claim plans each occurrence's time without reading the job. */
  readonly window?: string | null;
  /** A retry's planned time of its occurrence (the first attempt's `plannedFor`), to carry over. */
  readonly plannedFor?: string;
  /** fire_all only: missed occurrences already run in this catch-up, to enforce its cap. */
  readonly catchUpCount?: number;
  /** The job's end condition (endAt, maxRuns) as of `jobVersion`. */
  readonly end?: JobEnd;
  /** Occurrences of the job queued before this entry's: what `end.maxRuns` is counted against. */
  readonly queuedBefore?: number;
  /** `trigger` entries only: the upstream run that ended (jobId, scheduledFor, attempt are its). */
  readonly fanOut?: TriggerFanOut;
  /** A retry of a dependent's run: the upstream run its first attempt records, kept on every attempt. */
  readonly runTrigger?: RunTrigger;
  /** A retry entry (or an occurrence after a cancelled run, `afterCancelledRun`): the attempt it follows. */
  readonly retryOf?: RetryOf;
  /**
   * A one-off's occurrence filed again past attempt 1 in place of a failure's retry or a replay a
   * pause cancelled (a resume's): its run is one too, unmarked (no `rerun`), not a stand-in for
   * the first attempt. A version before it ignores the note and marks the run, as before.
   */
  readonly retryAgain?: true;
}

export interface Run {
  readonly runId: string;
  readonly jobId: string;
  readonly tenantId: string;
  readonly scheduledFor: string;
  readonly attempt: number;
  readonly status: RunStatus;
  /** When it should start: its planned time, or the backoff time of a retry. */
  readonly dueAt: string;
  /**
   * When its occurrence was planned to run: scheduledFor plus the job's jitter offset (the same
   * for every attempt). Lateness (misfire) counts from here. Absent on runs written before jitter.
   */
  readonly plannedFor?: string;
  readonly priority: Priority;
  /** The job's version when the run was queued. */
  readonly jobVersion: number;
  /** The job's version whose definition (payload, target, type) the handler ran; null until it runs. */
  readonly executedVersion: number | null;
  /**
   * The fence of the start that parked this run (its job was paused): starts up to it held the run
   * back rather than ran it, so they do not make a later start a recovery (see late-start.ts).
   */
  readonly parkedFence?: number;
  /** An extra run from `trigger`, not an occurrence of the schedule. */
  readonly triggered?: boolean;
  /** A run of an `after` job: the upstream run whose ending queued it. */
  readonly trigger?: RunTrigger;
  readonly fence: number;
  readonly enqueuedAt: string | null;
  readonly startedAt: string | null;
  readonly finishedAt: string | null;
  readonly durationMs: number | null;
  readonly leaseUntil: string | null;
  readonly workerId: string | null;
  readonly error: string | null;
  readonly reason: string | null;
  /**
   * Set by the redrive DLQ's ending (DEAD, or CANCELLED as asked): every delivery of its message
   * started the run and crashed its worker, so its handler ran though no ending measured how long.
   * Set too by a delivery's CANCELLED ending of a run asked to cancel while a worker that then
   * died held it (`decideStart`), and by a cancel's ending of a QUEUED run its job lists under a
   * lapsed lease (a worker ran it and died; a later delivery put it back to wait).
   */
  readonly crashedRunning?: boolean;
  /** Set on a DEAD run once it has been replayed: the run that replaced it. */
  readonly replayedBy: string | null;
  /** With `replayedBy`: the hash of the Idempotency-Key that replay carried, if any. */
  readonly replayKeyHash?: string;
  /**
   * Set when the reaper first re-sends the run: the instant a late start counts from. The re-send
   * itself for a message lost while the scheduler ran; the occurrence after a restart (it was down).
   */
  readonly misfireFrom: string | null;
  /** Async mode: when the target answered 202 and took the run over (it heartbeats and completes it). */
  readonly handedOverAt?: string | null;
  /**
   * Async mode: when the attempt times out (its first start plus the job's timeout), set by its
   * first delivery's token write and kept by every later start; shown once handed over.
   */
  readonly timesOutAt?: string | null;
  /**
   * Async mode: the job's timeout (seconds) at the attempt's first delivery, which `timesOutAt`
   * counts; a timed-out ending names it, not the timeout of the job as since edited. Absent on a
   * run an older version handed over: derived from its times then (`recordedDeadline`).
   */
  readonly handedOverTimeoutSeconds?: number;
  /**
   * Async mode: the SHA-256 of the run token its latest delivery carried (`shared/webhooks/run-token.ts`),
   * and of the one before (a token of an earlier start is stale, not unknown). Never shown.
   */
  readonly runTokenHash?: string;
  readonly previousRunTokenHash?: string;
  /**
   * Set when a cancel of this run was asked for: a QUEUED run ends CANCELLED at once; a RUNNING
   * one's worker sees it at its next heartbeat (or end write) and ends it CANCELLED.
   */
  readonly cancelRequestedAt?: string | null;
  /** Who asked for the cancel: the run's own route, a cancel of its job, or a pause with running: cancel. */
  readonly cancelledBy?: CancelSource | null;
  /** A failure's next attempt, or one after a cancelled run (`afterCancelledRun`): the attempt it waits for. */
  readonly retryOf?: RetryOf;
  /**
   * A one-off's occurrence claimed again at a later attempt (a resume's after a pause cancelled its
   * run, an edit's to a runAt whose run ended): its occurrence's run as a first attempt is, which a
   * new schedule without that occurrence skips. Neither a failure's retry nor a replay, nor a
   * resume's in place of one a pause cancelled (`DueEntry.retryAgain`).
   */
  readonly rerun?: true;
}

/** What cancelled a run: `POST …/runs/{runId}/cancel`, `POST /jobs/{id}/cancel`, or a pause with `running: "cancel"`. */
export const CANCEL_SOURCES = ["api", "job-cancel", "pause"] as const;
export type CancelSource = (typeof CANCEL_SOURCES)[number];

/** What a pause does to runs in progress: let them finish (default), or cancel them. */
export const PAUSE_RUNNING = ["finish", "cancel"] as const;
export type PauseRunning = (typeof PAUSE_RUNNING)[number];

/**
 * The fire_all catch-up count of the job's pending occurrence: `catchUpCount` while it counts for
 * that occurrence (`catchUpOf`, absent on counts written before it was kept), else 0.
 */
export function catchUpCountOf(job: Pick<Job, "catchUpCount" | "catchUpOf" | "nextRunAt">): number {
  const count = job.catchUpCount ?? 0;
  if (count === 0 || job.catchUpOf === undefined) return count;
  return job.catchUpOf === job.nextRunAt ? count : 0;
}
