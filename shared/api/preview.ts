import { DateTime, FixedOffsetZone, type Zone } from "luxon";
import { hasEnd } from "../jobs/index.js";
import type { Job } from "../model.js";
import { occurrences, plannedTime, type ScheduleSpec, windowMsOf } from "../schedule/index.js";
import { ValidationError } from "../validation.js";
import { scheduleDto } from "./dto.js";
import type { PreviewDto } from "./schemas/previews.js";

// Occurrences past year 9999 cannot be stored, so a preview stops there too.
const LAST_PREVIEWABLE = new Date(Date.UTC(9999, 11, 31, 23, 59, 59, 999));

const OFFSET = /(Z|[+-]\d{2}(?::?\d{2})?)$/;

/**
 * The zone a preview shows local times in: a cron schedule's own zone; for
 * runAt and every, the UTC offset their instant was written with (the stored,
 * normalized form is UTC, so a stored job previews in UTC).
 */
export function displayZoneOf(input: ScheduleSpec | { readonly after: unknown }): string {
  if ("cron" in input) return input.timezone;
  if ("after" in input) return "UTC";
  const instant = "runAt" in input ? input.runAt : input.startAt;
  const offset = instant === undefined ? undefined : OFFSET.exec(instant)?.[1];
  if (offset === undefined || offset === "Z") return "UTC";
  const digits = offset.slice(1).replace(":", "");
  const hours = digits.slice(0, 2);
  const minutes = digits.length > 2 ? digits.slice(2) : "00";
  if (hours === "00" && minutes === "00") return "UTC";
  return `${offset[0]}${hours}:${minutes}`;
}

function luxonZone(label: string): Zone | string {
  const fixed = /^([+-])(\d{2}):(\d{2})$/.exec(label);
  if (fixed === null) return label;
  const [, sign, hours = "0", minutes = "0"] = fixed;
  const total = Number(hours) * 60 + Number(minutes);
  return FixedOffsetZone.instance(sign === "-" ? -total : total);
}

/**
 * The next `count` occurrences at or after `now` (the current time, or the
 * instant a caller asks from; to the second, as a new job's first occurrence
 * is computed), in UTC and in the display zone. `schedule`
 * must be normalized.
 */
export function previewOf(
  schedule: ScheduleSpec,
  zoneLabel: string,
  now: Date,
  count: number,
  until: Date = LAST_PREVIEWABLE,
): PreviewDto {
  const from = new Date(Math.floor(now.getTime() / 1000) * 1000);
  const zone = luxonZone(zoneLabel);
  const times = from <= until ? occurrences(schedule, from, until, count) : [];
  return {
    schedule: scheduleDto(schedule),
    timezone: zoneLabel,
    occurrences: times.map((at) => ({
      utc: at.toISOString(),
      local: DateTime.fromMillis(at.getTime(), { zone }).toISO() ?? at.toISOString(),
    })),
  };
}

/** A job with a jitter window: each occurrence with its planned time (it depends on the job id). */
export function withPlannedTimes(
  job: Pick<Job, "jobId" | "window" | "schedule">,
  preview: PreviewDto,
): PreviewDto {
  const windowMs = windowMsOf(job.window);
  if (windowMs === null) return preview;
  return {
    ...preview,
    occurrences: preview.occurrences.map((o) => ({
      ...o,
      plannedFor: plannedTime(job.jobId, new Date(o.utc), windowMs, job.schedule).toISOString(),
    })),
  };
}

/**
 * How many occurrences a preview counts to find where a job's maxRuns ends before its `from`: a
 * per-second schedule's million took the API a second of CPU, which any tenant could ask for again
 * and again. 20,000 take a fiftieth of that.
 */
const MAX_COUNTED = 20_000;

/**
 * A stored job's preview (or a new one's: nothing queued yet, its first occurrence pending, with
 * the preview's zone of its schedule as written): it stops where the job ends, at `endAt` and at the occurrence that
 * reaches `maxRuns` (counted from the pending occurrence on, after the ones already queued). A
 * job that has ended (completed, or cancelled) shows none. Throws ValidationError naming `from` when telling where maxRuns
 * ends would take counting more than MAX_COUNTED occurrences.
 */
export function previewOfJob(
  job: Pick<Job, "schedule" | "endAt" | "maxRuns" | "occurrencesQueued" | "nextRunAt"> &
    Partial<Pick<Job, "status">>,
  now: Date,
  count: number,
  zoneOf?: string,
): PreviewDto {
  const zoneLabel = zoneOf ?? displayZoneOf(job.schedule);
  // A cancelled job runs none of its schedule's times (nor does a completed one): nothing to show.
  if (job.status === "CANCELLED" || job.status === "COMPLETED")
    return previewOf(job.schedule, zoneLabel, now, count, new Date(0));
  if (!hasEnd(job)) return previewOf(job.schedule, zoneLabel, now, count);
  if (job.nextRunAt === null) return previewOf(job.schedule, zoneLabel, now, count, new Date(0));
  let until = LAST_PREVIEWABLE;
  if (job.endAt) until = new Date(Math.min(Date.parse(job.endAt), until.getTime()));
  const preview = previewOf(job.schedule, zoneLabel, now, count, until);
  const lastShown = preview.occurrences.at(-1);
  if (job.maxRuns === undefined || job.maxRuns === null || lastShown === undefined) return preview;
  // Only the occurrences up to the last one shown need counting, and no more than MAX_COUNTED.
  const remaining = Math.max(0, job.maxRuns - (job.occurrencesQueued ?? 0));
  const counted = occurrences(
    job.schedule,
    new Date(job.nextRunAt),
    new Date(lastShown.utc),
    Math.min(remaining, MAX_COUNTED) + 1,
  );
  if (counted.length > MAX_COUNTED && remaining > MAX_COUNTED) {
    throw new ValidationError([
      {
        field: "from",
        message: `lies more than ${MAX_COUNTED.toLocaleString("en-US")} occurrences after the job's next run, too far to tell where its maxRuns ends; preview from an earlier instant`,
      },
    ]);
  }
  const last = remaining === 0 ? null : counted[remaining - 1];
  if (counted.length <= remaining) return preview;
  const cut = last === undefined || last === null ? Date.parse(job.nextRunAt) - 1 : last.getTime();
  return {
    ...preview,
    occurrences: preview.occurrences.filter((o) => Date.parse(o.utc) <= cut),
  };
}
