import { type FieldIssue, ValidationError } from "../validation.js";
import { compileCron, emptyListItemIssue } from "./cron.js";
import { cronMinGapMs } from "./cron-search.js";
import { parseEvery } from "./duration.js";
import {
  FIRST_STORABLE_MS,
  LAST_STORABLE_MS,
  parseInstant,
  STORABLE_RANGE_TEXT,
} from "./instant.js";
import { AFTER_ON, type AfterOn, type ScheduleKind, type ScheduleSpec } from "./types.js";
import { checkNewTimeZone, checkTimeZone } from "./zone.js";

/** Deployment-wide default: nothing fires more than once a second. */
export const DEFAULT_MIN_INTERVAL_MS = 1_000;

export interface ParseScheduleOptions {
  /** Smallest allowed distance between two occurrences; default {@link DEFAULT_MIN_INTERVAL_MS}. */
  readonly minIntervalMs?: number;
  /** When given, the result is also normalized with it (see {@link normalizeSchedule}). */
  readonly now?: Date;
}

export type ScheduleParseResult =
  | { readonly ok: true; readonly schedule: ScheduleSpec }
  | { readonly ok: false; readonly issues: readonly FieldIssue[] };

const KINDS =
  'give exactly one of {"runAt": "<ISO-8601 date-time>"}, {"cron": "<expression>", "timezone": "<IANA zone>"}, {"every": "<ISO-8601 duration>", "startAt"?: "<ISO-8601 date-time>"} or {"after": {"jobs": ["<job id>", …], "on": "success" | "failure" | "completion"}}';

/** The most upstream jobs one `after` schedule may name (each is one more write at create and edit). */
export const MAX_AFTER_JOBS = 20;

/**
 * The most runs of a job one run of a job above it may queue, one per path of `after` links
 * between them (shared/jobs/path-bound.ts checks it at create and edit).
 */
export const MAX_RUNS_PER_RUN_ABOVE = 100;
/** What a job id may hold (as shared/keys.ts has it); an unknown id is refused by the API later. */
const JOB_ID_TEXT = /^[0-9A-Za-z_-]{1,64}$/;

const ALLOWED_KEYS: Readonly<Record<ScheduleKind, readonly string[]>> = {
  runAt: ["runAt"],
  cron: ["cron", "timezone"],
  every: ["every", "startAt"],
  after: ["after"],
};

const SECOND_MS = 1_000;

/**
 * Validates untrusted input (an API body's `schedule`) into a {@link ScheduleSpec} in canonical
 * form: instants as UTC `toISOString()`, cron whitespace collapsed, the zone in Intl's casing.
 * Every issue's field is relative to the schedule and prefixed `schedule.`.
 */
export function safeParseSchedule(
  input: unknown,
  options: ParseScheduleOptions = {},
): ScheduleParseResult {
  const minIntervalMs = options.minIntervalMs ?? DEFAULT_MIN_INTERVAL_MS;
  if (!(Number.isFinite(minIntervalMs) && minIntervalMs > 0)) {
    throw new RangeError(`minIntervalMs must be a positive number, got ${minIntervalMs}`);
  }

  if (typeof input !== "object" || input === null || Array.isArray(input)) {
    return failure("schedule", `must be an object: ${KINDS}; got ${describe(input)}`);
  }
  const record = input as Readonly<Record<string, unknown>>;
  const keys = Object.keys(record);
  const kinds = (["runAt", "cron", "every", "after"] as const).filter((k) => keys.includes(k));
  const [kind] = kinds;
  if (kind === undefined) {
    return failure("schedule", `has none of runAt, cron, every or after: ${KINDS}`);
  }
  if (kinds.length > 1) {
    return failure("schedule", `mixes schedule kinds (${kinds.join(", ")}): ${KINDS}`);
  }
  const allowed = ALLOWED_KEYS[kind];
  const shapeIssues = keys
    .filter((key) => !allowed.includes(key))
    .map((key) => ({ field: `schedule.${key}`, message: unknownKeyMessage(key, kind) }));
  if (shapeIssues.length > 0) return { ok: false, issues: shapeIssues };

  const result =
    kind === "runAt"
      ? parseRunAt(record.runAt)
      : kind === "cron"
        ? parseCron(record.cron, record.timezone, minIntervalMs)
        : kind === "after"
          ? parseAfter(record.after)
          : parseEverySpec(record.every, record.startAt, minIntervalMs);
  if (!result.ok || options.now === undefined) return result;
  return { ok: true, schedule: normalizeSchedule(result.schedule, options.now) };
}

/** {@link safeParseSchedule} that throws a {@link ValidationError} instead. */
export function parseSchedule(input: unknown, options: ParseScheduleOptions = {}): ScheduleSpec {
  const result = safeParseSchedule(input, options);
  if (!result.ok) throw new ValidationError(result.issues);
  return result.schedule;
}

/**
 * Whether two stored or normalized schedules are the same: a cron zone stored in the case it was
 * typed (`us/eastern`, as links were before they were stored in tzdb's casing) is the zone it names.
 */
export function sameSchedule(a: ScheduleSpec, b: ScheduleSpec): boolean {
  return a === b || JSON.stringify(zoneCased(a)) === JSON.stringify(zoneCased(b));
}

function zoneCased(spec: ScheduleSpec): ScheduleSpec {
  if (!("cron" in spec)) return spec;
  const zone = checkTimeZone(spec.timezone);
  return zone.ok ? { cron: spec.cron, timezone: zone.name } : spec;
}

/**
 * Makes a (valid) spec fully determined so that computing occurrences never depends on when it
 * happens: `every` without `startAt` starts at `now` truncated to the second, instants are
 * re-serialised as UTC with milliseconds. Idempotent. Throws {@link ValidationError} if a
 * field it has to read is malformed.
 */
export function normalizeSchedule(spec: ScheduleSpec, now: Date): ScheduleSpec {
  if ("after" in spec) {
    return { after: { jobs: [...new Set(spec.after.jobs)].sort(), on: spec.after.on } };
  }
  if ("runAt" in spec) {
    return { runAt: instantOrThrow("schedule.runAt", spec.runAt) };
  }
  if ("cron" in spec) {
    const zone = checkTimeZone(spec.timezone);
    if (!zone.ok)
      throw new ValidationError([{ field: "schedule.timezone", message: zone.message }]);
    return { cron: spec.cron.trim().replace(/\s+/g, " "), timezone: zone.name };
  }
  const nowMs = now.getTime();
  if (Number.isNaN(nowMs)) throw new RangeError("normalizeSchedule: now is an invalid Date");
  const startAt =
    spec.startAt === undefined
      ? new Date(Math.floor(nowMs / SECOND_MS) * SECOND_MS).toISOString()
      : instantOrThrow("schedule.startAt", spec.startAt);
  return { every: spec.every, startAt };
}

type Parsed = ScheduleParseResult;

function parseRunAt(value: unknown): Parsed {
  if (typeof value !== "string") return failure("schedule.runAt", mustBeString(value));
  const instant = storableInstant(value);
  if (!instant.ok) return failure("schedule.runAt", instant.message);
  return { ok: true, schedule: { runAt: new Date(instant.ms).toISOString() } };
}

/** An instant a job may name: parsed, and inside the range keys can hold. */
function storableInstant(value: string): ReturnType<typeof parseInstant> {
  const instant = parseInstant(value);
  if (!instant.ok) return instant;
  if (instant.ms < FIRST_STORABLE_MS || instant.ms > LAST_STORABLE_MS) {
    return { ok: false, message: `must lie in ${STORABLE_RANGE_TEXT}; got "${value}"` };
  }
  return instant;
}

function parseCron(cronValue: unknown, zoneValue: unknown, minIntervalMs: number): Parsed {
  const issues: FieldIssue[] = [];
  let expression: string | undefined;
  let timezone: string | undefined;

  if (typeof cronValue !== "string") {
    issues.push({ field: "schedule.cron", message: mustBeString(cronValue) });
  } else {
    const compiled = compileCron(cronValue);
    const emptyItem = compiled.ok ? emptyListItemIssue(cronValue) : null;
    if (emptyItem !== null) {
      issues.push({ field: "schedule.cron", message: emptyItem });
    } else if (!compiled.ok) {
      issues.push({ field: "schedule.cron", message: compiled.message });
    } else {
      const gap = cronMinGapMs(compiled.cron);
      if (gap < minIntervalMs) {
        issues.push({
          field: "schedule.cron",
          message: `fires as often as every ${formatMs(gap)}, more often than the minimum interval of ${formatMs(minIntervalMs)}`,
        });
      } else {
        expression = compiled.cron.expression;
      }
    }
  }

  if (zoneValue === undefined) {
    issues.push({
      field: "schedule.timezone",
      message:
        'is required with cron: the expression is read in this IANA zone, e.g. "America/New_York" or "UTC"',
    });
  } else if (typeof zoneValue !== "string") {
    issues.push({ field: "schedule.timezone", message: mustBeString(zoneValue) });
  } else {
    const zone = checkNewTimeZone(zoneValue);
    if (zone.ok) timezone = zone.name;
    else issues.push({ field: "schedule.timezone", message: zone.message });
  }

  if (expression === undefined || timezone === undefined) return { ok: false, issues };
  return { ok: true, schedule: { cron: expression, timezone } };
}

function parseEverySpec(everyValue: unknown, startValue: unknown, minIntervalMs: number): Parsed {
  const issues: FieldIssue[] = [];
  let every: string | undefined;
  let startAt: string | undefined;

  if (typeof everyValue !== "string") {
    issues.push({ field: "schedule.every", message: mustBeString(everyValue) });
  } else {
    const duration = parseEvery(everyValue);
    if (!duration.ok) {
      issues.push({ field: "schedule.every", message: duration.message });
    } else if (duration.ms < minIntervalMs) {
      issues.push({
        field: "schedule.every",
        message: `fires every ${formatMs(duration.ms)}, more often than the minimum interval of ${formatMs(minIntervalMs)}`,
      });
    } else if (duration.ms > LAST_STORABLE_MS - FIRST_STORABLE_MS) {
      // Shorter intervals that still outrun year 9999 from a late startAt end at their last
      // storable occurrence instead; this one could never have a second.
      issues.push({
        field: "schedule.every",
        message: `is longer than the whole storable range of instants (${STORABLE_RANGE_TEXT}), so it could never run twice: use a runAt schedule for a single run; got "${everyValue}"`,
      });
    } else {
      every = everyValue;
    }
  }

  if (startValue !== undefined) {
    if (typeof startValue !== "string") {
      issues.push({ field: "schedule.startAt", message: mustBeString(startValue) });
    } else {
      const instant = storableInstant(startValue);
      if (instant.ok) startAt = new Date(instant.ms).toISOString();
      else issues.push({ field: "schedule.startAt", message: instant.message });
    }
  }

  if (every === undefined || issues.length > 0) return { ok: false, issues };
  return { ok: true, schedule: startAt === undefined ? { every } : { every, startAt } };
}

function parseAfter(value: unknown): Parsed {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    return failure(
      "schedule.after",
      `must be an object {"jobs": ["<job id>", …], "on": "success" | "failure" | "completion"}; got ${describe(value)}`,
    );
  }
  const record = value as Readonly<Record<string, unknown>>;
  const issues: FieldIssue[] = Object.keys(record)
    .filter((key) => key !== "jobs" && key !== "on")
    .map((key) => ({
      field: "schedule.after",
      message: `unknown key "${key}" (allowed: jobs, on)`,
    }));
  const jobs = record.jobs;
  if (!Array.isArray(jobs) || jobs.length === 0 || jobs.length > MAX_AFTER_JOBS) {
    issues.push({
      field: "schedule.after.jobs",
      message: `must be a list of 1 to ${MAX_AFTER_JOBS} job ids; got ${describe(jobs)}${Array.isArray(jobs) ? ` of ${jobs.length}` : ""}`,
    });
  } else {
    jobs.forEach((id, i) => {
      if (typeof id !== "string" || !JOB_ID_TEXT.test(id))
        issues.push({
          field: `schedule.after.jobs.${i}`,
          message: `must be a job id; got ${typeof id === "string" ? JSON.stringify(id) : describe(id)}`,
        });
    });
  }
  const on = record.on ?? "success";
  if (typeof on !== "string" || !AFTER_ON.includes(on as AfterOn)) {
    issues.push({
      field: "schedule.after.on",
      message: `must be one of ${AFTER_ON.join(", ")}; got ${typeof on === "string" ? JSON.stringify(on) : describe(on)}`,
    });
  }
  if (issues.length > 0) return { ok: false, issues };
  const ids = [...new Set(jobs as string[])].sort();
  return { ok: true, schedule: { after: { jobs: ids, on: on as AfterOn } } };
}

function instantOrThrow(field: string, value: string): string {
  const instant = parseInstant(value);
  if (!instant.ok) throw new ValidationError([{ field, message: instant.message }]);
  return new Date(instant.ms).toISOString();
}

/**
 * Why a key does not belong in a `kind` schedule. Another kind's field (a `timezone` beside a
 * `runAt`, written to mean UTC) is answered with the kind that takes it, and why this one takes
 * none: "unknown" would send the writer looking for a misspelling.
 */
function unknownKeyMessage(key: string, kind: ScheduleKind): string {
  const partner = PARTNER_FIELDS.get(key);
  if (partner === undefined) {
    const allowed = ALLOWED_KEYS[kind].join(", ");
    return `unknown key "${key}" for a ${kind} schedule (allowed: ${allowed})`;
  }
  const why = partner.whyNone[kind];
  const reason = why === undefined ? "" : `; ${why}`;
  return `only ${partner.takenBy} takes a ${key} (${partner.shape})${reason}`;
}

const NO_TIMES = "an after schedule runs when its upstream runs end, at no time of its own";

/**
 * The fields that go with one kind's field, which kind that is, and why the others take none. A
 * Map: the key is the caller's, and "constructor" must not find Object's.
 */
const PARTNER_FIELDS: ReadonlyMap<
  string,
  { takenBy: string; shape: string; whyNone: Partial<Record<ScheduleKind, string>> }
> = new Map(
  Object.entries({
    timezone: {
      takenBy: "a cron schedule",
      shape: '{"cron": "<expression>", "timezone": "<IANA zone>"}',
      whyNone: {
        runAt:
          'a runAt\'s instant carries its own offset: "Z" for UTC, or e.g. "2026-03-08T09:00:00-05:00"',
        every: "an every schedule counts elapsed time, which time zones and DST do not change",
        after: NO_TIMES,
      },
    },
    startAt: {
      takenBy: "an every schedule",
      shape: '{"every": "<ISO-8601 duration>", "startAt"?: "<ISO-8601 date-time>"}',
      whyNone: {
        runAt: "a runAt schedule runs once, at its runAt",
        cron: "a cron schedule runs at the times its expression matches from its creation on",
        after: NO_TIMES,
      },
    },
  }),
);

function failure(field: string, message: string): Parsed {
  return { ok: false, issues: [{ field, message }] };
}

function mustBeString(value: unknown): string {
  return `must be a string; got ${describe(value)}`;
}

function describe(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  if (value === undefined) return "nothing";
  const type = typeof value;
  return type === "object" ? "an object" : `a ${type}`;
}

/** Largest unit that divides evenly, so messages read "1 s", "90 s", "15 min", "500 ms". */
function formatMs(ms: number): string {
  if (ms % 3_600_000 === 0) return `${ms / 3_600_000} h`;
  if (ms % 60_000 === 0) return `${ms / 60_000} min`;
  if (ms % 1_000 === 0) return `${ms / 1_000} s`;
  return `${ms} ms`;
}
