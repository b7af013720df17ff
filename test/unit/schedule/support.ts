/**
 * Independent references for the schedule tests. They use luxon's zone offsets directly (not
 * the core's transition tables) and the Temporal-style "possible instants" resolution, so an
 * error in the core's own DST bookkeeping does not cancel out against the tests.
 */
import fc from "fast-check";
import { DateTime, IANAZone } from "luxon";
import { compileCron } from "../../../shared/schedule/cron.js";
import { findWall } from "../../../shared/schedule/cron-search.js";

const ZONES = [
  "America/New_York",
  "Europe/London",
  "Europe/Dublin",
  "Australia/Lord_Howe",
  "Asia/Kathmandu",
  "America/Santiago",
  "Pacific/Apia",
  "Pacific/Chatham",
  "UTC",
] as const;
type Zone = (typeof ZONES)[number];

export const MINUTE = 60_000;
export const HOUR = 3_600_000;
export const DAY = 86_400_000;

const iso = (d: Date): string => d.toISOString();
export const isoList = (ds: readonly Date[]): string[] => ds.map(iso);

/** Offset in ms at an instant, straight from luxon. */
export function luxonOffset(zone: string, instant: number): number {
  return Math.round(IANAZone.create(zone).offset(instant) * MINUTE);
}

/** Local wall-clock label of an instant, e.g. "2026-03-08 03:30". */
export function label(zone: string, instant: number, format = "yyyy-LL-dd HH:mm"): string {
  return DateTime.fromMillis(instant, { zone }).toFormat(format);
}

/**
 * Every instant that shows a wall time, ascending: one normally, two in a stretch a fall-back
 * repeats, none in a spring-forward gap. The candidates are the wall time read with the offsets
 * a day before and a day after, as Temporal finds "possible instants".
 */
export function instantsShowing(zone: string, wall: number): number[] {
  const before = luxonOffset(zone, wall - DAY);
  const after = luxonOffset(zone, wall + DAY);
  return [...new Set([wall - before, wall - after])]
    .filter((u) => u + luxonOffset(zone, u) === wall)
    .sort((a, b) => a - b);
}

/**
 * The design's rule for one wall time: of the instants that really show it the earliest wins
 * (fall back → first time); if none does, the time was skipped and is read with the earlier
 * offset (spring forward → same offset into the new hour).
 */
export function referenceResolve(zone: string, wall: number): number {
  const candidates = instantsShowing(zone, wall);
  return candidates[0] ?? wall - luxonOffset(zone, wall - DAY);
}

/**
 * The rule for an expression whose hour field covers every hour: a repeated wall time runs each
 * time it is shown (in real time, as Vixie cron does); a skipped one as in {@link referenceResolve}.
 */
function referenceResolveEveryHour(zone: string, wall: number): number[] {
  const candidates = instantsShowing(zone, wall);
  return candidates.length > 0 ? candidates : [referenceResolve(zone, wall)];
}

/**
 * Cheaper than {@link label} for the property tests: the local wall time of an instant as an
 * ISO-like string cut to `length` characters ("2026-03-08T03:30" at 16).
 */
export function wallLabel(zone: string, instant: number, length = 16): string {
  return new Date(instant + luxonOffset(zone, instant)).toISOString().slice(0, length);
}

/** Wall ms (local time encoded as UTC) of a local date and time. */
export function wallOf(year: number, month: number, day: number, hour = 0, minute = 0): number {
  return Date.UTC(year, month - 1, day, hour, minute);
}

const transitionCache = new Map<string, number[]>();

/**
 * Instants in `year` at which `zone` changes offset (found by sampling luxon weekly, minute
 * precision). Only used to aim the arbitraries, so a missed transition would cost coverage, not
 * correctness.
 */
export function transitionsOf(zone: string, year: number): number[] {
  const key = `${zone}:${year}`;
  const cached = transitionCache.get(key);
  if (cached !== undefined) return cached;
  const out: number[] = [];
  const end = Date.UTC(year + 1, 0, 1);
  let left = Date.UTC(year, 0, 1);
  let leftOffset = luxonOffset(zone, left);
  for (let sample = left + 7 * DAY; left < end; sample = Math.min(sample + 7 * DAY, end)) {
    const sampleOffset = luxonOffset(zone, sample);
    if (sampleOffset !== leftOffset) {
      let lo = left;
      let hi = sample;
      while (hi - lo > MINUTE) {
        const mid = lo + Math.floor((hi - lo) / (2 * MINUTE)) * MINUTE;
        if (luxonOffset(zone, mid) === leftOffset) lo = mid;
        else hi = mid;
      }
      out.push(hi);
    }
    left = sample;
    leftOffset = sampleOffset;
  }
  transitionCache.set(key, out);
  return out;
}

/** Zones with the instant the Apia skip happened, so arbitraries can aim at it. */
const APIA_SKIP = Date.parse("2011-12-30T10:00:00Z");

const zoneArb = fc.constantFrom(...ZONES);

/**
 * An instant in 2010-2040; about half the time within a few hours of one of the zone's
 * transitions, and now and then right at the Apia skip, where the rules actually matter.
 */
function instantNear(zone: Zone): fc.Arbitrary<number> {
  const anywhere = fc
    .integer({ min: Date.UTC(2010, 0, 1) / MINUTE, max: Date.UTC(2040, 11, 31) / MINUTE })
    .map((m) => m * MINUTE);
  const nearTransition = fc
    .record({
      year: fc.integer({ min: 2010, max: 2040 }),
      pick: fc.nat(),
      jitter: fc.integer({ min: -8 * 60, max: 4 * 60 }),
    })
    .map(({ year, pick, jitter }) => {
      const ts = transitionsOf(zone, year);
      const base = ts.length === 0 ? Date.UTC(year, 5, 1) : (ts[pick % ts.length] ?? 0);
      return base + jitter * MINUTE;
    });
  if (zone !== "Pacific/Apia") {
    return fc.oneof({ arbitrary: anywhere, weight: 1 }, { arbitrary: nearTransition, weight: 1 });
  }
  const nearSkip = fc.integer({ min: -36 * 60, max: 12 * 60 }).map((m) => APIA_SKIP + m * MINUTE);
  return fc.oneof(
    { arbitrary: anywhere, weight: 2 },
    { arbitrary: nearTransition, weight: 1 },
    { arbitrary: nearSkip, weight: 2 },
  );
}

/** A zone and an instant near something interesting in it. */
export const zonedInstantArb = zoneArb.chain((zone) =>
  instantNear(zone).map((instant) => ({ zone, instant })),
);

const sortedUnique = (xs: readonly number[]): number[] => [...new Set(xs)].sort((a, b) => a - b);

/** A small set of values from [min, max], written as a cron list. */
function listArb(min: number, max: number, maxSize: number): fc.Arbitrary<string> {
  return fc
    .uniqueArray(fc.integer({ min, max }), { minLength: 1, maxLength: maxSize })
    .map((xs) => sortedUnique(xs).join(","));
}

/**
 * Sparse cron expressions (at most a few dozen matches a day) mixing lists, ranges and steps,
 * sometimes with a seconds field, so that a brute-force reference stays cheap.
 */
export const sparseCronArb: fc.Arbitrary<string> = fc
  .record({
    seconds: fc.option(listArb(0, 59, 2), { nil: undefined }),
    minutes: fc.oneof(
      listArb(0, 59, 3),
      fc.constantFrom("*/15", "*/20", "*/30", "0", "30", "15,45", "5-10/5"),
    ),
    hours: fc.oneof(listArb(0, 23, 6), fc.constantFrom("*", "0-3", "1-3", "*/6", "22-23", "0,23")),
    dayOfMonth: fc.constantFrom("*", "*", "*", "1-15", "L", "*/2"),
    month: fc.constantFrom("*", "*", "*", "1-6", "3,4,9,10,11,12"),
    dayOfWeek: fc.constantFrom("*", "*", "*", "MON-FRI", "0,6", "SUN"),
  })
  .filter(({ minutes, hours }) => !(hours === "*" && minutes.split(",").length > 2))
  .map(({ seconds, minutes, hours, dayOfMonth, month, dayOfWeek }) =>
    [seconds, minutes, hours, dayOfMonth, month, dayOfWeek]
      .filter((f) => f !== undefined)
      .join(" "),
  );

/**
 * Brute force: every wall time the expression matches near the window, each resolved with
 * {@link referenceResolve} (or {@link referenceResolveEveryHour} when the hour field covers every
 * hour), then sorted and de-duplicated. Field matching is the core's own (checked against
 * cron-parser separately); the DST handling is entirely the reference's.
 */
export function referenceOccurrences(
  cron: string,
  zone: string,
  from: number,
  to: number,
): number[] {
  const compiled = compileCron(cron);
  if (!compiled.ok) throw new Error(compiled.message);
  const out: number[] = [];
  // A wall time lands at itself minus an offset the zone is at around then, so only wall times
  // in [from + smallest offset, to + largest offset] can land in the window. Sampling two days
  // either side sees both offsets of any single transition nearby (transitions in these zones
  // are months apart).
  const offsets = [from - 2 * DAY, from, to, to + 2 * DAY].map((t) => luxonOffset(zone, t));
  const lo = Math.floor((from + Math.min(...offsets)) / 1000) * 1000;
  const hi = to + Math.max(...offsets);
  const everyHour = compiled.cron.hours.length === 24;
  for (let w = findWall(compiled.cron, lo, 9999); w !== null && w <= hi; ) {
    const landed = everyHour ? referenceResolveEveryHour(zone, w) : [referenceResolve(zone, w)];
    out.push(...landed.filter((u) => u >= from && u <= to));
    w = findWall(compiled.cron, w + 1000, 9999);
  }
  return sortedUnique(out);
}
