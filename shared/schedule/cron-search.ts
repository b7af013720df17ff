import { civilFromDays, DAY_MS, daysFromCivil, daysInMonth, weekdayOfDays } from "./calendar.js";

/**
 * A cron expression reduced to lookup tables. cron-parser only parses and expands the fields;
 * the search over wall-clock time is ours, so the DST rules can be applied on top of it (its own
 * iterator repeats some fall-back hours and not others).
 */
export interface CompiledCron {
  /** The expression with runs of whitespace collapsed; this is what gets stored. */
  readonly expression: string;
  readonly seconds: readonly number[];
  readonly minutes: readonly number[];
  readonly hours: readonly number[];
  readonly months: readonly number[];
  /** `next*[v]` = smallest allowed value >= v, or -1; one slot past the field's range stays -1. */
  readonly nextSecond: Int8Array;
  readonly nextMinute: Int8Array;
  readonly nextHour: Int8Array;
  readonly nextMonth: Int8Array;
  readonly dom: readonly boolean[];
  readonly domLast: boolean;
  readonly domWildcard: boolean;
  readonly dow: readonly boolean[];
  /** Weekdays that match on their last occurrence in the month (`5L`). */
  readonly dowLast: readonly boolean[];
  readonly dowHasLast: boolean;
  /** `#n` occurrence within the month, 0 when unused. */
  readonly nth: number;
  readonly dowWildcard: boolean;
}

/**
 * Day matching exactly as cron-parser 5.10 does it: when both day-of-month and day-of-week are
 * restricted a day matches either (standard cron OR); "restricted" means the raw field is not a
 * bare `*`, so `1-31` or a stepped `*` counts as restricted.
 */
function cronDayMatches(c: CompiledCron, day: number, dim: number, weekday: number): boolean {
  const domMatch = c.dom[day] === true || (c.domLast && day === dim);
  const dowMatch =
    (c.dow[weekday] === true && (c.nth <= 0 || Math.ceil(day / 7) === c.nth)) ||
    (c.dowHasLast && day + 7 > dim && c.dowLast[weekday] === true);
  if (!c.domWildcard && !c.dowWildcard) return domMatch || dowMatch;
  if (!c.dowWildcard) return dowMatch;
  return domMatch;
}

/**
 * Every (month, leap year or not, weekday of the 1st) combination occurs in the 400-year
 * Gregorian cycle, and day matching depends on nothing else, so visiting each combination once
 * decides questions about all years.
 */
function someMonthShape(
  c: CompiledCron,
  visit: (month: number, dim: number, firstWeekday: number, leap: boolean) => boolean,
): boolean {
  for (const month of c.months) {
    for (const leap of [false, true]) {
      const dim = daysInMonth(leap ? 2000 : 2001, month);
      for (let w = 0; w < 7; w++) if (visit(month, dim, w, leap)) return true;
    }
  }
  return false;
}

export function isFeasible(c: CompiledCron): boolean {
  return someMonthShape(c, (_m, dim, first) => {
    for (let d = 1; d <= dim; d++) if (cronDayMatches(c, d, dim, (first + d - 1) % 7)) return true;
    return false;
  });
}

function consecutiveDaysPossible(c: CompiledCron): boolean {
  return someMonthShape(c, (month, dim, first, leap) => {
    for (let d = 1; d < dim; d++) {
      if (
        cronDayMatches(c, d, dim, (first + d - 1) % 7) &&
        cronDayMatches(c, d + 1, dim, (first + d) % 7)
      ) {
        return true;
      }
    }
    const following = (month % 12) + 1;
    if (!c.months.includes(following)) return false;
    const lastWeekday = (first + dim - 1) % 7;
    const followingDim = daysInMonth(leap ? 2000 : 2001, following);
    return (
      cronDayMatches(c, dim, dim, lastWeekday) &&
      cronDayMatches(c, 1, followingDim, (lastWeekday + 1) % 7)
    );
  });
}

/**
 * Smallest distance in ms between two consecutive wall-clock times the expression matches.
 * DST shifts can bring two occurrences closer on a transition day (e.g. a 30-minute gap at
 * Lord Howe interleaves shifted and unshifted times); that is accepted, the check is about the
 * schedule as written (a jitter window is cut to the real gap on such a night: jitter.ts).
 */
export function cronMinGapMs(c: CompiledCron): number {
  const s = c.seconds;
  const m = c.minutes;
  const h = c.hours;
  const first = (xs: readonly number[]): number => xs[0] ?? 0;
  const last = (xs: readonly number[]): number => xs[xs.length - 1] ?? 0;
  let best = Number.POSITIVE_INFINITY;
  for (let i = 1; i < s.length; i++) best = Math.min(best, (s[i] ?? 0) - (s[i - 1] ?? 0));
  const secondSpan = last(s) - first(s);
  for (let i = 1; i < m.length; i++) {
    best = Math.min(best, ((m[i] ?? 0) - (m[i - 1] ?? 0)) * 60 - secondSpan);
  }
  const minuteSpan = last(m) * 60 + last(s) - (first(m) * 60 + first(s));
  for (let i = 1; i < h.length; i++) {
    best = Math.min(best, ((h[i] ?? 0) - (h[i - 1] ?? 0)) * 3600 - minuteSpan);
  }
  const firstTime = first(h) * 3600 + first(m) * 60 + first(s);
  const lastTime = last(h) * 3600 + last(m) * 60 + last(s);
  const wrap = 86_400 - (lastTime - firstTime);
  if (wrap < best) best = consecutiveDaysPossible(c) ? wrap : Math.min(best, wrap + 86_400);
  return best * 1000;
}

/**
 * Smallest wall time >= `fromWall` (whole seconds, wall ms) that the expression matches, or null
 * when there is none up to the end of `maxYear`. Skips whole months, days, hours and minutes, so
 * a yearly expression costs a few dozen steps, not a scan.
 */
export function findWall(c: CompiledCron, fromWall: number, maxYear: number): number | null {
  const startDays = Math.floor(fromWall / DAY_MS);
  const sod = Math.floor((fromWall - startDays * DAY_MS) / 1000);
  let { year, month, day } = civilFromDays(startDays);
  let hour = Math.floor(sod / 3600);
  let minute = Math.floor(sod / 60) % 60;
  let second = sod % 60;
  for (;;) {
    if (year > maxYear) return null;
    const nextMonth = c.nextMonth[month] ?? -1;
    if (nextMonth !== month) {
      if (nextMonth < 0) {
        year++;
        month = c.nextMonth[1] ?? 1;
      } else {
        month = nextMonth;
      }
      day = 1;
      hour = 0;
      minute = 0;
      second = 0;
      continue;
    }
    const dim = daysInMonth(year, month);
    if (day > dim) {
      month++;
      day = 1;
      hour = 0;
      minute = 0;
      second = 0;
      continue;
    }
    const days = daysFromCivil(year, month, day);
    if (!cronDayMatches(c, day, dim, weekdayOfDays(days))) {
      day++;
      hour = 0;
      minute = 0;
      second = 0;
      continue;
    }
    const nextHour = c.nextHour[hour] ?? -1;
    if (nextHour < 0) {
      day++;
      hour = 0;
      minute = 0;
      second = 0;
      continue;
    }
    if (nextHour !== hour) {
      hour = nextHour;
      minute = 0;
      second = 0;
    }
    const nextMinute = c.nextMinute[minute] ?? -1;
    if (nextMinute < 0) {
      hour++;
      minute = 0;
      second = 0;
      continue;
    }
    if (nextMinute !== minute) {
      minute = nextMinute;
      second = 0;
    }
    const nextSecond = c.nextSecond[second] ?? -1;
    if (nextSecond < 0) {
      minute++;
      second = 0;
      continue;
    }
    return days * DAY_MS + (hour * 3600 + minute * 60 + nextSecond) * 1000;
  }
}
