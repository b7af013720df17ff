import type { TenantQuotas } from "../config.js";
import { SchedulerError } from "../errors.js";
import { PRIORITIES, type Priority } from "../model.js";
import {
  firstOccurrence,
  isAfterSchedule,
  occurrences,
  type ScheduleSpec,
} from "../schedule/index.js";
import type { QuotaOverride } from "../storage/tenant-quotas.js";

export type QuotaName = keyof TenantQuotas;

declare module "../errors.js" {
  interface ErrorContexts {
    /** A create or edit would take the tenant past one of its quotas (HTTP 403). */
    readonly quota_exceeded: {
      readonly quota: QuotaName;
      readonly limit: number | string;
      /** The request's field the quota refuses, when one does (`priority`). */
      readonly field?: string;
    };
    /** The tenant sent more requests than its token bucket holds (HTTP 429). */
    readonly rate_limited: {
      readonly quota: "requestsPerSecond";
      readonly retryAfterSeconds: number;
    };
  }
}

export class QuotaExceededError extends SchedulerError<"quota_exceeded"> {
  constructor(message: string, context: QuotaExceededError["context"]) {
    super("quota_exceeded", message, context);
  }
}

export class RateLimitedError extends SchedulerError<"rate_limited"> {
  /**
   * `forUnits`: the bucket is below zero, which only the charge for reads and writes takes it to,
   * so the message says why a tenant that sent few requests is refused.
   */
  constructor(limit: number, retryAfterSeconds: number, forUnits = false) {
    const units = forUnits
      ? ", each 100 read units a request read past its first 100, and each 100 write units it wrote past its first 100, counted as one request more"
      : "";
    super(
      "rate_limited",
      `over the requestsPerSecond quota (${limit} requests per second${units}); retry after ${retryAfterSeconds} s`,
      { quota: "requestsPerSecond", retryAfterSeconds },
    );
  }
}

/** The deployment's defaults with the tenant's override on top. */
export function effectiveQuotas(defaults: TenantQuotas, override: QuotaOverride): TenantQuotas {
  return { ...defaults, ...override };
}

/** high outranks normal outranks low. */
function priorityAllowed(priority: Priority, maxPriority: Priority): boolean {
  return PRIORITIES.indexOf(priority) >= PRIORITIES.indexOf(maxPriority);
}

export function assertPriorityAllowed(priority: Priority, quotas: TenantQuotas): void {
  if (!priorityAllowed(priority, quotas.maxPriority)) {
    throw new QuotaExceededError(
      `priority ${priority} is above this tenant's maxPriority quota (${quotas.maxPriority})`,
      { quota: "maxPriority", limit: quotas.maxPriority, field: "priority" },
    );
  }
}

const MINUTE_MS = 60_000;

/**
 * The peak of a schedule of times, what it counts towards the runsPerMinute
 * quota: the runs it starts in the 60 seconds from its next occurrence (an
 * `every` of 7 s counts 9), for a cron in the whole minute of its next
 * occurrence (one with a seconds field the seconds it names, any other 1).
 * Summed over a tenant's jobs this is the most they could start in one minute
 * if all fired together, which top-of-the-hour schedules do. A one-off counts 0: it runs once, and activeJobs bounds how many there
 * are. A dependent (`after`) has no clock of its own (0 here): it counts what
 * its upstreams trigger (`runsPerMinuteMeasure`, run-measure.ts).
 */
export function peakRunsPerMinute(schedule: ScheduleSpec, now: Date): number {
  if ("runAt" in schedule || isAfterSchedule(schedule)) return 0;
  const first = firstOccurrence(schedule, now);
  if (first === null) return 0;
  const at = first.getTime();
  if (!("cron" in schedule))
    return occurrences(schedule, first, new Date(at + MINUTE_MS - 1), 61).length;
  // A cron names the same seconds in every minute it matches, so its peak is a whole minute's.
  // Counted from `first` alone, a create late in a matching minute counted only the seconds left
  // in it (2 for "* 0 * * * *" at 05:00:58). The busiest 60 s around `first` (times before `now`
  // included) hold its minute's seconds whatever the zone's offset, seconds and all.
  const around = occurrences(
    schedule,
    new Date(at - MINUTE_MS + 1),
    new Date(at + MINUTE_MS - 1),
    2 * 60 + 1,
  ).map((d) => d.getTime());
  return mostInAMinute(around);
}

/** The most of `sorted` (instants in ms, ascending) inside any half-open 60 s span. */
export function mostInAMinute(sorted: readonly number[]): number {
  let peak = 0;
  let from = 0;
  sorted.forEach((time, to) => {
    while ((sorted[from] ?? time) <= time - MINUTE_MS) from++;
    peak = Math.max(peak, to - from + 1);
  });
  return peak;
}
