import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  jitterOffsetMs,
  nextOccurrence,
  occurrences,
  parseWindow,
  plannedTime,
  type ScheduleSpec,
} from "../../../shared/schedule/index.js";

const RUNS = { numRuns: 1_000 };
const jobIdArb = fc.stringMatching(/^[0-9A-Za-z_-]{1,64}$/);
const instantArb = fc
  .integer({ min: Date.UTC(1970, 0, 1), max: Date.UTC(9999, 0, 1) })
  .map((ms) => new Date(ms));
const windowArb = fc.integer({ min: 1, max: 7 * 86_400_000 });
// An interval is elapsed time: its offsets are spread over the window whole, wherever they fall.
const elapsed: ScheduleSpec = { every: "P7D", startAt: "1970-01-01T00:00:00.000Z" };

describe("jitter offsets", () => {
  it("lie inside the window, in whole milliseconds, and are the same every time they are computed", () => {
    fc.assert(
      fc.property(jobIdArb, instantArb, windowArb, (jobId, at, windowMs) => {
        const offset = jitterOffsetMs(jobId, at, windowMs);
        expect(Number.isInteger(offset)).toBe(true);
        expect(offset).toBeGreaterThanOrEqual(0);
        expect(offset).toBeLessThan(windowMs);
        expect(jitterOffsetMs(jobId, new Date(at.getTime()), windowMs)).toBe(offset);
        expect(plannedTime(jobId, at, windowMs, elapsed).getTime()).toBe(at.getTime() + offset);
      }),
      RUNS,
    );
  });

  it("no window plans the occurrence itself", () => {
    fc.assert(
      fc.property(jobIdArb, instantArb, (jobId, at) => {
        expect(plannedTime(jobId, at, null, elapsed)).toEqual(at);
        expect(plannedTime(jobId, at, 0, elapsed)).toEqual(at);
      }),
      RUNS,
    );
  });

  it("a planned time never passes the last storable instant", () => {
    const last = new Date(Date.UTC(9999, 11, 31, 23, 59, 59, 999));
    fc.assert(
      fc.property(jobIdArb, fc.integer({ min: 0, max: 3_600_000 }), (jobId, before) => {
        const at = new Date(last.getTime() - before);
        expect(plannedTime(jobId, at, 3_600_000, elapsed).getTime()).toBeLessThanOrEqual(
          last.getTime(),
        );
      }),
      RUNS,
    );
  });

  it("are roughly uniform over the window: ten equal slices of 20,000 occurrences each get 10 % ± 1 %", () => {
    fc.assert(
      // A window of at least a second (the shortest interval): milliseconds then split evenly.
      fc.property(jobIdArb, fc.integer({ min: 1_000, max: 7 * 86_400_000 }), (jobId, windowMs) => {
        const slices = new Array<number>(10).fill(0);
        const start = Date.UTC(2030, 0, 1);
        const n = 20_000;
        for (let k = 0; k < n; k++) {
          const offset = jitterOffsetMs(jobId, new Date(start + k * 60_000), windowMs);
          const slice = Math.floor((offset / windowMs) * 10);
          slices[slice] = (slices[slice] ?? 0) + 1;
        }
        // 20,000 draws: one slice's standard deviation is 42, so ±200 is almost five of them.
        for (const count of slices) expect(Math.abs(count - n / 10)).toBeLessThan(200);
      }),
      { numRuns: 10 },
    );
  });

  it("spread jobs that share an occurrence: 1,000 job ids at one instant fill every tenth of a 5-minute window", () => {
    const at = new Date(Date.UTC(2030, 0, 1, 9));
    const slices = new Set<number>();
    for (let i = 0; i < 1_000; i++) {
      slices.add(Math.floor(jitterOffsetMs(`job-${i}`, at, 300_000) / 30_000));
    }
    expect([...slices].sort((a, b) => a - b)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
  });
});

describe("windows", () => {
  const scheduleArb = fc.oneof(
    fc.integer({ min: 1, max: 86_400 }).map((s): { spec: ScheduleSpec; periodMs: number } => ({
      spec: { every: `PT${s}S`, startAt: "2030-01-01T00:00:00.000Z" },
      periodMs: s * 1_000,
    })),
    fc.constantFrom(
      { spec: { cron: "*/5 * * * *", timezone: "UTC" }, periodMs: 300_000 },
      { spec: { cron: "0 * * * *", timezone: "Europe/Berlin" }, periodMs: 3_600_000 },
      { spec: { cron: "0 9,17 * * *", timezone: "America/New_York" }, periodMs: 8 * 3_600_000 },
    ),
  );

  it("up to the period are accepted, and then each planned time comes before the next occurrence", () => {
    fc.assert(
      fc.property(
        scheduleArb,
        jobIdArb,
        fc.double({ min: 0, max: 1, noNaN: true }),
        (s, jobId, f) => {
          const windowS = Math.max(1, Math.floor((s.periodMs / 1000) * f));
          const parsed = parseWindow(`PT${windowS}S`, s.spec);
          expect(parsed).toEqual({ ok: true, ms: windowS * 1000 });
          const from = new Date(Date.UTC(2030, 2, 1));
          for (const at of occurrences(
            s.spec,
            from,
            new Date(from.getTime() + 3 * 86_400_000),
            20,
          )) {
            const next = nextOccurrence(s.spec, at);
            if (next === null) continue;
            expect(plannedTime(jobId, at, windowS * 1000, s.spec).getTime()).toBeLessThan(
              next.getTime(),
            );
          }
        },
      ),
      { numRuns: 200 },
    );
  });

  it("as long as the wall-clock period come before the next occurrence on a night a DST shift makes it shorter", () => {
    // Two hours apart on the wall clock, one in real time when the clocks go forward (New York's
    // 2027-03-14, Berlin's 2027-03-28), and 30 minutes at Lord Howe (2027-10-03, a half-hour shift).
    const cases: { spec: ScheduleSpec; window: string; from: string }[] = [
      {
        spec: { cron: "30 1,3 * * *", timezone: "America/New_York" },
        window: "PT2H",
        from: "2027-03-13",
      },
      {
        spec: { cron: "30 1,3 * * *", timezone: "Europe/Berlin" },
        window: "PT2H",
        from: "2027-03-27",
      },
      {
        spec: { cron: "45 1,2 * * *", timezone: "Australia/Lord_Howe" },
        window: "PT1H",
        from: "2027-10-02",
      },
    ];
    fc.assert(
      fc.property(fc.constantFrom(...cases), jobIdArb, (c, jobId) => {
        const parsed = parseWindow(c.window, c.spec);
        expect(parsed.ok).toBe(true);
        if (!parsed.ok) return;
        const from = new Date(`${c.from}T00:00:00.000Z`);
        for (const at of occurrences(c.spec, from, new Date(from.getTime() + 3 * 86_400_000), 10)) {
          const next = nextOccurrence(c.spec, at);
          if (next === null) continue;
          expect(plannedTime(jobId, at, parsed.ms, c.spec).getTime()).toBeLessThan(next.getTime());
        }
      }),
      { numRuns: 300 },
    );
  });

  it("longer than the period, on a one-off, or not a positive duration are refused with a reason", () => {
    expect(parseWindow("PT5M1S", { every: "PT5M", startAt: "2030-01-01T00:00:00.000Z" })).toEqual({
      ok: false,
      message: expect.stringContaining("longer than the schedule's period (300 s"),
    });
    expect(parseWindow("PT2H", { cron: "0 * * * *", timezone: "UTC" })).toMatchObject({
      ok: false,
    });
    expect(parseWindow("PT5M", { runAt: "2030-01-01T00:00:00.000Z" })).toEqual({
      ok: false,
      message: expect.stringContaining("recurring schedules"),
    });
    expect(parseWindow("PT0S", { cron: "0 * * * *", timezone: "UTC" })).toMatchObject({
      ok: false,
    });
    expect(parseWindow("5 minutes", { cron: "0 * * * *", timezone: "UTC" })).toMatchObject({
      ok: false,
    });
  });
});
