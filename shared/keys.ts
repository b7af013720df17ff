/**
 * Storage keys and identifiers. Every key here is persisted, so each format is
 * part of the data model (docs/architecture.md, "Data model"): changing one
 * orphans the items already written under the old form.
 *
 * Times in keys are `Date.prototype.toISOString()` strings (UTC, milliseconds),
 * which sort lexicographically in time order only for four-digit years; that is
 * why instants outside 0000–9999 are refused rather than written.
 */
import { createHash } from "node:crypto";
import { encodeTime, ulid } from "ulid";
import { daysInMonth } from "./schedule/calendar.js";

/** 0000-01-01T00:00:00.000Z: earlier years get a sign and six digits in ISO form. */
const MIN_STORABLE_MS = -62_167_219_200_000;
/** 9999-12-31T23:59:59.999Z: later years get a sign and six digits in ISO form. */
const MAX_STORABLE_MS = 253_402_300_799_999;

/**
 * How an Idempotency-Key is kept on the item whose write it made: a fixed length, whatever the
 * key, and not the key itself.
 */
export const idempotencyKeyHash = (idempotencyKey: string) =>
  createHash("sha256").update(idempotencyKey).digest("hex");

/** Attempts are zero-padded to four digits in sort keys; a fifth digit would break their order. */
export const MAX_ATTEMPT = 9999;

/** A guard against a bad watermark turning one dispatcher pass into a scan of years. */
export const MAX_BUCKET_RANGE_MINUTES = 10_000;

const MINUTE_MS = 60_000;

/**
 * Job ids are ULIDs in production, but key builders accept any short id of
 * URL-safe characters so that tests can use readable ids; what matters to the
 * keys is that an id never contains their separators (`#`, `@`).
 */
const JOB_ID_CHARS = "[0-9A-Za-z_-]{1,64}";
export const JOB_ID_PATTERN = new RegExp(`^${JOB_ID_CHARS}$`);

const ISO_INSTANT_PATTERN = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
/** Strings handed to key builders may be any full ISO-8601 instant; they are normalized. */
const ISO_INPUT_PATTERN =
  /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.\d{1,9})?)?(?:Z|[+-](\d{2}):(\d{2}))$/;

/** The storage form of an instant; throws for invalid dates and years outside 0000–9999. */
export function toStorageIso(at: Date): string {
  const ms = at.getTime();
  if (!Number.isFinite(ms)) {
    throw new RangeError("invalid date");
  }
  if (ms < MIN_STORABLE_MS || ms > MAX_STORABLE_MS) {
    throw new RangeError(`instant ${at.toISOString()} is outside the storable years 0000–9999`);
  }
  return at.toISOString();
}

function instantOf(value: Date | string): Date {
  if (typeof value !== "string") {
    return value;
  }
  const match = ISO_INPUT_PATTERN.exec(value);
  const fields = match?.slice(1).map((field) => Number(field ?? "0"));
  const [year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0, offsetH = 0, offsetM = 0] =
    fields ?? [];
  // Date.parse rolls 2026-02-30 over to March 2 instead of refusing it.
  const valid =
    fields !== undefined &&
    month >= 1 &&
    month <= 12 &&
    day >= 1 &&
    day <= daysInMonth(year, month) &&
    hour <= 23 &&
    minute <= 59 &&
    second <= 59 &&
    offsetH <= 23 &&
    offsetM <= 59;
  if (!valid) {
    throw new RangeError(`not an ISO-8601 instant with a zone: ${JSON.stringify(value)}`);
  }
  return new Date(value);
}

/** True for a string already in storage form, rejecting impossible dates such as Feb 30. */
export function isStorageIso(value: string): boolean {
  if (!ISO_INSTANT_PATTERN.test(value)) {
    return false;
  }
  const ms = Date.parse(value);
  return Number.isFinite(ms) && new Date(ms).toISOString() === value;
}

function assertJobId(jobId: string): void {
  if (!JOB_ID_PATTERN.test(jobId)) {
    throw new RangeError(
      `job id must be 1–64 characters of [0-9A-Za-z_-]: ${JSON.stringify(jobId)}`,
    );
  }
}

function assertAttempt(attempt: number): void {
  if (!Number.isInteger(attempt) || attempt < 1 || attempt > MAX_ATTEMPT) {
    throw new RangeError(`attempt must be an integer in 1..${MAX_ATTEMPT}: ${attempt}`);
  }
}

function padAttempt(attempt: number): string {
  assertAttempt(attempt);
  return String(attempt).padStart(4, "0");
}

function parsePaddedAttempt(text: string): number | null {
  if (!/^\d{4}$/.test(text)) {
    return null;
  }
  const attempt = Number(text);
  return attempt >= 1 ? attempt : null;
}

/**
 * FNV-1a, 32-bit, over the UTF-8 bytes of the job id, modulo the shard count.
 *
 * NEVER CHANGE THIS FUNCTION. Due entries live under `DUE#<minute>#<shard>`
 * and runs under `INFLIGHT#<shard>`; a different hash would send dispatchers
 * and the reaper looking in the wrong partitions for every stored job.
 */
export function shardOf(jobId: string, shardCount: number): number {
  if (!Number.isSafeInteger(shardCount) || shardCount < 1) {
    throw new RangeError(`shard count must be a positive integer: ${shardCount}`);
  }
  let hash = 0x811c9dc5;
  for (const byte of new TextEncoder().encode(jobId)) {
    hash ^= byte;
    hash = Math.imul(hash, 0x01000193);
  }
  return (hash >>> 0) % shardCount;
}

/** The UTC minute of an instant, `yyyy-mm-ddTHH:MM`: the time part of a due bucket. */
export function minuteOf(at: Date): string {
  return toStorageIso(at).slice(0, 16);
}

/** The partition key of the due bucket for an instant. */
export function bucketKey(dueAt: Date, shard: number): string {
  return bucketKeyForMinute(minuteOf(dueAt), shard);
}

/** The partition key of a due bucket from a minute as returned by `bucketsBetween`. */
export function bucketKeyForMinute(minute: string, shard: number): string {
  if (!Number.isSafeInteger(shard) || shard < 0) {
    throw new RangeError(`shard must be a non-negative integer: ${shard}`);
  }
  if (!isStorageIso(`${minute}:00.000Z`)) {
    throw new RangeError(`not a minute of the form yyyy-mm-ddTHH:MM: ${JSON.stringify(minute)}`);
  }
  return `DUE#${minute}#${shard}`;
}

/**
 * The minutes (`yyyy-mm-ddTHH:MM`) from `from`'s minute to `to`'s minute,
 * inclusive; empty when `to` is before `from`'s minute. Throws past
 * MAX_BUCKET_RANGE_MINUTES, because a range that long is a bug upstream
 * (a stale watermark), not a backlog to read in one pass.
 */
export function bucketsBetween(from: Date, to: Date): string[] {
  toStorageIso(from);
  toStorageIso(to);
  const firstMinuteMs = Math.floor(from.getTime() / MINUTE_MS) * MINUTE_MS;
  const lastMinuteMs = Math.floor(to.getTime() / MINUTE_MS) * MINUTE_MS;
  const count = (lastMinuteMs - firstMinuteMs) / MINUTE_MS + 1;
  if (count > MAX_BUCKET_RANGE_MINUTES) {
    throw new RangeError(
      `${count} minutes between ${from.toISOString()} and ${to.toISOString()} exceed the limit of ${MAX_BUCKET_RANGE_MINUTES}`,
    );
  }
  const minutes: string[] = [];
  for (let ms = firstMinuteMs; ms <= lastMinuteMs; ms += MINUTE_MS) {
    minutes.push(minuteOf(new Date(ms)));
  }
  return minutes;
}

/** The sort key of a due entry: `<dueAtIso>#<jobId>#<attempt, 4 digits>`, in due-time order. */
export function dueSortKey(dueAt: Date, jobId: string, attempt: number): string {
  assertJobId(jobId);
  return `${toStorageIso(dueAt)}#${jobId}#${padAttempt(attempt)}`;
}

/**
 * The sort key of a `trigger` due entry: `<dueAtIso>#<upstream run id>#trigger`, one per
 * upstream run (a run ends once), in due-time order among the bucket's entries.
 */
export function triggerSortKey(dueAt: Date, upstreamRunId: string): string {
  return `${toStorageIso(dueAt)}#${upstreamRunId}#trigger`;
}

/**
 * The Runs table sort key of the record that an upstream run's trigger was fanned out to a
 * dependent (kept in the dependent's partition, outside the `RUN#` range the history reads).
 */
export function triggeredMarkerSortKey(upstreamRunId: string): string {
  return `TRIGGERED#${upstreamRunId}`;
}

export interface DueSortKeyParts {
  readonly dueAt: string;
  readonly jobId: string;
  readonly attempt: number;
}

/** The parts of a due entry's sort key, or null for anything `dueSortKey` cannot produce. */
export function parseDueSortKey(sortKey: string): DueSortKeyParts | null {
  const parts = sortKey.split("#");
  if (parts.length !== 3) {
    return null;
  }
  const [dueAt = "", jobId = "", attemptText = ""] = parts;
  const attempt = parsePaddedAttempt(attemptText);
  if (!isStorageIso(dueAt) || !JOB_ID_PATTERN.test(jobId) || attempt === null) {
    return null;
  }
  return { dueAt, jobId, attempt };
}

/**
 * A new job id: a ULID, so ids sort by creation time (to the millisecond; ids
 * made within one millisecond sort randomly among themselves). `random` must
 * return values in [0, 1); without it the ulid package uses crypto randomness.
 */
export function newJobId(now: Date, random?: () => number): string {
  const ms = now.getTime();
  if (!Number.isFinite(ms) || ms < 0) {
    throw new RangeError("a job id needs a valid instant at or after 1970-01-01");
  }
  // ulid() silently substitutes Date.now() for a seed time of 0 (or NaN), so
  // the time part is encoded here and only the random part is taken from it.
  const randomPart = ulid(1, random).slice(10);
  return encodeTime(ms) + randomPart;
}

/** The Runs table sort key: `RUN#<scheduledForIso>#<attempt, 4 digits>`. */
export function runSortKey(scheduledFor: Date | string, attempt: number): string {
  return `RUN#${toStorageIso(instantOf(scheduledFor))}#${padAttempt(attempt)}`;
}

/** Whether `sortKey` is one `runSortKey` makes (a cursor's start key, for one). */
export function isRunSortKey(sortKey: string): boolean {
  const match = /^RUN#([^#]+)#(\d{4})$/.exec(sortKey);
  return (
    match !== null && isStorageIso(match[1] ?? "") && parsePaddedAttempt(match[2] ?? "") !== null
  );
}

const RUN_ID_PATTERN = new RegExp(
  String.raw`^(${JOB_ID_CHARS})-(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})(\d{3})-([1-9]\d{0,3})$`,
);

/**
 * The public id of a run: `<jobId>-<yyyymmddTHHMMSSmmm>-<attempt>`, e.g.
 * `01J9Z3V6K8N4QX2M7R5T0W1Y3B-20260301T090000000-2`. URL-safe without
 * escaping, and reversible with `parseRunId`, so an API path names the run's
 * Runs-table key without a lookup. The job id may itself contain `-`: the
 * last two fields have fixed shapes, so they are read from the right.
 */
export function runId(jobId: string, scheduledFor: Date | string, attempt: number): string {
  assertJobId(jobId);
  assertAttempt(attempt);
  const compactTime = toStorageIso(instantOf(scheduledFor)).replace(/[-:.Z]/g, "");
  return `${jobId}-${compactTime}-${attempt}`;
}

export interface RunIdParts {
  readonly jobId: string;
  /** Storage form (ISO-8601 UTC with milliseconds). */
  readonly scheduledFor: string;
  readonly attempt: number;
}

/** The parts of a run id, or null for anything `runId` cannot produce. */
export function parseRunId(id: string): RunIdParts | null {
  const match = RUN_ID_PATTERN.exec(id);
  if (match === null) {
    return null;
  }
  const [, jobId = "", year, month, day, hour, minute, second, millis, attemptText = ""] = match;
  const scheduledFor = `${year}-${month}-${day}T${hour}:${minute}:${second}.${millis}Z`;
  if (!isStorageIso(scheduledFor)) {
    return null;
  }
  return { jobId, scheduledFor, attempt: Number(attemptText) };
}

/**
 * The occurrence key `<jobId>@<scheduledForIso>`: the idempotency key handed
 * to handlers and sent to webhooks as `Idempotency-Key`. The attempt is left
 * out on purpose: a retry is the same occurrence, and the receiver must be
 * able to tell it apart from a new one.
 */
export function occurrenceKey(jobId: string, scheduledFor: Date | string): string {
  assertJobId(jobId);
  return `${jobId}@${toStorageIso(instantOf(scheduledFor))}`;
}
