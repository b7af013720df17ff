import cronstrue from "cronstrue";
import { Duration } from "luxon";
import type { Job } from "./api.js";
import { isolable, showsNothing } from "./isolable.js";

export type Schedule = Job["schedule"];

/** The zone a schedule's times are shown in: a cron's own zone; instants are stored in UTC. */
export function zoneOf(schedule: Schedule): string {
  return "cron" in schedule ? schedule.timezone : "UTC";
}

/**
 * What a job is called on its page and in links: its name, or its id when the name shows nothing
 * (the API takes any name up to 200 characters, "", "  " and "\u200b" too), so every link has
 * text; made isolable, as it is always shown isolated.
 */
export function jobTitle(job: Pick<Job, "name" | "id">): string {
  return isolable(showsNothing(job.name) ? job.id : job.name);
}

/**
 * A job's title inside text the console does not lay out itself (a confirm dialog, an
 * announcement), where a name's line breaks could push the question out of view and write another,
 * and its right-to-left override reverse the question's words after it: line breaks, controls and
 * runs of spaces as one space, and the whole between U+2068 (first strong isolate) and U+2069 (pop
 * directional isolate), which ends any embedding or override the name opened (jobTitle has left
 * out a U+2069 of the name's own that would end it before).
 */
export function jobTitleInline(job: Pick<Job, "name" | "id">): string {
  return `\u2068${jobTitle(job)
    .replace(/[\s\p{Cc}]+/gu, " ")
    .trim()}\u2069`;
}

export function scheduleInWords(schedule: Schedule): string {
  if ("runAt" in schedule) return `once, at ${formatInstant(schedule.runAt, "UTC")}`;
  if ("cron" in schedule) {
    let words: string;
    try {
      words = cronstrue.toString(schedule.cron, { use24HourTimeFormat: true, verbose: false });
    } catch {
      words = schedule.cron;
    }
    return `${words} (${schedule.timezone})`;
  }
  if ("after" in schedule)
    return `after ${schedule.after.jobs.join(", ")}, on ${schedule.after.on ?? "success"}`;
  const every = Duration.fromISO(schedule.every);
  const words = every.isValid ? every.rescale().toHuman({ unitDisplay: "long" }) : schedule.every;
  const start = schedule.startAt ? `, from ${formatInstant(schedule.startAt, "UTC")}` : "";
  return `every ${words}${start}`;
}

/**
 * One formatter per zone, made once: making an Intl.DateTimeFormat costs far more than a format,
 * and a poll renders every row's times again (a page of 100 jobs spent 140 ms of script a poll
 * making them, nearly all it spent). `null`: a zone Intl does not know.
 */
const formatters = new Map<string, Intl.DateTimeFormat | null>();

function formatterFor(zone: string): Intl.DateTimeFormat | null {
  let formatter = formatters.get(zone);
  if (formatter === undefined) {
    try {
      formatter = new Intl.DateTimeFormat("en-GB", {
        timeZone: zone,
        dateStyle: "medium",
        timeStyle: "medium",
      });
    } catch {
      formatter = null;
    }
    formatters.set(zone, formatter);
  }
  return formatter;
}

export function formatInstant(iso: string | null | undefined, zone: string): string {
  if (!iso) return "—";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return iso;
  const formatter = formatterFor(zone);
  return formatter === null ? iso : `${formatter.format(date)} ${zone}`;
}

export function formatDuration(ms: number | null): string {
  if (ms === null) return "—";
  return ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(1)} s`;
}

/** A previewed occurrence in the preview's zone: an IANA zone, UTC, or a fixed offset such as +01:00. */
export function formatOccurrence(occurrence: { utc: string; local: string }, zone: string): string {
  if (/^[+-]\d{2}:\d{2}$/.test(zone))
    return `${occurrence.local.replace("T", " ").slice(0, 19)} (${zone})`;
  return formatInstant(occurrence.utc, zone);
}

/** "a", "a or b", "a, b or c". */
export function listOf(words: readonly string[]): string {
  const last = words.at(-1) ?? "";
  return words.length < 2 ? last : `${words.slice(0, -1).join(", ")} or ${last}`;
}
