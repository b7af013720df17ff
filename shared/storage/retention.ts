import { CLAIM_REACH_SECONDS, type EngineSettings } from "../config.js";
import { hasEnd, type Job } from "../model.js";

/**
 * When items expire: the epoch seconds both tables' TTL attribute (`expiresAt`) holds. DynamoDB
 * deletes an item some time after it (within days); the sandbox's expiry sweep does the same
 * (`expiry-sweep.ts`). Reads that must not see an expired item check the value themselves.
 */

const DAY_SECONDS = 86_400;

/** An instant as the epoch seconds `expiresAt` holds. */
export const epochSeconds = (at: Date) => Math.floor(at.getTime() / 1000);

/**
 * The longest the reaper waits between re-sends of a run that no worker starts (with the lease,
 * when longer): a waiting run is looked at again, or started, within it.
 */
export const MAX_RESEND_INTERVAL_MS = 15 * 60_000;

/** A job cancelled at `endedAt` is kept for the retention, then expires. */
export function cancelledJobExpiresAt(endedAt: Date, settings: EngineSettings): number {
  return epochSeconds(endedAt) + settings.retentionDays * DAY_SECONDS;
}

/**
 * How long a completed job is kept once its runs are done: the retention, or as long as a dead
 * letter stays listed (`deadLetterRetentionDays`), when longer. A replay needs its job, and a dead
 * run of a completed job died no later than its runs' end (a one-off's run completes it as it
 * dies): kept only the retention, the job would leave its dead letters listed and unreplayable.
 */
function completedJobRetentionSeconds(settings: EngineSettings): number {
  return Math.max(settings.retentionDays, settings.deadLetterRetentionDays) * DAY_SECONDS;
}

/**
 * How long a job's runs may go on after it completes by reaching its end (endAt, maxRuns): its
 * last occurrences are queued up to a claim's reach ahead, and each may fail and be retried, every
 * attempt running up to the job's timeout and each retry waiting up to the longest backoff. A
 * retry needs its job (without it, its claim drops it as an orphan), so the job is kept that long
 * before its retention starts. A job without an end completes only once nothing is left to run: 0.
 */
export function runsOnAfterEndMs(
  job: Pick<Job, "policies" | "timeoutSeconds" | "endAt" | "maxRuns">,
): number {
  if (!hasEnd(job)) return 0;
  return CLAIM_REACH_SECONDS * 1000 + attemptsSpanMs(job);
}

/** How long a run of the job, queued now, may go on: every attempt to its timeout, every backoff its longest. */
export function attemptsSpanMs(job: Pick<Job, "policies" | "timeoutSeconds">): number {
  const { maxAttempts, maxDelayMs } = job.policies.retry;
  return maxAttempts * job.timeoutSeconds * 1000 + (maxAttempts - 1) * maxDelayMs;
}

/**
 * A job completed at `completedAt` whose runs may go on for `runsOnMs` (runsOnAfterEndMs; 0 when
 * its last run completed it): kept for `completedJobRetentionSeconds` after those runs.
 */
export function completedJobExpiresAt(
  completedAt: Date,
  runsOnMs: number,
  settings: EngineSettings,
): number {
  return (
    epochSeconds(new Date(completedAt.getTime() + runsOnMs)) +
    completedJobRetentionSeconds(settings)
  );
}

/** A run's history is kept for the retention after the run was written. */
export function runExpiresAt(writtenAt: Date, settings: EngineSettings): number {
  return epochSeconds(writtenAt) + settings.retentionDays * DAY_SECONDS;
}

/**
 * A DEAD run stays listed as a dead letter for its own retention after its death, and its
 * history no shorter than any run's: whichever of the two is longer.
 */
export function deadRunExpiresAt(diedAt: Date, settings: EngineSettings): number {
  const days = Math.max(settings.retentionDays, settings.deadLetterRetentionDays);
  return epochSeconds(diedAt) + days * DAY_SECONDS;
}

/** How long a create's idempotency key answers with the job it created: 24 hours. */
const IDEMPOTENCY_WINDOW_SECONDS = DAY_SECONDS;

export function idempotencyExpiresAt(createdAt: Date): number {
  return epochSeconds(createdAt) + IDEMPOTENCY_WINDOW_SECONDS;
}

/**
 * A tenant's concurrent-runs slot expires a day after its lease: one whose worker died is never
 * freed, and a slot above a lowered quota, or of a tenant that stopped running, is never taken
 * again. A lapsed slot is free already, so its deletion, however late, changes nothing.
 */
export function runSlotExpiresAt(leaseUntil: Date): number {
  return epochSeconds(leaseUntil) + DAY_SECONDS;
}

/** Whether an item's TTL has passed at `now` (an item without one never expires). */
export function hasExpired(item: Record<string, unknown>, now: Date): boolean {
  const expiresAt = item.expiresAt;
  return typeof expiresAt === "number" && expiresAt <= epochSeconds(now);
}
