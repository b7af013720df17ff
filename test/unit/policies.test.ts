import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  DEFAULT_MISFIRE_GRACE_MS,
  DEFAULT_POLICIES,
  decideOverlap,
  isMisfired,
  MAX_MISFIRE_CATCH_UP,
  MISFIRE_POLICIES,
  type MisfirePolicy,
  type OverlapDecision,
  type OverlapInput,
  planMisfire,
  validateMaxConcurrent,
} from "../../shared/policies.js";
import { DEFAULT_RETRY_POLICY } from "../../shared/retry.js";

const RUNS = { numRuns: 1000 };
const MINUTE = 60_000;
const start = Date.parse("2026-03-01T09:00:00.000Z");
const perMinute = (count: number) =>
  Array.from({ length: count }, (_, i) => new Date(start + i * MINUTE));

describe("DEFAULT_POLICIES", () => {
  it("bundles the design's defaults", () => {
    expect(DEFAULT_POLICIES).toEqual({
      retry: DEFAULT_RETRY_POLICY,
      misfire: "fire_once",
      overlap: "skip",
      maxConcurrent: 1,
    });
    expect(Object.isFrozen(DEFAULT_POLICIES)).toBe(true);
    expect(DEFAULT_MISFIRE_GRACE_MS).toBe(60_000);
    expect(MAX_MISFIRE_CATCH_UP).toBe(1000);
  });
});

describe("isMisfired", () => {
  const scheduledFor = new Date(start);
  it.each([
    [0, false],
    [DEFAULT_MISFIRE_GRACE_MS, false],
    [DEFAULT_MISFIRE_GRACE_MS + 1, true],
    [-5_000, false],
  ])("%i ms late → %s", (lateMs, misfired) => {
    expect(isMisfired(scheduledFor, new Date(start + lateMs))).toBe(misfired);
  });

  it("honours a custom grace", () => {
    expect(isMisfired(scheduledFor, new Date(start + 5_001), 5_000)).toBe(true);
    expect(isMisfired(scheduledFor, new Date(start + 5_000), 5_000)).toBe(false);
  });
});

describe("planMisfire", () => {
  const missed = perMinute(20);

  it("skip: records all 20 missed occurrences SKIPPED", () => {
    const plan = planMisfire({ policy: "skip", missed, truncated: false });
    expect(plan.run).toEqual([]);
    expect(plan.skipped.map((s) => s.scheduledFor)).toEqual(missed);
    expect(new Set(plan.skipped.map((s) => s.reason))).toEqual(
      new Set(["misfire: missed by more than the 60 s grace; policy skip"]),
    );
    expect(plan.note).toBeNull();
  });

  it("skip: quotes the job's own grace", () => {
    const plan = planMisfire({ policy: "skip", missed, truncated: false, graceMs: 90_000 });
    expect(plan.skipped[0]?.reason).toBe(
      "misfire: missed by more than the 90 s grace; policy skip",
    );
  });

  it("fire_once: runs the most recent, records the 19 earlier SKIPPED", () => {
    const plan = planMisfire({ policy: "fire_once", missed, truncated: false });
    expect(plan.run).toEqual([new Date("2026-03-01T09:19:00.000Z")]);
    expect(plan.skipped.map((s) => s.scheduledFor)).toEqual(missed.slice(0, 19));
    expect(new Set(plan.skipped.map((s) => s.reason))).toEqual(
      new Set(["misfire: policy fire_once ran 2026-03-01T09:19:00.000Z instead"]),
    );
    expect(plan.note).toBeNull();
  });

  it("fire_all: runs all 20", () => {
    const plan = planMisfire({ policy: "fire_all", missed, truncated: false });
    expect(plan.run).toEqual(missed);
    expect(plan.skipped).toEqual([]);
    expect(plan.note).toBeNull();
  });

  it("fire_all: says so when the caller capped the list", () => {
    const capped = perMinute(MAX_MISFIRE_CATCH_UP);
    const plan = planMisfire({ policy: "fire_all", missed: capped, truncated: true });
    expect(plan.run).toHaveLength(MAX_MISFIRE_CATCH_UP);
    expect(plan.note).toBe(
      "misfire: more than 1000 occurrences were missed; only the latest 1000 are planned (cap 1000), earlier ones are neither run nor recorded",
    );
  });

  it.each(MISFIRE_POLICIES)("%s: plans nothing for nothing missed", (policy) => {
    expect(planMisfire({ policy, missed: [], truncated: false })).toEqual({
      run: [],
      skipped: [],
      note: null,
    });
  });

  it.each([
    ["more than the cap", perMinute(MAX_MISFIRE_CATCH_UP + 1)],
    ["out of order", [new Date(start + MINUTE), new Date(start)]],
    ["duplicates", [new Date(start), new Date(start)]],
  ])("refuses a list %s", (_name, list) => {
    expect(() => planMisfire({ policy: "fire_all", missed: list, truncated: false })).toThrow(
      RangeError,
    );
  });

  it("accounts for every missed occurrence exactly once, in order", () => {
    const missedArb = fc
      .uniqueArray(fc.integer({ min: 0, max: 10_000_000 }), { maxLength: 60 })
      .map((offsets) => offsets.sort((a, b) => a - b).map((offset) => new Date(start + offset)));
    fc.assert(
      fc.property(
        fc.constantFrom<MisfirePolicy>(...MISFIRE_POLICIES),
        missedArb,
        fc.boolean(),
        (policy, list, truncated) => {
          const plan = planMisfire({ policy, missed: list, truncated });
          const ran = plan.run.map((d) => d.getTime());
          const skipped = plan.skipped.map((s) => s.scheduledFor.getTime());
          const ranSet = new Set(ran);
          expect(skipped.some((t) => ranSet.has(t))).toBe(false);
          expect([...ran, ...skipped].sort((a, b) => a - b)).toEqual(list.map((d) => d.getTime()));
          expect([...ran].sort((a, b) => a - b)).toEqual(ran);
          expect([...skipped].sort((a, b) => a - b)).toEqual(skipped);
          expect(plan.note === null).toBe(!truncated);
          if (policy === "fire_once" && list.length > 0) {
            expect(plan.run).toEqual([list.at(-1)]);
          }
        },
      ),
      RUNS,
    );
  });
});

describe("decideOverlap", () => {
  const cases: [string, OverlapInput, OverlapDecision][] = [
    [
      "skip, nothing live → start",
      { policy: "skip", runId: "r2", liveRunIds: [], bufferedRunId: null },
      { action: "start" },
    ],
    [
      "skip, one live → skip",
      { policy: "skip", runId: "r2", liveRunIds: ["r1"], bufferedRunId: null },
      { action: "skip", reason: "overlap: run r1 still running; policy skip" },
    ],
    [
      "skip, several live → skip naming the first",
      { policy: "skip", runId: "r3", liveRunIds: ["r1", "r2"], bufferedRunId: null },
      { action: "skip", reason: "overlap: run r1 (and 1 more) still running; policy skip" },
    ],
    [
      "skip, only itself listed as live → start",
      { policy: "skip", runId: "r2", liveRunIds: ["r2"], bufferedRunId: null },
      { action: "start" },
    ],
    [
      "buffer_one, nothing live → start",
      { policy: "buffer_one", runId: "r2", liveRunIds: [], bufferedRunId: null },
      { action: "start" },
    ],
    [
      "buffer_one, it is the buffered one and nothing is live → start",
      { policy: "buffer_one", runId: "r2", liveRunIds: [], bufferedRunId: "r2" },
      { action: "start" },
    ],
    [
      "buffer_one, nothing live, another waits buffered → buffer behind it",
      { policy: "buffer_one", runId: "r3", liveRunIds: [], bufferedRunId: "r2" },
      { action: "buffer" },
    ],
    [
      "buffer_one, nothing live, another waits buffered, a retry or replay → start",
      { policy: "buffer_one", runId: "r3", liveRunIds: [], bufferedRunId: "r2", rerun: true },
      { action: "start" },
    ],
    [
      "skip, nothing live, a buffered run left from buffer_one → start",
      { policy: "skip", runId: "r3", liveRunIds: [], bufferedRunId: "r2" },
      { action: "start" },
    ],
    [
      "buffer_one, live, none buffered → buffer",
      { policy: "buffer_one", runId: "r2", liveRunIds: ["r1"], bufferedRunId: null },
      { action: "buffer" },
    ],
    [
      "buffer_one, live, it is the buffered one → buffer again",
      { policy: "buffer_one", runId: "r2", liveRunIds: ["r1"], bufferedRunId: "r2" },
      { action: "buffer" },
    ],
    [
      "buffer_one, live, another buffered → skip",
      { policy: "buffer_one", runId: "r3", liveRunIds: ["r1"], bufferedRunId: "r2" },
      {
        action: "skip",
        reason: "overlap: another run (r2) is already buffered; policy buffer_one",
      },
    ],
    [
      "allow, below the bound → start",
      {
        policy: "allow",
        maxConcurrent: 3,
        runId: "r3",
        liveRunIds: ["r1", "r2"],
        bufferedRunId: null,
      },
      { action: "start" },
    ],
    [
      "allow, at the bound → buffer",
      {
        policy: "allow",
        maxConcurrent: 2,
        runId: "r3",
        liveRunIds: ["r1", "r2"],
        bufferedRunId: null,
      },
      { action: "buffer" },
    ],
    [
      "allow, at the bound with another buffered → still buffer (no one-waiter limit)",
      {
        policy: "allow",
        maxConcurrent: 1,
        runId: "r3",
        liveRunIds: ["r1"],
        bufferedRunId: "r2",
      },
      { action: "buffer" },
    ],
    [
      "allow without maxConcurrent → bound 1",
      { policy: "allow", runId: "r2", liveRunIds: ["r1"], bufferedRunId: null },
      { action: "buffer" },
    ],
    [
      "allow, duplicates in the live list count once",
      {
        policy: "allow",
        maxConcurrent: 2,
        runId: "r3",
        liveRunIds: ["r1", "r1"],
        bufferedRunId: null,
      },
      { action: "start" },
    ],
    [
      "skip, a retry or replay with one live → buffer (it waits: skipped, its occurrence would be dropped)",
      { policy: "skip", runId: "r2", liveRunIds: ["r1"], bufferedRunId: null, rerun: true },
      { action: "buffer" },
    ],
    [
      "buffer_one, a retry or replay with another buffered → buffer (it waits too)",
      { policy: "buffer_one", runId: "r3", liveRunIds: ["r1"], bufferedRunId: "r2", rerun: true },
      { action: "buffer" },
    ],
    [
      "skip, a retry or replay with nothing live → start",
      { policy: "skip", runId: "r2", liveRunIds: [], bufferedRunId: null, rerun: true },
      { action: "start" },
    ],
    [
      "skip, a first attempt with a retry or replay waiting and nothing live → skip naming it",
      { policy: "skip", runId: "r3", liveRunIds: [], bufferedRunId: null, rerunWaiting: "r2" },
      {
        action: "skip",
        reason: "overlap: a retry or replay (r2) waits to run first; policy skip",
      },
    ],
    [
      "buffer_one, a first attempt with a retry or replay waiting and nothing live → buffer",
      {
        policy: "buffer_one",
        runId: "r3",
        liveRunIds: [],
        bufferedRunId: null,
        rerunWaiting: "r2",
      },
      { action: "buffer" },
    ],
    [
      "buffer_one, a first attempt with a retry or replay waiting and another buffered → skip",
      {
        policy: "buffer_one",
        runId: "r4",
        liveRunIds: [],
        bufferedRunId: "r3",
        rerunWaiting: "r2",
      },
      {
        action: "skip",
        reason: "overlap: another run (r3) is already buffered; policy buffer_one",
      },
    ],
    [
      "allow, a first attempt with a retry or replay waiting and its one slot free → buffer",
      { policy: "allow", runId: "r3", liveRunIds: [], bufferedRunId: null, rerunWaiting: "r2" },
      { action: "buffer" },
    ],
    [
      "allow, a first attempt with a retry or replay waiting and one slot left beside it → start",
      {
        policy: "allow",
        maxConcurrent: 3,
        runId: "r5",
        liveRunIds: ["r3"],
        bufferedRunId: null,
        rerunWaiting: "r2",
      },
      { action: "start" },
    ],
    [
      "allow, a first attempt with a retry or replay waiting and only the slot that freed → buffer",
      {
        policy: "allow",
        maxConcurrent: 3,
        runId: "r5",
        liveRunIds: ["r3", "r4"],
        bufferedRunId: null,
        rerunWaiting: "r2",
      },
      { action: "buffer" },
    ],
    [
      "allow, the waiting retry or replay itself with the slot that freed → start",
      {
        policy: "allow",
        maxConcurrent: 3,
        runId: "r2",
        liveRunIds: ["r3", "r4"],
        bufferedRunId: null,
        rerun: true,
        rerunWaiting: "r2",
      },
      { action: "start" },
    ],
    [
      "allow, a first attempt with no retry or replay waiting and the slot that freed → start",
      {
        policy: "allow",
        maxConcurrent: 3,
        runId: "r5",
        liveRunIds: ["r3", "r4"],
        bufferedRunId: null,
        rerunWaiting: null,
      },
      { action: "start" },
    ],
    [
      "skip, the waiting retry or replay itself with nothing live → start",
      {
        policy: "skip",
        runId: "r2",
        liveRunIds: [],
        bufferedRunId: null,
        rerun: true,
        rerunWaiting: "r2",
      },
      { action: "start" },
    ],
    [
      "skip, another retry or replay with a retry or replay waiting and nothing live → start",
      {
        policy: "skip",
        runId: "r5",
        liveRunIds: [],
        bufferedRunId: null,
        rerun: true,
        rerunWaiting: "r2",
      },
      { action: "start" },
    ],
    [
      "skip ignores maxConcurrent",
      { policy: "skip", maxConcurrent: 5, runId: "r2", liveRunIds: ["r1"], bufferedRunId: null },
      { action: "skip", reason: "overlap: run r1 still running; policy skip" },
    ],
  ];

  it.each(cases)("%s", (_name, input, expected) => {
    expect(decideOverlap(input)).toEqual(expected);
  });

  it.each([0, 101, 1.5, Number.NaN])("refuses maxConcurrent %s", (maxConcurrent) => {
    expect(() =>
      decideOverlap({
        policy: "allow",
        maxConcurrent,
        runId: "r",
        liveRunIds: [],
        bufferedRunId: null,
      }),
    ).toThrow(RangeError);
  });
});

describe("validateMaxConcurrent", () => {
  it.each([1, 7, 100])("accepts %s", (value) => {
    expect(validateMaxConcurrent(value)).toEqual([]);
  });

  it.each([0, 101, 2.5, "3", null, undefined, Number.NaN])("names the field for %s", (value) => {
    expect(validateMaxConcurrent(value)).toEqual([
      {
        field: "policies.maxConcurrent",
        message: `must be a whole number from 1 to 100, got ${String(value)}`,
      },
    ]);
  });

  it("uses the field path it is given", () => {
    expect(validateMaxConcurrent(0, "overlap.maxConcurrent")[0]?.field).toBe(
      "overlap.maxConcurrent",
    );
  });
});
