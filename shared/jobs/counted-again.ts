import type { Job } from "../model.js";
import { occurrences } from "../schedule/index.js";

/** Bounds the occurrences read: a job's claims queue at most their reach (14 minutes) ahead. */
const AHEAD_READ_MOST = 2_000;

/**
 * The job's count of queued occurrences (`occurrencesQueued`, against `maxRuns`) as an edit that
 * gives it a new recurring schedule, first occurring at `from`, writes it. The old schedule's
 * claims queued its occurrences ahead of now, up to the job's pending one, and counted each; the
 * QUEUED runs of those the new schedule has too still run (a worker skips only those it does not
 * have). The new schedule's claims plan them again, and count each occurrence they plan (its
 * QUEUED run replaced, or a run found started), so each such occurrence the new claims reach
 * before their `endAt` or `maxRuns` cut is taken off the count here: every occurrence is counted
 * once. Those past the cut stay counted: their runs still run, and no new claim reaches them.
 * The new claims take the first `maxRuns - count` occurrences they plan, so the cut falls where
 * the new schedule's own occurrences (those not shared) use up what the old count left.
 * Pure: the edit's write is conditioned on the job's pending entry as read, which every claim
 * moves, so the count read is the one the write replaces. A new one-off's occurrence filed again
 * is not counted again already (`occurrenceAgain`), and its claim counts a first one at most once.
 */
export function queuedAfterScheduleEdit(
  job: Pick<Job, "schedule" | "nextRunAt" | "occurrencesQueued">,
  edited: Pick<Job, "schedule" | "endAt" | "maxRuns">,
  from: Date | null,
): number {
  const counted = job.occurrencesQueued ?? 0;
  if (from === null || "runAt" in edited.schedule) return counted;
  // Queued ahead: up to the pending occurrence, or a claimed one-off's own. A recurring job with
  // none pending has no occurrence queued ahead that the count can name.
  const queuedUntil =
    job.nextRunAt !== null
      ? new Date(Date.parse(job.nextRunAt) - 1)
      : "runAt" in job.schedule
        ? new Date(job.schedule.runAt)
        : null;
  if (queuedUntil === null || queuedUntil < from) return counted;
  const ahead = occurrences(job.schedule, from, queuedUntil, AHEAD_READ_MOST);
  const last = ahead.at(-1);
  if (last === undefined) return counted;
  const shared = new Set(ahead.map((at) => at.getTime()));
  const endAt = edited.endAt ? Date.parse(edited.endAt) : Number.POSITIVE_INFINITY;
  let left =
    edited.maxRuns === undefined || edited.maxRuns === null
      ? Number.POSITIVE_INFINITY
      : edited.maxRuns - counted;
  let again = 0;
  for (const at of occurrences(edited.schedule, from, last, AHEAD_READ_MOST)) {
    if (at.getTime() > endAt) break;
    if (shared.has(at.getTime())) again += 1;
    else if (left > 0) left -= 1;
    else break;
  }
  return counted - again;
}
