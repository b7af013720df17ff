import { ValidationError } from "../validation.js";
import { civilFromDays, DAY_MS, SECOND_MS } from "./calendar.js";
import { compileCron } from "./cron.js";
import { type CompiledCron, findWall } from "./cron-search.js";
import { parseEvery } from "./duration.js";
import { LAST_STORABLE_MS, parseInstant } from "./instant.js";
import type { ScheduleSpec } from "./types.js";
import { checkTimeZone, type ZoneRules, zoneRules } from "./zone.js";

type Compiled =
  | { readonly kind: "runAt"; readonly at: number }
  | { readonly kind: "every"; readonly start: number | undefined; readonly interval: number }
  | { readonly kind: "cron"; readonly cron: CompiledCron; readonly zone: ZoneRules }
  | { readonly kind: "after" };

// Far enough that every satisfiable expression fires at least once (the calendar repeats every
// 400 years). Wall times run into year 10000, since east of UTC its first hours are still
// instants of year 9999; anything past the last storable instant is then cut off.
const SEARCH_YEARS = 401;
const MAX_WALL_YEAR = 10_000;

/**
 * Smallest occurrence strictly after `after`, or null when there is none: a past `runAt`, or
 * a schedule whose next occurrence would fall after the last storable instant
 * (9999-12-31T23:59:59.999Z), where every schedule ends.
 * Cron occurrences are computed on the wall clock of the schedule's zone and returned in UTC:
 * a wall time skipped by a spring-forward jump runs once at the same offset into the new hour
 * (02:30 → 03:30 when 02:00 jumps to 03:00); a wall time that happens twice runs the first time
 * only, unless the hour field covers every hour: then the expression keeps firing through the
 * repeated stretch in real time, as Vixie cron does, so a sub-hourly job has no hole on the
 * fall-back night; occurrences that land on the same instant are one occurrence. `every` needs
 * a normalized spec (with `startAt`).
 */
export function nextOccurrence(spec: ScheduleSpec, after: Date): Date | null {
  const next = nextFrom(compile(spec), instantOf("after", after));
  return next === null ? null : new Date(next);
}

/**
 * All occurrences t with from <= t <= to, ascending, at most `limit` of them.
 */
export function occurrences(spec: ScheduleSpec, from: Date, to: Date, limit: number): Date[] {
  const compiled = compile(spec);
  const lo = instantOf("from", from);
  const hi = instantOf("to", to);
  const out: Date[] = [];
  const max = Math.floor(limit);
  let t = nextFrom(compiled, lo - 1);
  while (t !== null && t <= hi && out.length < max) {
    out.push(new Date(t));
    t = nextFrom(compiled, t);
  }
  return out;
}

/**
 * The first occurrence of a newly created job, or null past the last storable instant. `runAt`
 * is returned as is, even in the past:
 * the caller decides whether that is a misfire or a rejection. `cron` and `every` give the
 * first occurrence at or after `now` truncated to the second, so a job created at 09:00:00.400
 * with "0 9 * * *" still runs today, and `every` without `startAt` starts right away.
 */
export function firstOccurrence(spec: ScheduleSpec, now: Date): Date | null {
  const compiled = compile(spec);
  const nowSecond = Math.floor(instantOf("now", now) / SECOND_MS) * SECOND_MS;
  if (compiled.kind === "runAt") return storable(compiled.at);
  if (compiled.kind === "every" && compiled.start === undefined) return storable(nowSecond);
  const next = nextFrom(compiled, nowSecond - 1);
  return next === null ? null : new Date(next);
}

function storable(at: number): Date | null {
  return at <= LAST_STORABLE_MS ? new Date(at) : null;
}

/** The next occurrence, or null when there is none up to the last storable instant. */
function nextFrom(c: Compiled, after: number): number | null {
  if (after >= LAST_STORABLE_MS) return null;
  const next = nextUnbounded(c, after);
  return next !== null && next <= LAST_STORABLE_MS ? next : null;
}

function nextUnbounded(c: Compiled, after: number): number | null {
  switch (c.kind) {
    case "after":
      return null;
    case "runAt":
      return c.at > after ? c.at : null;
    case "every": {
      if (c.start === undefined) {
        throw new Error(
          "an every schedule without startAt has no fixed occurrences: normalizeSchedule it first",
        );
      }
      if (after < c.start) return c.start;
      return c.start + (Math.floor((after - c.start) / c.interval) + 1) * c.interval;
    }
    case "cron": {
      const first = nextCron(c.cron, c.zone, after);
      if (c.cron.hours.length < 24) return first;
      const repeat = nextInRepeatedStretch(
        c.cron,
        c.zone,
        Math.floor(after / SECOND_MS) * SECOND_MS + SECOND_MS,
      );
      return repeat !== null && (first === null || repeat < first) ? repeat : first;
    }
  }
}

/**
 * For an expression whose hour field covers every hour: the earliest occurrence >= `target` on
 * the second pass through a wall-clock stretch that a fall-back repeats, or null. The second pass
 * of a stretch [at, at + shift) shows the wall times [at + after, at + before) once more, at the
 * new offset. Only stretches whose first pass began before `target` can give one: while the whole
 * first pass is still ahead, any match in the stretch comes earlier on the first pass.
 */
function nextInRepeatedStretch(cron: CompiledCron, zone: ZoneRules, target: number): number | null {
  let best: number | null = null;
  for (const t of zone.transitionsIn(target - 2 * DAY_MS, target + 2 * DAY_MS)) {
    const shift = t.before - t.after;
    if (shift <= 0 || target <= t.at - shift || target >= t.at + shift) continue;
    const stretchEnd = t.at + t.before;
    const from = Math.max(t.at, target) + t.after;
    const wall = findWall(cron, from, civilFromDays(Math.floor(stretchEnd / DAY_MS)).year);
    if (wall === null || wall >= stretchEnd) continue;
    const instant = wall - t.after;
    if (best === null || instant < best) best = instant;
  }
  return best;
}

function nextCron(cron: CompiledCron, zone: ZoneRules, after: number): number | null {
  const target = Math.floor(after / SECOND_MS) * SECOND_MS + SECOND_MS;

  // Wall times whose instant is >= target begin at target's own wall time, except right after a
  // transition: after a spring-forward jump the skipped wall times map to instants in
  // [jump, jump + gap), so some of them may still be ahead; after a fall-back the repeated wall
  // times already ran on the first pass, so the search resumes where they end.
  let start = target + zone.offsetAt(target);
  const recent = zone.transitionsIn(target - 2 * DAY_MS, target).at(-1);
  if (recent !== undefined && target < recent.at + Math.abs(recent.after - recent.before)) {
    start = recent.after > recent.before ? target + recent.before : recent.at + recent.before;
  }

  const maxYear = Math.min(
    civilFromDays(Math.floor(start / DAY_MS)).year + SEARCH_YEARS,
    MAX_WALL_YEAR,
  );
  let best: number | null = null;
  let stopWall = Number.POSITIVE_INFINITY;
  let wall = findWall(cron, start, maxYear);
  while (wall !== null && wall < stopWall) {
    const resolved = zone.resolveWall(wall);
    const gap = resolved.gap;
    if (gap === undefined) {
      if (resolved.instant >= target) {
        if (best === null || resolved.instant < best) best = resolved.instant;
        break;
      }
      // Only reachable between a jump and target; wall and instant advance together there.
      wall = findWall(cron, wall + Math.max(SECOND_MS, target - resolved.instant), maxYear);
    } else {
      if (resolved.instant >= target && (best === null || resolved.instant < best)) {
        best = resolved.instant;
      }
      // Later skipped wall times map later still; only existing wall times less than one gap
      // after this one can land earlier, so look at the first of those and stop.
      stopWall = Math.min(stopWall, wall + (gap.after - gap.before));
      const nextExisting = Math.max(wall + SECOND_MS, gap.at + gap.after, target + gap.after);
      wall = findWall(cron, nextExisting, maxYear);
    }
  }
  return best;
}

const compiledCache = new Map<string, Compiled>();
const CACHE_LIMIT = 1_000;

function compile(spec: ScheduleSpec): Compiled {
  const key = JSON.stringify(spec);
  const cached = compiledCache.get(key);
  if (cached !== undefined) return cached;
  const compiled = compileUncached(spec);
  if (compiledCache.size >= CACHE_LIMIT) compiledCache.clear();
  compiledCache.set(key, compiled);
  return compiled;
}

function compileUncached(spec: ScheduleSpec): Compiled {
  if ("after" in spec) return { kind: "after" };
  if ("runAt" in spec) {
    return { kind: "runAt", at: instantOrThrow("schedule.runAt", spec.runAt) };
  }
  if ("cron" in spec) {
    const cron = compileCron(spec.cron);
    if (!cron.ok) throw new ValidationError([{ field: "schedule.cron", message: cron.message }]);
    const zone = checkTimeZone(spec.timezone);
    if (!zone.ok)
      throw new ValidationError([{ field: "schedule.timezone", message: zone.message }]);
    return { kind: "cron", cron: cron.cron, zone: zoneRules(zone.name) };
  }
  const interval = parseEvery(spec.every);
  if (!interval.ok) {
    throw new ValidationError([{ field: "schedule.every", message: interval.message }]);
  }
  const start =
    spec.startAt === undefined ? undefined : instantOrThrow("schedule.startAt", spec.startAt);
  return { kind: "every", start, interval: interval.ms };
}

function instantOrThrow(field: string, value: string): number {
  const instant = parseInstant(value);
  if (!instant.ok) throw new ValidationError([{ field, message: instant.message }]);
  return instant.ms;
}

function instantOf(name: string, date: Date): number {
  const ms = date.getTime();
  if (Number.isNaN(ms)) throw new RangeError(`${name} is an invalid Date`);
  return ms;
}
