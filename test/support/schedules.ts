/**
 * Arbitraries for schedule objects as a tenant might send them: mostly plausible, often at the
 * edges (intervals up to and past the storable range, instants near 1970 and 9999 with odd
 * offsets, crons naming rare or impossible dates, zones far east and west of UTC), sometimes
 * malformed. Shared by the schedule core's property tests and the API's.
 */
import fc from "fast-check";
import { FIRST_STORABLE_MS, LAST_STORABLE_MS } from "../../shared/schedule/index.js";

export type JsonValue =
  | null
  | boolean
  | number
  | string
  | JsonValue[]
  | { [key: string]: JsonValue };

const ZONES = [
  "UTC",
  "America/New_York",
  "Europe/Berlin",
  "Australia/Lord_Howe",
  "America/Santiago",
  "Pacific/Apia",
  "Pacific/Kiritimati",
  "Etc/GMT+12",
  "Etc/GMT-14",
  "Asia/Tokyo",
  "Pacific/Chatham",
] as const;

/** Wall-clock instants near the ends of the storable range, and anywhere in it. */
export const instantMsArb: fc.Arbitrary<number> = fc.oneof(
  fc.integer({ min: FIRST_STORABLE_MS, max: LAST_STORABLE_MS }),
  fc.integer({ min: LAST_STORABLE_MS - 3 * 86_400_000, max: LAST_STORABLE_MS }),
  fc.integer({ min: FIRST_STORABLE_MS, max: FIRST_STORABLE_MS + 3 * 86_400_000 }),
  fc.integer({ min: Date.UTC(2020, 0, 1), max: Date.UTC(2040, 0, 1) }),
);

const pad = (n: number, width = 2) => String(n).padStart(width, "0");

/** An instant written as a tenant might: any four-digit year, seconds and fractions, any offset. */
const instantTextArb: fc.Arbitrary<string> = fc.oneof(
  { weight: 3, arbitrary: instantMsArb.map((ms) => new Date(ms).toISOString()) },
  {
    weight: 3,
    arbitrary: fc
      .record({
        ms: instantMsArb,
        offsetMinutes: fc.oneof(
          fc.integer({ min: -23 * 60 - 59, max: 23 * 60 + 59 }),
          fc.constantFrom(-1, 1, -300, 330, 765, 840),
        ),
        fraction: fc.constantFrom("", ".5", ".999", ".123456789"),
      })
      .map(({ ms, offsetMinutes, fraction }) => {
        // The same wall time read at another offset: may move it out of the storable range.
        const wall = new Date(ms).toISOString().slice(0, 19);
        const sign = offsetMinutes < 0 ? "-" : "+";
        const abs = Math.abs(offsetMinutes);
        return `${wall}${fraction}${sign}${pad(Math.floor(abs / 60))}:${pad(abs % 60)}`;
      }),
  },
  {
    weight: 1,
    arbitrary: fc.constantFrom(
      "9999-12-31T23:59:59.999Z",
      "9999-12-31T23:59:59.999-00:01",
      "9999-12-31T19:00:00-05:00",
      "9999-12-31T18:59:59-05:00",
      "1970-01-01T00:00:00+00:01",
      "1970-01-01T00:00:00Z",
      "0001-01-01T00:00:00Z",
      "2028-02-29T12:00:00Z",
      "2027-02-29T12:00:00Z",
    ),
  },
);

const durationArb: fc.Arbitrary<string> = fc.oneof(
  fc.constantFrom(
    "P600000W",
    "P400000W",
    "P418986W",
    "P418985W",
    "P2932897D",
    "P2932896D",
    "PT70389528H",
    "P99999999999999999W",
    "PT1S",
    "PT0.5S",
    "PT15M",
    "P1D",
    "P1M",
    "PT0S",
  ),
  fc
    .tuple(
      fc.oneof(fc.integer({ min: 1, max: 100 }), fc.integer({ min: 1, max: 30_000_000 })),
      fc.constantFrom("W", "D", "TH", "TM", "TS"),
    )
    .map(([n, unit]) => (unit.startsWith("T") ? `PT${n}${unit.slice(1)}` : `P${n}${unit}`)),
  fc
    .tuple(fc.integer({ min: 0, max: 500_000 }), fc.integer({ min: 0, max: 23 }))
    .map(([w, h]) => `P${w}WT${h}H`),
);

const cronArb: fc.Arbitrary<string> = fc.oneof(
  fc.constantFrom(
    "0 0 29 2 *",
    "0 0 30 2 *",
    "0 0 31 4 *",
    "0 0 29 2 1",
    "59 23 31 12 *",
    "0 0 1 1 *",
    "* * * * * *",
    "*/10 * * * * *",
    "*/15 * * * *",
    "0 * * * *",
    "0 0 L 2 *",
    "0 0 * * 5L",
    "0 0 * * MON#5",
    "0 0 29 2 MON#5",
    "30 2 * * *",
    "59 59 23 31 12 *",
    "0 0 1 1 * 2030",
  ),
  fc
    .record({
      second: fc.option(fc.constantFrom("0", "*/10", "59", "*"), { nil: undefined }),
      minute: fc.constantFrom("0", "*/15", "59", "*", "30", "0,30"),
      hour: fc.constantFrom("*", "0", "23", "1-3", "*/6", "0-23"),
      dom: fc.constantFrom("*", "1", "29", "30", "31", "L", "28-31"),
      month: fc.constantFrom("*", "2", "12", "1", "4,6,9,11"),
      dow: fc.constantFrom("*", "*", "0", "SAT", "MON#5", "5L", "1-5"),
    })
    .map(({ second, minute, hour, dom, month, dow }) =>
      [second, minute, hour, dom, month, dow].filter((f) => f !== undefined).join(" "),
    ),
);

/** A schedule object as a request body might carry it: valid or not, often at the edges. */
export const scheduleInputArb: fc.Arbitrary<JsonValue> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc
      .record({ every: durationArb, startAt: instantTextArb }, { requiredKeys: ["every"] })
      .map((s): JsonValue => s),
  },
  {
    weight: 4,
    arbitrary: fc
      .record({ cron: cronArb, timezone: fc.constantFrom(...ZONES) })
      .map((s): JsonValue => s),
  },
  { weight: 2, arbitrary: instantTextArb.map((runAt): JsonValue => ({ runAt })) },
  {
    weight: 1,
    arbitrary: fc
      .tuple(durationArb, instantTextArb, instantTextArb)
      .map(([every, startAt, endAt]): JsonValue => ({ every, startAt, endAt })),
  },
  {
    weight: 1,
    arbitrary: fc
      .tuple(cronArb, instantTextArb)
      .map(([cron, endAt]): JsonValue => ({ cron, timezone: "UTC", endAt })),
  },
);
