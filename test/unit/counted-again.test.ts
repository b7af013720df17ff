import { describe, expect, it } from "vitest";
import { queuedAfterScheduleEdit } from "../../shared/jobs/counted-again.js";
import type { ScheduleSpec } from "../../shared/schedule/index.js";

const T0 = Date.parse("2026-05-01T00:00:00Z");
const MINUTE = 60_000;
const at = (minutes: number) => new Date(T0 + minutes * MINUTE);

/** A job whose old schedule's claims queued `queued` occurrences, the next pending at `next` minutes. */
const jobOf = (schedule: ScheduleSpec, queued: number, next: number) => ({
  schedule,
  nextRunAt: at(next).toISOString(),
  occurrencesQueued: queued,
});
const everyMinutes = (n: number): ScheduleSpec => ({
  every: `PT${n}M`,
  startAt: at(0).toISOString(),
});
const cron: ScheduleSpec = { cron: "* * * * *", timezone: "UTC" };
const end = { endAt: null, maxRuns: 20 };

describe("the count an edit to a new schedule writes (queuedAfterScheduleEdit)", () => {
  it("takes off the old occurrences queued ahead that the new schedule has", () => {
    // Minutes 0..13 queued; the new schedule starts at minute 1 and has 1..13 too.
    expect(
      queuedAfterScheduleEdit(jobOf(everyMinutes(1), 14, 14), { ...end, schedule: cron }, at(1)),
    ).toBe(1);
  });

  it("keeps those the new schedule does not have, and a new one-off's count", () => {
    const job = jobOf(everyMinutes(1), 14, 14);
    const everyFive: ScheduleSpec = { every: "PT5M", startAt: at(3).toISOString() };
    // Minutes 3, 8 and 13 are shared; the rest stay counted (their runs are skipped, counted).
    expect(queuedAfterScheduleEdit(job, { ...end, schedule: everyFive }, at(3))).toBe(11);
    const oneOff: ScheduleSpec = { runAt: at(5).toISOString() };
    expect(queuedAfterScheduleEdit(job, { ...end, schedule: oneOff }, at(5))).toBe(14);
  });

  it("takes off only the shared ones the new claims reach before maxRuns or endAt cuts them", () => {
    // Every 2 minutes: 0, 2, ..., 12 queued (7) of maxRuns 10, the new schedule every minute.
    // The 3 left go to minutes 1, 3 and 5; 2, 4 and 6 are planned again; 8, 10, 12 still run.
    const job = jobOf(everyMinutes(2), 7, 14);
    expect(queuedAfterScheduleEdit(job, { endAt: null, maxRuns: 10, schedule: cron }, at(1))).toBe(
      4,
    );
    const endAt = at(4).toISOString();
    expect(queuedAfterScheduleEdit(job, { endAt, maxRuns: null, schedule: cron }, at(1))).toBe(5);
  });
});
