/**
 * The schedule core: validating schedules and computing their occurrences. Pure: no I/O, and
 * every "now" is a parameter.
 *
 * Decisions (each pinned by tests in test/unit/schedule):
 * - Cron: 5 fields, or 6 with a leading seconds field, as parsed by cron-parser 5.10 (names,
 *   ranges, lists, steps, `L` in day-of-month, `5L` and `MON#2` in day-of-week). A list is the
 *   union of its items, as crontab reads it: `0,7` or `9-17,12` name a value twice, which
 *   cron-parser refuses, and are parsed with each value once (the expression is stored as given).
 *   Day-of-month and day-of-week combine with OR when both are restricted, exactly as cron-parser
 *   matches them.
 *   Rejected with an explanation: 7 fields or `?` (Quartz/EventBridge), `cron(...)`/`rate(...)`,
 *   macros such as `@hourly` (the message gives the fields to write instead, so stored
 *   expressions are always plain fields), `H` (random, so not reproducible), and `W` and `L-2`
 *   (cron-parser has neither), and a list with an empty item (`1-5,`: a stray comma). An expression
 *   that matches no calendar day is rejected as never firing.
 * - Time zones: location-based IANA names (`Area/Location`, incl. `Etc/…` and links such as
 *   `US/Eastern`) and `UTC`. Abbreviations and legacy names (`EST`, `CET`, `GMT`, `EST5EDT`, and
 *   in new input the System V names such as `SystemV/EST5EDT`) and bare offsets are rejected even
 *   where Intl accepts them.
 * - DST: a skipped wall time runs once at the same offset into the new hour; a repeated wall time
 *   runs the first time only, unless the hour field covers every hour (`*`, `0-23`): then the
 *   expression keeps firing through the repeated stretch in real time, as Vixie cron does; two
 *   occurrences on one instant are one. A whole skipped day (Pacific/Apia, 2011-12-30) maps onto
 *   the next day's times, so it gets no occurrence of its own.
 * - Bounds: instants (runAt, startAt) lie in 1970-01-01 … 9999-12-31T23:59:59.999Z, the range
 *   keys can hold; an `every` longer than that whole range is rejected (it could never run
 *   twice); every other schedule ends at its last occurrence in the range: the occurrence
 *   functions return null past it and never throw on a valid spec.
 * - `every`: ISO-8601 duration of elapsed time (weeks, days = 24 h, hours, minutes, seconds,
 *   fractions down to whole milliseconds); years and months are rejected, since their length
 *   varies. Occurrences are startAt + k·interval, k >= 0.
 * - Minimum interval: `every` below it is rejected; for cron the smallest gap between matching
 *   wall-clock times is checked, so a DST shift may still bring two occurrences closer on one day.
 * - `after`: a schedule of dependencies, not times: it has no occurrences (the occurrence functions
 *   return none), `on` is success, failure or completion, and `jobs` names 1 to 20 upstream job ids.
 * - Jitter (`window`): an occurrence is planned at occurrence + offset, the offset a hash of the
 *   job id and the occurrence spread over [0, window); the window is at most the period, and cut
 *   to the time until the next occurrence where a DST shift makes that shorter, so planned times
 *   keep the occurrences' order.
 * - `firstOccurrence`: runAt as is (even if past); otherwise the first occurrence >= now
 *   truncated to the second.
 */
export {
  FIRST_STORABLE_MS,
  LAST_STORABLE_MS,
  parseInstant,
  STORABLE_RANGE_TEXT,
} from "./instant.js";
export { jitterOffsetMs, parseWindow, plannedTime, windowMsOf } from "./jitter.js";
export { firstOccurrence, nextOccurrence, occurrences } from "./occurrences.js";
export {
  DEFAULT_MIN_INTERVAL_MS,
  normalizeSchedule,
  type ParseScheduleOptions,
  parseSchedule,
  safeParseSchedule,
  sameSchedule,
} from "./parse.js";
export {
  AFTER_ON,
  type AfterOn,
  isAfterSchedule,
  type ScheduleSpec,
} from "./types.js";
export { checkTimeZone } from "./zone.js";
