import { describe, expect, it } from "vitest";
import { previewOfJob } from "../../shared/api/preview.js";
import { firstOccurrence, type ScheduleSpec } from "../../shared/schedule/index.js";
import { ValidationError } from "../../shared/validation.js";

const NOW = new Date("2026-05-01T00:00:00Z");

/** A job created at NOW with `maxRuns`, as POST /schedules/preview has it. */
function newJob(schedule: ScheduleSpec, maxRuns: number) {
  const first = firstOccurrence(schedule, NOW);
  return {
    schedule,
    endAt: null,
    maxRuns,
    occurrencesQueued: 0,
    nextRunAt: first === null ? null : first.toISOString(),
  };
}

const utcOf = (preview: { occurrences: readonly { utc: string }[] }) =>
  preview.occurrences.map((o) => o.utc);

describe("a preview of a sparse schedule with maxRuns, from the job's next run", () => {
  it("shows occurrences more than 50 years on: only the stretch before `from` is bounded", () => {
    // Every fourth year but 2100: the 20 shown reach 2108, 82 years on; nothing lies between the job's next
    // run and `from` (now) to count, so there is no `from` too far to tell where maxRuns ends.
    const leapDay: ScheduleSpec = { cron: "0 0 29 2 *", timezone: "Pacific/Kiritimati" };
    const all = previewOfJob(newJob(leapDay, 20), NOW, 20);
    expect(all.occurrences).toHaveLength(20);
    expect(utcOf(all).at(-1)).toBe("2108-02-28T10:00:00.000Z");
    // maxRuns cuts inside what is shown.
    expect(utcOf(previewOfJob(newJob(leapDay, 15), NOW, 20))).toEqual(utcOf(all).slice(0, 15));
    // A yearly one: 60 shown over 59 years.
    const yearly: ScheduleSpec = { cron: "0 9 1 1 *", timezone: "Australia/Lord_Howe" };
    expect(previewOfJob(newJob(yearly, 60), NOW, 60).occurrences).toHaveLength(60);
    // The fifth Monday of February: 2044, 2072, 2112, … (a leap February that starts on a Monday).
    const rare: ScheduleSpec = { cron: "0 0 * 2 MON#5", timezone: "UTC" };
    expect(utcOf(previewOfJob(newJob(rare, 3), NOW, 5))).toEqual([
      "2044-02-29T00:00:00.000Z",
      "2072-02-29T00:00:00.000Z",
      "2112-02-29T00:00:00.000Z",
    ]);
  });

  it("still refuses a `from` more than 50 years after the job's next run, naming from", () => {
    const leapDay: ScheduleSpec = { cron: "0 0 29 2 *", timezone: "UTC" };
    const sixtyYearsOn = new Date("2086-05-01T00:00:00Z");
    expect(() => previewOfJob(newJob(leapDay, 1_000), sixtyYearsOn, 5)).toThrow(ValidationError);
    try {
      previewOfJob(newJob(leapDay, 1_000), sixtyYearsOn, 5);
    } catch (error) {
      expect(error instanceof ValidationError && error.issues.map((i) => i.field)).toEqual([
        "from",
      ]);
    }
    // Its maxRuns reached within the 50 years is told exactly: nothing is left to show.
    expect(previewOfJob(newJob(leapDay, 10), sixtyYearsOn, 5).occurrences).toEqual([]);
  });
});
