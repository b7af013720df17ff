export type DurationParse =
  | { readonly ok: true; readonly ms: number }
  | { readonly ok: false; readonly message: string };

const N = String.raw`(\d+(?:[.,]\d+)?)`;
const DURATION_RE = new RegExp(
  `^(-)?P(?:${N}Y)?(?:${N}M)?(?:${N}W)?(?:${N}D)?(?:T(?:${N}H)?(?:${N}M)?(?:${N}S)?)?$`,
);

// Weeks and days are taken as 7×24 h and 24 h of elapsed time: an interval schedule counts
// elapsed time by design, so a "day" here is not a calendar day and ignores DST.
const UNIT_MS = {
  weeks: 604_800_000n,
  days: 86_400_000n,
  hours: 3_600_000n,
  minutes: 60_000n,
  seconds: 1_000n,
} as const;

// Instants stop at ±8.64e15 ms; a longer interval could never fire twice.
const MAX_MS = 8_640_000_000_000_000n;

/**
 * Parses the `every` duration into milliseconds. Years and months are rejected because their
 * length varies; use a cron schedule for calendar-based repetition.
 */
export function parseEvery(value: string): DurationParse {
  const m = DURATION_RE.exec(value);
  const [, minus, years, months, weeks, days, hours, minutes, seconds] = m ?? [];
  const timePartEmpty = value.includes("T") && !hours && !minutes && !seconds;
  if (m === null || value === "P" || value === "-P" || timePartEmpty) {
    return {
      ok: false,
      message: `must be an ISO-8601 duration such as "PT15M", "PT1H" or "P1D"; got "${value}"`,
    };
  }
  if (years !== undefined || months !== undefined) {
    return {
      ok: false,
      message: `uses years or months, whose length varies; got "${value}": give a fixed length in weeks, days (24 h each), hours, minutes or seconds such as "P30D", or use a cron schedule for calendar dates`,
    };
  }
  let total = 0n;
  const parts = [
    [weeks, UNIT_MS.weeks],
    [days, UNIT_MS.days],
    [hours, UNIT_MS.hours],
    [minutes, UNIT_MS.minutes],
    [seconds, UNIT_MS.seconds],
  ] as const;
  for (const [text, unit] of parts) {
    if (text === undefined) continue;
    const [whole = "0", fraction = ""] = text.split(/[.,]/);
    total += BigInt(whole) * unit;
    if (fraction !== "") {
      const scaled = BigInt(fraction) * unit;
      const denominator = 10n ** BigInt(fraction.length);
      if (scaled % denominator !== 0n) {
        return { ok: false, message: `must be a whole number of milliseconds; got "${value}"` };
      }
      total += scaled / denominator;
    }
  }
  if (minus !== undefined || total === 0n) {
    return { ok: false, message: `must be a positive duration; got "${value}"` };
  }
  if (total > MAX_MS) {
    return { ok: false, message: `is too long to ever repeat; got "${value}"` };
  }
  return { ok: true, ms: Number(total) };
}
