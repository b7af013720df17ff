import type { EngineSettings } from "../config.js";

/**
 * When items expire: the epoch seconds both tables' TTL attribute (`expiresAt`) holds. DynamoDB
 * deletes an item some time after it (within days); the sandbox's expiry sweep does the same
 * (`expiry-sweep.ts`). Reads that must not see an expired item check the value themselves.
 */

const DAY_SECONDS = 86_400;

const epochSeconds = (at: Date) => Math.floor(at.getTime() / 1000);

/** A job that ended (COMPLETED or CANCELLED) at `endedAt` is kept for the retention, then expires. */
export function jobExpiresAt(endedAt: Date, settings: EngineSettings): number {
  return epochSeconds(endedAt) + settings.retentionDays * DAY_SECONDS;
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

/** Whether an item's TTL has passed at `now` (an item without one never expires). */
export function hasExpired(item: Record<string, unknown>, now: Date): boolean {
  const expiresAt = item.expiresAt;
  return typeof expiresAt === "number" && expiresAt <= epochSeconds(now);
}
