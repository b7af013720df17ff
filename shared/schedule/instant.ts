import { DAY_MS, daysFromCivil, daysInMonth, MONTH_NAMES } from "./calendar.js";

/**
 * The storable range of instants. Keys write instants as `toISOString()` strings, which sort and
 * parse only with four-digit years, so no occurrence may fall after the last of them; jobs start
 * no earlier than 1970.
 */
export const FIRST_STORABLE_MS = Date.UTC(1970, 0, 1);
export const LAST_STORABLE_MS = Date.UTC(9999, 11, 31, 23, 59, 59, 999);
export const STORABLE_RANGE_TEXT = "1970-01-01T00:00:00.000Z to 9999-12-31T23:59:59.999Z";

export type InstantParse =
  | { readonly ok: true; readonly ms: number }
  | { readonly ok: false; readonly message: string };

const INSTANT_RE =
  /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d{1,9}))?)?(Z|[+-]\d{2}(?::?\d{2})?)?$/;

/**
 * Parses an ISO-8601 / RFC 3339 date-time that names one instant. The offset is mandatory: a
 * bare local time would silently take the server's zone. Fractions beyond milliseconds are
 * truncated; leap seconds and "24:00" are rejected.
 */
export function parseInstant(value: string): InstantParse {
  const m = INSTANT_RE.exec(value);
  if (m === null) {
    return {
      ok: false,
      message: `must be an ISO-8601 date-time with "Z" or a UTC offset, such as "2026-03-08T07:30:00Z" or "2026-03-08T02:30:00-05:00"; got "${value}"`,
    };
  }
  const [, ys, mos, ds, hs, mis, ss, frac, offset] = m;
  if (offset === undefined) {
    return {
      ok: false,
      message: `has no "Z" or UTC offset, so it does not name a single instant: append "Z" for UTC or an offset such as "-05:00"; got "${value}"`,
    };
  }
  const year = Number(ys);
  const month = Number(mos);
  const day = Number(ds);
  const hour = Number(hs);
  const minute = Number(mis);
  const second = ss === undefined ? 0 : Number(ss);
  const offsetSign = offset.startsWith("-") ? -1 : 1;
  const offsetHours = offset === "Z" ? 0 : Number(offset.slice(1, 3));
  const offsetMinutes = offset === "Z" ? 0 : Number(offset.slice(offset.length - 2));
  const hasOffsetMinutes = offset.length > 3;

  let reason: string | undefined;
  if (month < 1 || month > 12) reason = "month must be 01-12";
  else if (day < 1 || day > daysInMonth(year, month)) {
    reason = `${MONTH_NAMES[month - 1]} ${year} has ${daysInMonth(year, month)} days`;
  } else if (hour > 23) reason = "hour must be 00-23";
  else if (minute > 59) reason = "minute must be 00-59";
  else if (second > 59) reason = "second must be 00-59; leap seconds are not supported";
  else if (offsetHours > 23 || (hasOffsetMinutes && offsetMinutes > 59)) {
    reason = "the UTC offset must be between -23:59 and +23:59";
  }
  if (reason !== undefined) {
    return { ok: false, message: `is not a real date-time (${reason}); got "${value}"` };
  }

  const millis = frac === undefined ? 0 : Number(frac.slice(0, 3).padEnd(3, "0"));
  const local =
    daysFromCivil(year, month, day) * DAY_MS + ((hour * 60 + minute) * 60 + second) * 1000 + millis;
  const offsetMs =
    offsetSign * ((offsetHours * 60 + (hasOffsetMinutes ? offsetMinutes : 0)) * 60_000);
  return { ok: true, ms: local - offsetMs };
}
