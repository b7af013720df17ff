import { createHash } from "node:crypto";
import { compileCron } from "./cron.js";
import { cronMinGapMs } from "./cron-search.js";
import { parseEvery } from "./duration.js";
import { LAST_STORABLE_MS } from "./instant.js";
import { nextOccurrence } from "./occurrences.js";
import type { ScheduleSpec } from "./types.js";

/**
 * Jitter: a job with a `window` runs each occurrence at a stable pseudo-random offset inside
 * [occurrence, occurrence + window). The offset is a hash of the job id and the occurrence, so
 * every claim, retry, preview and redelivery computes the same planned time without storing a
 * seed, and two jobs on the same minute land at unrelated points of their windows. Pure: no I/O.
 */

/** The stable offset of an occurrence inside the window: 0 ≤ offset < windowMs, whole milliseconds. */
export function jitterOffsetMs(jobId: string, occurrence: Date, windowMs: number): number {
  if (!(Number.isSafeInteger(windowMs) && windowMs >= 0)) {
    throw new RangeError(`window must be a whole, non-negative number of ms; got ${windowMs}`);
  }
  if (windowMs === 0) return 0;
  // 48 bits of SHA-256 spread evenly over the window; Number holds them exactly.
  const digest = createHash("sha256").update(`${jobId}@${occurrence.toISOString()}`).digest();
  const fraction = digest.readUIntBE(0, 6) / 2 ** 48;
  return Math.floor(fraction * windowMs);
}

/**
 * When the occurrence of `schedule` is planned to run: the occurrence plus its offset, never past
 * the last instant keys can hold. With no window it is the occurrence itself.
 */
export function plannedTime(
  jobId: string,
  occurrence: Date,
  windowMs: number | null,
  schedule: ScheduleSpec,
): Date {
  if (windowMs === null || windowMs === 0) return occurrence;
  const spread = windowBefore(schedule, occurrence, windowMs);
  const planned = occurrence.getTime() + jitterOffsetMs(jobId, occurrence, spread);
  return new Date(Math.min(planned, LAST_STORABLE_MS));
}

/**
 * The window the occurrence's offset is spread over: the job's, cut to the time until the next
 * occurrence where that is shorter. A window is checked against the schedule's period on the wall
 * clock (for cron), and the night a DST shift skips an hour brings two wall-clock times that much
 * closer in real time (01:30 and 03:30 in New York, an hour apart then): uncut, the later one's
 * planned time could come before the earlier one's, which the claims' order relies on not
 * happening (a claim takes the occurrences in order while they are planned before its horizon,
 * so the later one was claimed only with the earlier one, up to the window after its own planned
 * time, and under misfire `skip` recorded skipped as late). An `every` interval is elapsed time,
 * never shorter than its window.
 */
function windowBefore(schedule: ScheduleSpec, occurrence: Date, windowMs: number): number {
  if (!("cron" in schedule)) return windowMs;
  const next = nextOccurrence(schedule, occurrence);
  return next === null ? windowMs : Math.min(windowMs, next.getTime() - occurrence.getTime());
}

export type WindowParse =
  | { readonly ok: true; readonly ms: number }
  | { readonly ok: false; readonly message: string };

/**
 * A window as a job may take it: an ISO-8601 duration of elapsed time, positive, on a recurring
 * schedule, and at most the schedule's period (an `every` interval; for cron, the smallest gap
 * between two of its wall-clock times), so each occurrence's planned time comes before the next
 * occurrence and the order of runs is the order of occurrences.
 */
export function parseWindow(value: string, schedule: ScheduleSpec): WindowParse {
  const duration = parseEvery(value);
  if (!duration.ok) return duration;
  if ("runAt" in schedule) {
    return {
      ok: false,
      message:
        "applies to recurring schedules (cron or every) only: a one-off runs at its runAt; give the instant you want instead",
    };
  }
  if ("after" in schedule) {
    return {
      ok: false,
      message:
        "applies to recurring schedules (cron or every) only: a job after other jobs runs when their runs end, not at times of its own",
    };
  }
  const period = periodMs(schedule);
  if (duration.ms > period) {
    return {
      ok: false,
      message: `is longer than the schedule's period (${period / 1000} s between occurrences at the closest): a window must end before the next occurrence; got "${value}"`,
    };
  }
  return { ok: true, ms: duration.ms };
}

/** The window of a stored job in ms, or null without one (a stored window was valid when written). */
export function windowMsOf(window: string | null | undefined): number | null {
  if (window === null || window === undefined) return null;
  const duration = parseEvery(window);
  return duration.ok ? duration.ms : null;
}

/** The shortest time between two occurrences: the interval, or cron's smallest wall-clock gap. */
function periodMs(schedule: Extract<ScheduleSpec, { every: string } | { cron: string }>): number {
  if ("every" in schedule) {
    const every = parseEvery(schedule.every);
    return every.ok ? every.ms : 0;
  }
  const compiled = compileCron(schedule.cron);
  return compiled.ok ? cronMinGapMs(compiled.cron) : 0;
}
