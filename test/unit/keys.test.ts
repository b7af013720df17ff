import fc from "fast-check";
import { decodeTime, isValid } from "ulid";
import { describe, expect, it } from "vitest";
import {
  bucketKey,
  bucketKeyForMinute,
  bucketsBetween,
  dueSortKey,
  isRunSortKey,
  MAX_BUCKET_RANGE_MINUTES,
  minuteOf,
  newJobId,
  occurrenceKey,
  parseDueSortKey,
  parseRunId,
  runId,
  runSortKey,
  shardOf,
  toStorageIso,
} from "../../shared/keys.js";
import { mulberry32 } from "../support/mulberry32.js";

const RUNS = { numRuns: 1000 };

const ulidArb = fc.stringMatching(/^[0-7][0-9A-HJKMNP-TV-Z]{25}$/);
const instantArb = fc.date({
  min: new Date("1970-01-01T00:00:00.000Z"),
  max: new Date("9999-12-31T23:59:59.999Z"),
  noInvalidDate: true,
});
const attemptArb = fc.integer({ min: 1, max: 9999 });

describe("shardOf", () => {
  it("is FNV-1a 32-bit: the published test vectors come out whole modulo 2^32", () => {
    expect(shardOf("", 2 ** 32)).toBe(0x811c9dc5);
    expect(shardOf("a", 2 ** 32)).toBe(0xe40c292c);
    expect(shardOf("foobar", 2 ** 32)).toBe(0xbf9cf968);
  });

  it("hashes UTF-8 bytes, not UTF-16 code units", () => {
    expect(shardOf("job-é", 2 ** 32)).toBe(0x42cbcbeb);
  });

  it("keeps the shards of stored ids (pinned: changing these orphans data)", () => {
    expect(shardOf("01ARZ3NDEKTSV4RRFFQ69G5FAV", 8)).toBe(0);
    expect(shardOf("01J9Z3V6K8N4QX2M7R5T0W1Y3B", 8)).toBe(7);
    expect(shardOf("7ZZZZZZZZZZZZZZZZZZZZZZZZZ", 8)).toBe(4);
    expect(shardOf("00000000000000000000000000", 8)).toBe(5);
  });

  it("spreads 10k ULIDs roughly evenly over 8 shards", () => {
    const random = mulberry32(42);
    const counts = new Array<number>(8).fill(0);
    const start = Date.parse("2026-01-01T00:00:00.000Z");
    for (let i = 0; i < 10_000; i++) {
      const id = newJobId(new Date(start + i * 997), random);
      const shard = shardOf(id, 8);
      counts[shard] = (counts[shard] ?? 0) + 1;
    }
    const expected = 10_000 / 8;
    for (const count of counts) {
      expect(Math.abs(count - expected)).toBeLessThan(expected * 0.1);
    }
    // Chi-square with 7 degrees of freedom; 24.32 is the p = 0.001 critical value.
    const chiSquare = counts.reduce((sum, count) => sum + (count - expected) ** 2 / expected, 0);
    expect(chiSquare).toBeLessThan(24.32);
  });

  it("always lands in [0, shardCount)", () => {
    fc.assert(
      fc.property(fc.string(), fc.integer({ min: 1, max: 1024 }), (id, count) => {
        const shard = shardOf(id, count);
        return Number.isInteger(shard) && shard >= 0 && shard < count;
      }),
      RUNS,
    );
  });

  it.each([0, -1, 1.5, Number.NaN])("refuses shard count %s", (count) => {
    expect(() => shardOf("x", count)).toThrow(RangeError);
  });
});

describe("minutes and buckets", () => {
  it("names the UTC minute and the bucket", () => {
    const at = new Date("2026-03-01T09:05:59.999Z");
    expect(minuteOf(at)).toBe("2026-03-01T09:05");
    expect(bucketKey(at, 3)).toBe("DUE#2026-03-01T09:05#3");
    expect(bucketKeyForMinute("2026-03-01T09:05", 0)).toBe("DUE#2026-03-01T09:05#0");
  });

  it("uses UTC whatever the offset the instant was written with", () => {
    expect(minuteOf(new Date("2026-03-01T10:05:00+01:00"))).toBe("2026-03-01T09:05");
  });

  it.each([
    ["negative shard", () => bucketKey(new Date(0), -1)],
    ["fractional shard", () => bucketKey(new Date(0), 1.5)],
    ["malformed minute", () => bucketKeyForMinute("2026-03-01 09:05", 0)],
    ["impossible minute", () => bucketKeyForMinute("2026-02-30T09:05", 0)],
    ["invalid date", () => minuteOf(new Date(Number.NaN))],
    ["five-digit year", () => minuteOf(new Date("+010000-01-01T00:00:00.000Z"))],
  ])("refuses a %s", (_name, build) => {
    expect(build).toThrow(RangeError);
  });

  it("lists the minutes between two instants, both ends inclusive", () => {
    expect(
      bucketsBetween(new Date("2025-12-31T23:58:30.000Z"), new Date("2026-01-01T00:01:00.000Z")),
    ).toEqual(["2025-12-31T23:58", "2025-12-31T23:59", "2026-01-01T00:00", "2026-01-01T00:01"]);
  });

  it("gives one minute when both instants share it, none when to precedes from", () => {
    const from = new Date("2026-03-01T09:05:10.000Z");
    expect(bucketsBetween(from, new Date("2026-03-01T09:05:50.000Z"))).toEqual([
      "2026-03-01T09:05",
    ]);
    expect(bucketsBetween(from, new Date("2026-03-01T09:04:59.999Z"))).toEqual([]);
  });

  it("crosses a leap day", () => {
    const minutes = bucketsBetween(
      new Date("2028-02-28T23:59:00.000Z"),
      new Date("2028-03-01T00:00:00.000Z"),
    );
    expect(minutes).toHaveLength(24 * 60 + 2);
    expect(minutes[1]).toBe("2028-02-29T00:00");
  });

  it(`allows ${MAX_BUCKET_RANGE_MINUTES} minutes and refuses one more`, () => {
    const from = new Date("2026-01-01T00:00:00.000Z");
    const lastAllowed = new Date(from.getTime() + (MAX_BUCKET_RANGE_MINUTES - 1) * 60_000);
    expect(bucketsBetween(from, lastAllowed)).toHaveLength(MAX_BUCKET_RANGE_MINUTES);
    const oneTooFar = new Date(lastAllowed.getTime() + 60_000);
    expect(() => bucketsBetween(from, oneTooFar)).toThrow(/exceed the limit/);
  });

  it("covers every instant in the range by exactly its own minute", () => {
    fc.assert(
      fc.property(
        fc.date({ min: new Date("2000-01-01"), max: new Date("2100-01-01"), noInvalidDate: true }),
        fc.integer({ min: 0, max: 2 * 3_600_000 }),
        fc.integer({ min: 0, max: 2 * 3_600_000 }),
        (from, spanMs, offsetMs) => {
          const to = new Date(from.getTime() + spanMs);
          const inside = new Date(from.getTime() + Math.min(offsetMs, spanMs));
          const minutes = bucketsBetween(from, to);
          expect(minutes.filter((minute) => minute === minuteOf(inside))).toHaveLength(1);
          expect([...minutes].sort()).toEqual(minutes);
        },
      ),
      RUNS,
    );
  });
});

describe("due sort keys", () => {
  it("formats and parses", () => {
    const key = dueSortKey(new Date("2026-03-01T09:00:00.000Z"), "01J9Z3V6K8N4QX2M7R5T0W1Y3B", 3);
    expect(key).toBe("2026-03-01T09:00:00.000Z#01J9Z3V6K8N4QX2M7R5T0W1Y3B#0003");
    expect(parseDueSortKey(key)).toEqual({
      dueAt: "2026-03-01T09:00:00.000Z",
      jobId: "01J9Z3V6K8N4QX2M7R5T0W1Y3B",
      attempt: 3,
    });
  });

  it.each([
    "",
    "2026-03-01T09:00:00.000Z#job#0003#x",
    "2026-03-01T09:00:00Z#job#0003",
    "2026-02-30T09:00:00.000Z#job#0003",
    "2026-03-01T09:00:00.000Z##0003",
    "2026-03-01T09:00:00.000Z#job#3",
    "2026-03-01T09:00:00.000Z#job#0000",
  ])("parses %j as nothing", (key) => {
    expect(parseDueSortKey(key)).toBeNull();
  });

  it.each([
    ["a job id with #", () => dueSortKey(new Date(0), "a#b", 1)],
    ["attempt 0", () => dueSortKey(new Date(0), "job", 0)],
    ["attempt 10000", () => dueSortKey(new Date(0), "job", 10_000)],
  ])("refuses %s", (_name, build) => {
    expect(build).toThrow(RangeError);
  });

  it("round-trips and sorts in due-time order", () => {
    fc.assert(
      fc.property(
        instantArb,
        instantArb,
        ulidArb,
        attemptArb,
        attemptArb,
        (first, second, jobId, a, b) => {
          const firstKey = dueSortKey(first, jobId, a);
          const secondKey = dueSortKey(second, jobId, b);
          expect(parseDueSortKey(firstKey)).toEqual({
            dueAt: first.toISOString(),
            jobId,
            attempt: a,
          });
          if (first.getTime() !== second.getTime()) {
            expect(firstKey < secondKey).toBe(first < second);
          }
        },
      ),
      RUNS,
    );
  });
});

describe("newJobId", () => {
  const now = new Date("2026-03-01T09:00:00.000Z");

  it("is a ULID carrying its creation time", () => {
    const id = newJobId(now);
    expect(isValid(id)).toBe(true);
    expect(decodeTime(id)).toBe(now.getTime());
  });

  it("is deterministic under an injected random source", () => {
    expect(newJobId(now, () => 0.5)).toBe("01KJMA0FM0GGGGGGGGGGGGGGGG");
    expect(newJobId(now, mulberry32(7))).toBe(newJobId(now, mulberry32(7)));
  });

  it("encodes the epoch itself rather than the wall clock", () => {
    expect(newJobId(new Date(0), () => 0)).toBe("00000000000000000000000000");
  });

  it.each([new Date(Number.NaN), new Date(-1)])("refuses %s", (at) => {
    expect(() => newJobId(at)).toThrow(RangeError);
  });

  it("sorts by creation time", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 2 ** 40 }),
        fc.integer({ min: 1, max: 2 ** 40 }),
        fc.integer({ min: 0, max: 2 ** 31 }),
        (earlierMs, gapMs, seed) => {
          const random = mulberry32(seed);
          const earlier = newJobId(new Date(earlierMs), random);
          const later = newJobId(new Date(earlierMs + gapMs), random);
          return earlier < later;
        },
      ),
      RUNS,
    );
  });
});

describe("run identity", () => {
  const jobId = "01J9Z3V6K8N4QX2M7R5T0W1Y3B";

  it("builds the Runs sort key, from a Date or any spelling of the instant", () => {
    const expected = "RUN#2026-03-01T09:00:00.000Z#0002";
    expect(runSortKey(new Date("2026-03-01T09:00:00.000Z"), 2)).toBe(expected);
    expect(runSortKey("2026-03-01T09:00:00.000Z", 2)).toBe(expected);
    expect(runSortKey("2026-03-01T09:00Z", 2)).toBe(expected);
    expect(runSortKey("2026-03-01T10:00:00+01:00", 2)).toBe(expected);
  });

  it.each([
    "2026-03-01",
    "2026-02-30T09:00:00.000Z",
    "2026-03-01T24:00:00Z",
    "2026-03-01T09:00:00",
    "March 1 2026",
  ])("refuses the instant %j", (text) => {
    expect(() => runSortKey(text, 1)).toThrow(RangeError);
    expect(() => runId(jobId, text, 1)).toThrow(RangeError);
    expect(() => occurrenceKey(jobId, text)).toThrow(RangeError);
  });

  it("tells every Runs sort key it builds from any other string", () => {
    fc.assert(
      fc.property(instantArb, attemptArb, (at, attempt) => isRunSortKey(runSortKey(at, attempt))),
      RUNS,
    );
    for (const other of [
      "RUN#",
      "RUN#2026-03-01T09:00:00.000Z",
      "RUN#2026-03-01T09:00:00.000Z#0000",
      "RUN#2026-03-01T09:00:00.000Z#10000",
      "RUN#2026-03-01T09:00:00Z#0001",
      "RUN#2026-02-30T09:00:00.000Z#0001",
      "RUN#2026-03-01T09:00:00.000Z\ud800#0001",
      "TRIGGERED#2026-03-01T09:00:00.000Z#0001",
    ]) {
      expect(isRunSortKey(other), other).toBe(false);
    }
  });

  it("builds a compact, URL-safe run id", () => {
    const id = runId(jobId, "2026-03-01T09:00:00.000Z", 2);
    expect(id).toBe("01J9Z3V6K8N4QX2M7R5T0W1Y3B-20260301T090000000-2");
    expect(encodeURIComponent(id)).toBe(id);
    expect(parseRunId(id)).toEqual({ jobId, scheduledFor: "2026-03-01T09:00:00.000Z", attempt: 2 });
  });

  it("reads the fixed-shape fields from the right, so ids with dashes survive", () => {
    const id = runId("job-20260301T090000000-1", new Date("1999-12-31T23:59:59.999Z"), 9999);
    expect(parseRunId(id)).toEqual({
      jobId: "job-20260301T090000000-1",
      scheduledFor: "1999-12-31T23:59:59.999Z",
      attempt: 9999,
    });
  });

  it.each([
    "",
    "job",
    "job-20260301T090000000",
    "job-20260301T090000000-0",
    "job-20260301T090000000-01",
    "job-20260301T090000000-10000",
    "job-20260230T090000000-1",
    "job-20260301T250000000-1",
    "job-2026031T090000000-1",
    "-20260301T090000000-1",
    "jo#b-20260301T090000000-1",
  ])("parses %j as nothing", (id) => {
    expect(parseRunId(id)).toBeNull();
  });

  it.each([
    ["attempt 0", () => runId(jobId, new Date(0), 0)],
    ["attempt 10000", () => runId(jobId, new Date(0), 10_000)],
    ["a job id with /", () => runId("a/b", new Date(0), 1)],
    ["an empty job id", () => runId("", new Date(0), 1)],
    ["a five-digit year", () => runId(jobId, new Date("+010000-01-01T00:00:00.000Z"), 1)],
  ])("refuses %s", (_name, build) => {
    expect(build).toThrow(RangeError);
  });

  it("round-trips any ULID job id, instant 1970–9999 and attempt 1..9999", () => {
    fc.assert(
      fc.property(ulidArb, instantArb, attemptArb, (job, scheduledFor, attempt) => {
        const id = runId(job, scheduledFor, attempt);
        expect(encodeURIComponent(id)).toBe(id);
        expect(parseRunId(id)).toEqual({
          jobId: job,
          scheduledFor: scheduledFor.toISOString(),
          attempt,
        });
      }),
      RUNS,
    );
  });
});

describe("occurrenceKey", () => {
  it("is the job id and the scheduled instant, without the attempt", () => {
    const key = occurrenceKey("01J9Z3V6K8N4QX2M7R5T0W1Y3B", new Date("2026-03-01T09:00:00.000Z"));
    expect(key).toBe("01J9Z3V6K8N4QX2M7R5T0W1Y3B@2026-03-01T09:00:00.000Z");
    expect(occurrenceKey("01J9Z3V6K8N4QX2M7R5T0W1Y3B", "2026-03-01T09:00:00.000Z")).toBe(key);
  });

  it("refuses a job id with @", () => {
    expect(() => occurrenceKey("a@b", new Date(0))).toThrow(RangeError);
  });
});

describe("toStorageIso", () => {
  it("accepts the extreme storable years and nothing past them", () => {
    expect(toStorageIso(new Date("0000-01-01T00:00:00.000Z"))).toBe("0000-01-01T00:00:00.000Z");
    expect(toStorageIso(new Date("9999-12-31T23:59:59.999Z"))).toBe("9999-12-31T23:59:59.999Z");
    expect(() => toStorageIso(new Date("-000001-12-31T23:59:59.999Z"))).toThrow(RangeError);
    expect(() => toStorageIso(new Date("+010000-01-01T00:00:00.000Z"))).toThrow(RangeError);
  });
});
