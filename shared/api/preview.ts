import { DateTime, FixedOffsetZone, type Zone } from "luxon";
import { hasEnd } from "../jobs/index.js";
import { catchUpCountOf, type Job } from "../model.js";
import { isMisfired, MAX_MISFIRE_CATCH_UP, misfireCutoff } from "../policies.js";
import {
  checkTimeZone,
  nextOccurrence,
  occurrences,
  plannedTime,
  type ScheduleSpec,
  windowMsOf,
} from "../schedule/index.js";
import { ValidationError } from "../validation.js";
import { scheduleDto } from "./dto.js";
import type { PreviewDto } from "./schemas/previews.js";

// Occurrences past year 9999 cannot be stored, so a preview stops there too.
const LAST_PREVIEWABLE = new Date(Date.UTC(9999, 11, 31, 23, 59, 59, 999));

const OFFSET = /(Z|[+-]\d{2}(?::?\d{2})?)$/;

/**
 * The zone a preview shows local times in: a cron schedule's own zone, named as it is stored (in
 * its canonical casing: "europe/london" is "Europe/London", as in the preview's schedule); for
 * runAt and every, the UTC offset their instant was written with (the stored,
 * normalized form is UTC, so a stored job previews in UTC).
 */
export function displayZoneOf(input: ScheduleSpec | { readonly after: unknown }): string {
  if ("cron" in input) {
    const zone = checkTimeZone(input.timezone);
    return zone.ok ? zone.name : input.timezone;
  }
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
 * Where a job's preview asked `from` an instant before `now` starts: at the earliest occurrence
 * the job still runs, if later. A job runs nothing before the clock but what it has not run yet:
 * a run a claim queued and no worker has started (`unstarted`: a one-off whose `runAt` is a little
 * in the past, an occurrence whose jittered planned time is still ahead) and its pending
 * occurrence (`nextRunAt`). A `from` earlier would list times that never run.
 */
export function jobPreviewStart(
  from: Date,
  now: Date,
  nextRunAt: string | null,
  unstarted: Date | null,
): Date {
  if (from >= now) return from;
  let earliest = now;
  if (unstarted !== null && unstarted < earliest) earliest = unstarted;
  if (nextRunAt !== null && Date.parse(nextRunAt) < earliest.getTime())
    earliest = new Date(nextRunAt);
  return from < earliest ? earliest : from;
}

/**
 * Where a schedule's preview asked `from` starts: not before the first occurrence a job created
 * now with it has (`first`, as a create computes it: a `runAt` as is, even a little in the past,
 * which runs at once; another schedule's at or after now), nor before now when it has none.
 */
export function newJobPreviewStart(from: Date, now: Date, first: Date | null): Date {
  const earliest = first === null || first > now ? now : first;
  return from < earliest ? earliest : from;
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
 * The occurrences of a job's preview that a claim has already queued (those before its pending
 * occurrence, `nextRunAt`; all of them when it has none), as a range to read their runs over, or
 * null when there are none or their planned times cannot differ from the job's own: a job never
 * edited has had no other window. A claimed occurrence keeps the planned time it was claimed with,
 * and an edit of the window applies from the next occurrence not yet claimed.
 */
export function queuedRange(
  job: Pick<Job, "window" | "version" | "nextRunAt">,
  preview: PreviewDto,
): { readonly from: Date; readonly through: Date } | null {
  if (job.window === null && job.version <= 1) return null;
  const first = preview.occurrences[0];
  if (first === undefined) return null;
  const pending = job.nextRunAt === null ? Number.POSITIVE_INFINITY : Date.parse(job.nextRunAt);
  const claimed = preview.occurrences.filter((o) => Date.parse(o.utc) < pending);
  const last = claimed.at(-1);
  if (last === undefined) return null;
  return { from: new Date(first.utc), through: new Date(last.utc) };
}

/**
 * A job's preview with the planned time of each occurrence a run was queued for taken from that
 * run (`plannedByOccurrence`, by occurrence), where it differs from the job's window now.
 */
export function withQueuedPlannedTimes(
  preview: PreviewDto,
  plannedByOccurrence: ReadonlyMap<string, string>,
): PreviewDto {
  if (plannedByOccurrence.size === 0) return preview;
  return {
    ...preview,
    occurrences: preview.occurrences.map((o) => {
      const planned = plannedByOccurrence.get(o.utc);
      if (planned === undefined || planned === (o.plannedFor ?? o.utc)) return o;
      return { ...o, plannedFor: planned };
    }),
  };
}

/**
 * How many occurrences a preview counts to find where a job's maxRuns ends before its `from`: a
 * per-second schedule's million took the API a second of CPU, which any tenant could ask for again
 * and again. 20,000 take a fiftieth of that.
 */
const MAX_COUNTED = 20_000;
/**
 * How far from where the count starts it goes, at most: 50 years of 365.25 days. A sparse cron's
 * 20,000 occurrences span thousands of years (the 31st's reach 4884), and each new stretch of its
 * zone's time costs offset lookups, so counting them took 0.8 s of CPU; 50 years of any schedule
 * take about what a daily one's 20,000 occurrences (55 years) do, which reach that count first.
 */
const MAX_COUNTED_SPAN_MS = 50 * 365.25 * 86_400_000;

/** What of a stored job tells where its count toward maxRuns goes on (see countStart). */
type PendingOccurrence = Pick<
  Job,
  "jobId" | "schedule" | "window" | "policies" | "nextRunAt" | "catchUpCount" | "catchUpOf"
>;

/**
 * Where counting toward maxRuns goes on, and how many are left to count from there, as of
 * `clock`. The job's next run is its pending occurrence; one planned more than the misfire grace
 * before `clock` (the job was paused since, or its dispatcher is behind) meets the misfire policy
 * when it is claimed, with every occurrence missed after it, and only those that then run count
 * (`planClaim`): under `skip` none, under `fire_once` the latest, under `fire_all` each, up to the
 * catch-up's cap. Null when the schedule has no occurrence left after the missed ones.
 */
function countStart(
  job: PendingOccurrence & { readonly nextRunAt: string },
  remaining: number,
  clock: { readonly now: Date; readonly misfireGraceMs: number },
): { readonly from: Date; readonly remaining: number } | null {
  const next = new Date(job.nextRunAt);
  const windowMs = windowMsOf(job.window);
  const planned = (at: Date) => plannedTime(job.jobId, at, windowMs, job.schedule);
  if (!isMisfired(planned(next), clock.now, clock.misfireGraceMs)) return { from: next, remaining };
  const cutoff = misfireCutoff(clock.now, clock.misfireGraceMs);
  // Planned times keep the occurrences' order, so the missed ones are a prefix.
  const missedBy = (at: Date) => planned(at) <= cutoff;
  let ran = 0;
  if (job.policies.misfire === "fire_once") ran = 1;
  else if (job.policies.misfire === "fire_all") {
    const budget = Math.max(0, MAX_MISFIRE_CATCH_UP - catchUpCountOf(job));
    const missed = occurrences(job.schedule, next, cutoff, Math.min(budget, remaining));
    ran = missed.filter(missedBy).length;
  }
  // The first occurrence not missed: planned after the cutoff, so no more than a window before it.
  const lastWindow =
    windowMs === null
      ? []
      : occurrences(
          job.schedule,
          new Date(Math.max(next.getTime(), cutoff.getTime() - windowMs + 1)),
          cutoff,
          2,
        );
  const from = lastWindow.find((at) => !missedBy(at)) ?? nextOccurrence(job.schedule, cutoff);
  return from === null ? null : { from, remaining: Math.max(0, remaining - ran) };
}

/**
 * A stored job's preview (or a new one's: nothing queued yet, its first occurrence pending): it
 * stops where the job ends, at `endAt` and at the occurrence that reaches `maxRuns` (counted from
 * where the job's runs go on, after the ones already queued: see countStart, given `clock`; a new
 * job's from its first occurrence). A job that has ended (completed, or cancelled) shows none.
 * Throws ValidationError naming `from` when telling where maxRuns ends would take counting more
 * than MAX_COUNTED occurrences.
 */
export function previewOfJob(
  job: Pick<Job, "schedule" | "endAt" | "maxRuns" | "occurrencesQueued" | "nextRunAt"> &
    Partial<Pick<Job, "status">>,
  now: Date,
  count: number,
  options: {
    /** The zone to show local times in; default the schedule's. */
    readonly zone?: string;
    /** A stored job: where its pending occurrence stands as of the clock. */
    readonly pending?: {
      readonly job: PendingOccurrence;
      readonly now: Date;
      readonly misfireGraceMs: number;
    };
  } = {},
): PreviewDto {
  const zoneLabel = options.zone ?? displayZoneOf(job.schedule);
  // A cancelled job runs none of its schedule's times (nor does a completed one): nothing to show.
  if (job.status === "CANCELLED" || job.status === "COMPLETED")
    return previewOf(job.schedule, zoneLabel, now, count, new Date(0));
  if (!hasEnd(job)) return previewOf(job.schedule, zoneLabel, now, count);
  const nextRunAt = job.nextRunAt;
  if (nextRunAt === null) return previewOf(job.schedule, zoneLabel, now, count, new Date(0));
  let until = LAST_PREVIEWABLE;
  if (job.endAt) until = new Date(Math.min(Date.parse(job.endAt), until.getTime()));
  const preview = previewOf(job.schedule, zoneLabel, now, count, until);
  const lastShown = preview.occurrences.at(-1);
  if (job.maxRuns === undefined || job.maxRuns === null || lastShown === undefined) return preview;
  const queuedLeft = Math.max(0, job.maxRuns - (job.occurrencesQueued ?? 0));
  const pending = options.pending;
  const start =
    pending === undefined
      ? { from: new Date(nextRunAt), remaining: queuedLeft }
      : countStart({ ...pending.job, nextRunAt }, queuedLeft, pending);
  if (start === null) return preview;
  // Only the occurrences up to the last one shown need counting, no more than MAX_COUNTED. Those
  // before the first one shown are bounded by MAX_COUNTED_SPAN_MS too; the shown ones, however
  // far they reach (a leap day's 20 span 80 years), were just computed and cost as much again.
  const { remaining } = start;
  const shownUntil = Date.parse(lastShown.utc);
  const firstShown = Date.parse(preview.occurrences[0]?.utc ?? lastShown.utc);
  const spanEnd = start.from.getTime() + MAX_COUNTED_SPAN_MS;
  const countUntil = firstShown > spanEnd ? spanEnd : shownUntil;
  const counted = occurrences(
    job.schedule,
    start.from,
    new Date(countUntil),
    Math.min(remaining, MAX_COUNTED) + 1,
  );
  const endUnknown =
    (counted.length > MAX_COUNTED && remaining > MAX_COUNTED) ||
    (countUntil < shownUntil && counted.length <= remaining);
  if (endUnknown) {
    throw new ValidationError([
      {
        field: "from",
        message: `lies more than ${MAX_COUNTED.toLocaleString("en-US")} occurrences or 50 years after the job's next run, too far to tell where its maxRuns ends; preview from an earlier instant`,
      },
    ]);
  }
  const last = remaining === 0 ? null : counted[remaining - 1];
  if (counted.length <= remaining) return preview;
  const cut = last === undefined || last === null ? start.from.getTime() - 1 : last.getTime();
  return {
    ...preview,
    occurrences: preview.occurrences.filter((o) => Date.parse(o.utc) <= cut),
  };
}
