import { readFileSync } from "node:fs";
import { type Command, InvalidArgumentError, Option } from "commander";
import { isRecord } from "../answers.js";
import { readJson } from "../exact-json.js";
import type { EditJobRequest, Job, NewJob, Schedule } from "../index.js";

/**
 * `raw` as a whole number (digits alone), or NaN. One past 2^53 is kept, rounded: every bound an
 * option has lies below it, so the API (or the option's own check) refuses it naming that bound.
 */
const wholeOrNaN = (raw: string): number => (/^\d+$/.test(raw.trim()) ? Number(raw) : Number.NaN);

/** A whole number for an option; commander reports the error as a usage error. */
export function wholeNumber(raw: string): number {
  const value = wholeOrNaN(raw);
  if (Number.isNaN(value)) throw new InvalidArgumentError(`"${raw}" is not a whole number.`);
  // Past a double's range it is Infinity, which JSON sends as null: for a quota, no limit.
  if (!Number.isFinite(value)) throw new InvalidArgumentError(`"${raw}" is too large.`);
  return value;
}

/**
 * A whole number above 0, and up to `most`, for an option the CLI acts on itself (the API checks
 * the others): a poll every 0 ms, or every more than Node's longest timer (which fires at once),
 * would read the API without a pause.
 */
export function positiveWholeNumber(most: number = Number.POSITIVE_INFINITY) {
  const bound = Number.isFinite(most) ? ` and up to ${most}` : "";
  return (raw: string): number => {
    const value = wholeNumber(raw);
    if (!(value > 0 && value <= most))
      throw new InvalidArgumentError(`"${raw}" is not a whole number above 0${bound}.`);
    return value;
  };
}

/**
 * An Idempotency-Key as the API takes one: 1 to 200 visible ASCII characters. Refused here, before
 * any request: an empty one would otherwise read as no key at all, and the command would run
 * unkeyed, a retry of it no longer the same request.
 */
export function idempotencyKeyArg(raw: string): string {
  if (!/^[\x21-\x7E]{1,200}$/.test(raw))
    throw new InvalidArgumentError(
      `${JSON.stringify(raw)} is not 1 to 200 visible ASCII characters.`,
    );
  return raw;
}

/**
 * An option that "none" clears: sent as null, which removes the field on edit. (Commander
 * turns a parser's null into "", so "none" is kept until the body is made.)
 */
const NONE = "none";
function orNone<T>(parse: (raw: string) => T): (raw: string) => T | typeof NONE {
  return (raw) => (raw.trim() === NONE ? NONE : parse(raw));
}
const noneAsNull = <T>(value: T | typeof NONE | undefined): T | null | undefined =>
  value === NONE ? null : value;

/** JSON as written, a number a double would change kept as its digits (a payload's 64-bit id). */
function jsonValue(raw: string): unknown {
  try {
    return readJson(raw);
  } catch (error) {
    throw new InvalidArgumentError(`not JSON: ${(error as Error).message}`);
  }
}

/**
 * `--payload`'s JSON, boxed: commander turns a parser's null into "", so `--payload null` sent the
 * string "" rather than no payload.
 */
function payloadArg(raw: string): { readonly json: unknown } {
  return { json: jsonValue(raw) };
}

function jsonObject(raw: string, what: string): Record<string, unknown> {
  const value = jsonValue(raw);
  if (!isRecord(value)) throw new InvalidArgumentError(`${what} must be a JSON object.`);
  return value;
}

function readText(path: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch (error) {
    throw new InvalidArgumentError(`cannot read ${path}: ${(error as Error).message}`);
  }
}

function bodyFile(path: string): Record<string, unknown> {
  return jsonObject(readText(path), path);
}

/** A batch's jobs from a file: `{ "jobs": [...] }` or the list itself, sent as given (the API checks each). */
export function batchFile(path: string): NewJob[] {
  const value = jsonValue(readText(path));
  const jobs = isRecord(value) && "jobs" in value ? value.jobs : value;
  if (!Array.isArray(jobs))
    throw new InvalidArgumentError(`${path} must hold a JSON list of jobs, or { "jobs": [...] }.`);
  return jobs as NewJob[];
}

function header(raw: string, previous: Record<string, string> = {}): Record<string, string> {
  const at = raw.indexOf(":");
  if (at < 1) throw new InvalidArgumentError(`"${raw}" is not "Name: value".`);
  return { ...previous, [raw.slice(0, at).trim()]: raw.slice(at + 1).trim() };
}

/** The schedule flags every command that takes a schedule shares. */
export function addScheduleOptions(command: Command): Command {
  return command
    .option("--run-at <instant>", "once, at this ISO-8601 instant (with Z or an offset)")
    .option("--cron <expression>", "a cron of 5 fields (or 6 with seconds); needs --timezone")
    .option("--timezone <zone>", 'the cron\'s IANA zone, e.g. "Europe/Berlin" or "UTC"')
    .option("--every <duration>", "a fixed ISO-8601 duration, e.g. PT15M")
    .option("--start-at <instant>", "with --every: the first occurrence (default: now)")
    .option(
      "--after <ids>",
      "run after these jobs (comma-separated ids): each of their runs that ends as --on says queues one run",
      jobIds,
    )
    .addOption(
      new Option(
        "--on <ending>",
        "with --after: which ending of an upstream run (default: success)",
      ).choices(["success", "failure", "completion"]),
    );
}

function jobIds(raw: string): string[] {
  const ids = raw
    .split(",")
    .map((id) => id.trim())
    .filter((id) => id !== "");
  if (ids.length === 0)
    throw new InvalidArgumentError("give one or more job ids, comma-separated.");
  return ids;
}

interface ScheduleFlags {
  readonly runAt?: string;
  readonly cron?: string;
  readonly timezone?: string;
  readonly every?: string;
  readonly startAt?: string;
  readonly after?: string[];
  readonly on?: string;
}

/**
 * The schedule the flags spell, or undefined when none is given. Several at
 * once are sent as they are: the API answers which combination is wrong.
 */
export function scheduleFrom(flags: ScheduleFlags): Schedule | undefined {
  const given = {
    ...(flags.runAt !== undefined ? { runAt: flags.runAt } : {}),
    ...(flags.cron !== undefined ? { cron: flags.cron } : {}),
    ...(flags.timezone !== undefined ? { timezone: flags.timezone } : {}),
    ...(flags.every !== undefined ? { every: flags.every } : {}),
    ...(flags.startAt !== undefined ? { startAt: flags.startAt } : {}),
    ...(flags.after !== undefined || flags.on !== undefined
      ? { after: { jobs: flags.after ?? [], ...(flags.on !== undefined ? { on: flags.on } : {}) } }
      : {}),
  };
  return Object.keys(given).length === 0 ? undefined : (given as Schedule);
}

/** The flags of create and edit: each sets one field of the body. */
export function addDefinitionOptions(command: Command): Command {
  return addScheduleOptions(command)
    .option("--name <name>", "a name (default: the type)")
    .option("--payload <json>", "any JSON handed to the handler (POSTed by http jobs)", payloadArg)
    .option("--url <url>", "http jobs: where to POST the payload")
    .option("--header <name: value>", "http jobs: a header to send (repeatable)", header)
    .option("--target-timeout <seconds>", "http jobs: per-delivery timeout", wholeNumber)
    .option("--max-attempts <n>", "attempts in all, the first included", wholeNumber)
    .option("--initial-delay <seconds>", "backoff after the first failure, doubling", wholeNumber)
    .option("--max-delay <seconds>", "largest backoff", wholeNumber)
    .addOption(
      new Option("--misfire <policy>", "occurrences missed by more than the grace").choices([
        "skip",
        "fire_once",
        "fire_all",
      ]),
    )
    .addOption(
      new Option("--overlap <policy>", "a run due while another still runs").choices([
        "skip",
        "buffer_one",
        "allow",
      ]),
    )
    .option("--max-concurrent <n>", 'runs at once, with --overlap "allow"', wholeNumber)
    .addOption(new Option("--priority <priority>").choices(["high", "normal", "low"]))
    .option("--timeout <seconds>", "a run is aborted after this long", wholeNumber)
    .option(
      "--end-at <instant>",
      'recurring jobs: no occurrence after this ISO-8601 instant runs ("none" removes it)',
      orNone((raw) => raw),
    )
    .option(
      "--max-runs <n>",
      'recurring jobs: occurrences queued in all, then the job completes ("none" removes it)',
      orNone(wholeNumber),
    )
    .option(
      "--window <duration>",
      'jitter: each run starts at a stable offset inside this ISO-8601 duration (e.g. PT5M), at most the period; on edit, "none" removes it',
    )
    .option("--body <json>", "the whole request body as JSON; the flags above override it")
    .option("--file <path>", "the whole request body from a JSON file; the flags override it");
}

interface DefinitionFlags extends ScheduleFlags {
  readonly name?: string;
  readonly payload?: { readonly json: unknown };
  readonly url?: string;
  readonly header?: Record<string, string>;
  readonly targetTimeout?: number;
  readonly maxAttempts?: number;
  readonly initialDelay?: number;
  readonly maxDelay?: number;
  readonly misfire?: string;
  readonly overlap?: string;
  readonly maxConcurrent?: number;
  readonly priority?: string;
  readonly timeout?: number;
  readonly endAt?: string;
  readonly maxRuns?: number | typeof NONE;
  readonly window?: string;
  readonly body?: string;
  readonly file?: string;
}

const defined = <T extends Record<string, unknown>>(fields: T) =>
  Object.fromEntries(Object.entries(fields).filter(([, value]) => value !== undefined));

/** The body --file and --body spell, --body's fields over the file's. */
function baseOf(flags: DefinitionFlags): Record<string, unknown> {
  return {
    ...(flags.file !== undefined ? bodyFile(flags.file) : {}),
    ...(flags.body !== undefined ? jsonObject(flags.body, "--body") : {}),
  };
}

/**
 * `over`'s headers added to `base`'s, each replacing the one of its name in any casing, as the
 * flags spell it: header names are case-insensitive, and the API refuses one given twice.
 */
function headersOver(
  base: Readonly<Record<string, string>> | undefined,
  over: Readonly<Record<string, string>> | undefined,
): Record<string, string> {
  const named = new Set(Object.keys(over ?? {}).map((name) => name.toLowerCase()));
  const kept = Object.entries(base ?? {}).filter(([name]) => !named.has(name.toLowerCase()));
  return { ...Object.fromEntries(kept), ...over };
}

/**
 * The body the flags spell, over --file and --body. Values are not checked
 * here: the API checks them and names the field it refuses.
 */
function definitionFrom(flags: DefinitionFlags): Record<string, unknown> {
  const base = baseOf(flags);
  const baseTarget = (base.target ?? {}) as Record<string, unknown>;
  const baseRetry = (base.retry ?? {}) as Record<string, unknown>;
  const target = {
    ...baseTarget,
    ...defined({
      url: flags.url,
      headers:
        flags.header === undefined
          ? undefined
          : headersOver(baseTarget.headers as Record<string, string> | undefined, flags.header),
      timeoutSeconds: flags.targetTimeout,
    }),
  };
  const retry = {
    ...baseRetry,
    ...defined({
      maxAttempts: flags.maxAttempts,
      initialDelaySeconds: flags.initialDelay,
      maxDelaySeconds: flags.maxDelay,
    }),
  };
  // Only the flags given override the body: a flag not given must not drop the body's field.
  return {
    ...base,
    ...defined({
      name: flags.name,
      schedule: scheduleFrom(flags),
      payload: flags.payload === undefined ? undefined : flags.payload.json,
      target: Object.keys(target).length > 0 ? target : undefined,
      retry: Object.keys(retry).length > 0 ? retry : undefined,
      misfirePolicy: flags.misfire,
      overlapPolicy: flags.overlap,
      maxConcurrent: flags.maxConcurrent,
      priority: flags.priority,
      timeoutSeconds: flags.timeout,
      endAt: noneAsNull(flags.endAt),
      maxRuns: noneAsNull(flags.maxRuns),
      window: flags.window === "none" ? null : flags.window,
    }),
  };
}

export function createBodyFrom(
  flags: DefinitionFlags & { type?: string; idempotencyKey?: string },
): NewJob {
  // "none" on create is no end and no window: the field left out (a create takes no null there),
  // the --body's or --file's too.
  const cleared = new Set<string>(
    (
      [
        ["endAt", flags.endAt],
        ["maxRuns", flags.maxRuns],
        ["window", flags.window],
      ] as const
    )
      .filter(([, value]) => value === NONE)
      .map(([field]) => field),
  );
  const body = Object.fromEntries(
    Object.entries(definitionFrom(flags)).filter(([field]) => !cleared.has(field)),
  );
  // Sent as given; the API's 400 names a missing or unknown type or schedule.
  return defined({
    ...body,
    ...(flags.type !== undefined ? { type: flags.type } : {}),
  }) as NewJob;
}

export function editBodyFrom(flags: DefinitionFlags & { inFlight?: string }): EditJobRequest {
  return defined({ ...definitionFrom(flags), inFlight: flags.inFlight }) as EditJobRequest;
}

/**
 * Whether `jobs edit`'s target flags (--url, --header, --target-timeout) change part of the target:
 * given without a target in --body or --file. PATCH replaces a job's whole target, so such an edit
 * is laid over the job's target as read (overTarget); a target in --body or --file is sent whole.
 */
export function editsPartOfTarget(flags: DefinitionFlags): boolean {
  const given = [flags.url, flags.header, flags.targetTimeout].some((flag) => flag !== undefined);
  return given && !("target" in baseOf(flags));
}

/**
 * The edit with its target laid over the job's `current` one: the parts the flags name change
 * (headers added or replaced by name, in any casing), the rest (the receiver's other headers,
 * often its credentials, the delivery timeout, the mode) is sent as it was, not dropped.
 */
export function overTarget(edit: EditJobRequest, current: Job["target"]): EditJobRequest {
  if (edit.target === undefined || edit.target === null) return edit;
  if (current === undefined || current === null) return edit;
  const headers = headersOver(current.headers, edit.target.headers);
  return {
    ...edit,
    target: {
      ...current,
      ...edit.target,
      ...(Object.keys(headers).length > 0 ? { headers } : {}),
    },
  };
}
