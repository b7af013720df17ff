/**
 * Times of day for tests that create jobs with a fixed hour on the real clock: a daily occurrence
 * that fell within minutes of the test's run would be claimed inside the lookahead (at create, by
 * the API's fast path) and add a run, a nextRunAt or a lastRun the test does not expect.
 */

/** The hour in `timeZone` at `at`, 0 to 23. */
function hourIn(timeZone: string, at: Date): number {
  const hour = new Intl.DateTimeFormat("en-GB", { timeZone, hour: "numeric", hourCycle: "h23" })
    .formatToParts(at)
    .find((part) => part.type === "hour")?.value;
  return Number(hour);
}

/**
 * An hour of the day in `timeZone` 11 to 12 hours from `now` (read once, as a file starts): a
 * daily cron at minute 0 of it never falls due, nor inside the lookahead, while the file runs.
 */
export function hourHalfADayAway(timeZone: string, now: Date = new Date()): number {
  return (hourIn(timeZone, now) + 12) % 24;
}

/**
 * A yearly cron, midnight UTC on the 1st of a month 5 to 6 months from `now` (read once, as a file
 * starts), for a job that must not run by itself while the file runs: "0 0 1 1 *" falls due in the
 * last minutes of a year, its occurrence claimed inside the lookahead beside the runs a test makes.
 */
export function yearlyCronHalfAYearAway(now: Date = new Date()): string {
  return `0 0 1 ${((now.getUTCMonth() + 6) % 12) + 1} *`;
}
