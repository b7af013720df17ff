import { DateTime } from "luxon";
import { writeJson } from "../exact-json.js";
import type { BatchCreateResult, Job, Run, Schedule } from "../index.js";
import { runWhy } from "../run-why.js";
import { displayWidth } from "./display-width.js";

export type OutputFormat = "table" | "json";

/** Where a command writes; the bin passes the process's streams, tests collect the text. */
export interface CliIo {
  readonly stdout: (text: string) => void;
  readonly stderr: (text: string) => void;
  readonly env: Readonly<Record<string, string | undefined>>;
  /** When the command started (the process's start for the bin): `runs watch` shows runs ended since. */
  readonly startedAt?: Date;
  /** Aborted on Ctrl-C: `runs watch` stops and exits 0, a read (listing or not) stops and exits 130. */
  readonly signal?: AbortSignal;
  /**
   * Aborted just before the bin ends a command still running 2 s after Ctrl-C (exit 130): a
   * create, trigger, replay or rotation then in flight under the command's own key prints it.
   */
  readonly exiting?: AbortSignal;
  /**
   * How the client waits before a retry (default its own timer, raced with `signal`): a test of
   * what the CLI does once its retries are spent passes one that records the waits instead.
   */
  readonly retrySleep?: (ms: number) => Promise<void>;
  /**
   * Whether stderr is a terminal (the bin's process.stderr.isTTY): only then does a listing show
   * how far it has read (withProgress), which a script's stderr must not get. Unset: not one.
   */
  readonly stderrIsTty?: boolean;
  /**
   * The clock a listing's progress is timed by (default the monotonic performance.now), and the
   * client's (`retry.now`), which a Retry-After date is counted from (default Date.now).
   */
  readonly now?: () => number;
}

const SHORT_ESCAPES: Readonly<Record<string, string>> = { "\n": "\\n", "\r": "\\r", "\t": "\\t" };

/**
 * Characters a terminal draws in no column and a table would pad as one (U+200B-U+200D, the word
 * joiner and invisible operators U+2060-U+2064, U+FEFF, the tag characters U+E0001-U+E007F, every
 * other format character): a name of them put the row's real cells off their headers, so they
 * are escaped as controls are.
 */
const FORMAT = /^\p{Cf}$/u;

/**
 * Characters that are not C0 or C1 controls but that a terminal still acts on: the bidirectional
 * embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069), with which a name reorders the
 * rest of its line in a terminal that lays out right-to-left text (a row's status, another column's
 * id), the directional marks (U+200E, U+200F, U+061C), which turn the direction of the neutral
 * characters beside them (a column's spaces, another cell's punctuation), and the line and
 * paragraph separators (U+2028, U+2029).
 */
const isReordering = (code: number) =>
  (code >= 0x202a && code <= 0x202e) ||
  (code >= 0x2066 && code <= 0x2069) ||
  code === 0x200e ||
  code === 0x200f ||
  code === 0x061c ||
  code === 0x2028 ||
  code === 0x2029;

/** `\u202e`, or `\u{e0041}` for a code point beyond U+FFFF. */
const unicodeEscape = (code: number) =>
  code > 0xffff ? `\\u{${code.toString(16)}}` : `\\u${code.toString(16).padStart(4, "0")}`;

/**
 * Text as one line with nothing a terminal acts on: a line break, a tab or another control
 * character in a name or an error (an ESC starting a terminal sequence, say), or a bidirectional
 * override, is printed as its escape (`\n`, `\u001b`, `\u202e`), so a table keeps one line a row.
 * It takes any value, not only a string: the client checks the types of only some of an answer's
 * fields, and a server that is not the API (a wrong --api, a proxy) may answer a list or an object
 * where the API sends a string. Such a value is printed as its JSON text, escaped the same way;
 * walked as it was, `for…of` went over a list's elements and passed each one whole.
 */
export function printable(value: unknown): string {
  const text = typeof value === "string" ? value : writeJson(value);
  let shown = "";
  for (const char of text) {
    const code = char.codePointAt(0) ?? 0;
    const control =
      code < 0x20 || (code >= 0x7f && code <= 0x9f) || isReordering(code) || FORMAT.test(char);
    shown += control ? (SHORT_ESCAPES[char] ?? unicodeEscape(code)) : char;
  }
  return shown;
}

/**
 * Columns padded to their widest cell, by the columns a terminal draws (a CJK character takes two,
 * a combining mark none), not by UTF-16 length; the last column is not padded.
 */
export function table(
  unprintedHeaders: readonly string[],
  unprintedRows: readonly (readonly string[])[],
): string {
  // A header may name what the answer holds too (a preview's zone).
  const headers = unprintedHeaders.map(printable);
  const rows = unprintedRows.map((row) => row.map(printable));
  const widths = headers.map((header, column) =>
    Math.max(displayWidth(header), ...rows.map((row) => displayWidth(row[column] ?? ""))),
  );
  const line = (cells: readonly string[]) =>
    cells
      .map((cell, column) =>
        column === cells.length - 1
          ? cell
          : cell + " ".repeat(Math.max(0, (widths[column] ?? 0) - displayWidth(cell))),
      )
      .join("  ")
      .trimEnd();
  return [line(headers), ...rows.map(line)].join("\n");
}

/** One object as `name  value` lines. */
function fields(pairs: readonly (readonly [string, string])[]): string {
  const width = Math.max(...pairs.map(([name]) => name.length));
  return pairs.map(([name, value]) => `${name.padEnd(width)}  ${printable(value)}`).join("\n");
}

const dash = (value: string | number | null | undefined) =>
  value === null || value === undefined || value === "" ? "-" : String(value);

/** The zone a schedule's times read best in: the cron's zone, else UTC (stored instants are UTC). */
function zoneOf(schedule: Schedule): string {
  return "timezone" in schedule ? schedule.timezone : "UTC";
}

/** An instant in a zone, e.g. `2030-01-15 09:00:00 +01:00`. */
function inZone(iso: string | null, zone: string): string {
  if (iso === null) return "-";
  const time = DateTime.fromISO(iso, { setZone: true }).setZone(zone);
  return time.isValid ? time.toFormat("yyyy-MM-dd HH:mm:ss ZZ") : iso;
}

/** The schedule in words. */
export function describeSchedule(schedule: Schedule): string {
  if ("cron" in schedule) return `cron "${schedule.cron}" in ${schedule.timezone}`;
  if ("every" in schedule)
    return `every ${schedule.every}${schedule.startAt ? ` from ${schedule.startAt}` : ""}`;
  if ("after" in schedule)
    return `after ${schedule.after.jobs.join(", ")} on ${schedule.after.on ?? "success"}`;
  return `once at ${schedule.runAt}`;
}

function lastRunOf(job: Job): string {
  const last = job.lastRun;
  return last ? `${last.status} (${inZone(last.finishedAt, zoneOf(job.schedule))})` : "-";
}

/** Where a recurring job ends: at endAt, after maxRuns occurrences (with the count so far), or never. */
function endsOf(job: Job, zone: string): string {
  const parts = [
    ...(job.endAt ? [`at ${inZone(job.endAt, zone)}`] : []),
    ...(job.maxRuns !== null
      ? [`after ${job.maxRuns} runs (${job.occurrencesQueued} queued)`]
      : []),
  ];
  return parts.length > 0 ? parts.join(", or ") : "-";
}

export function jobFields(job: Job): string {
  const zone = zoneOf(job.schedule);
  const { retry, misfirePolicy, overlapPolicy, maxConcurrent, inFlight } = job.policies;
  return fields([
    ["id", job.id],
    ["name", job.name],
    ["type", job.type],
    ["status", job.status],
    ["schedule", describeSchedule(job.schedule)],
    ["next run", inZone(job.nextRunAt, zone)],
    ["ends", endsOf(job, zone)],
    ["last run", lastRunOf(job)],
    ["version", String(job.version)],
    ["priority", job.priority],
    ["timeout", `${job.timeoutSeconds} s`],
    ["window", job.window ?? "-"],
    [
      "retry",
      `${retry.maxAttempts} attempts, backoff ${retry.initialDelaySeconds}-${retry.maxDelaySeconds} s`,
    ],
    [
      "policies",
      `misfire ${misfirePolicy}, overlap ${overlapPolicy}${overlapPolicy === "allow" ? ` (max ${maxConcurrent})` : ""}, in flight ${inFlight}`,
    ],
    ["target", job.target ? job.target.url : "-"],
    ["dependents", job.dependents.length > 0 ? job.dependents.join(", ") : "-"],
    ["payload", job.payload === undefined || job.payload === null ? "-" : writeJson(job.payload)],
    ["created", job.createdAt],
    ["updated", job.updatedAt],
  ]);
}

export function jobsTable(jobs: readonly Job[]): string {
  return table(
    ["ID", "NAME", "TYPE", "STATUS", "SCHEDULE", "NEXT RUN", "LAST RUN"],
    jobs.map((job) => [
      job.id,
      job.name,
      job.type,
      job.status,
      describeSchedule(job.schedule),
      inZone(job.nextRunAt, zoneOf(job.schedule)),
      lastRunOf(job),
    ]),
  );
}

/** A batch create's results: each job's index, status, and its id or why it was refused. */
export function batchResultsTable(results: readonly BatchCreateResult[]): string {
  return table(
    ["#", "STATUS", "ID", "NAME", "ERROR"],
    results.map((r) => [
      String(r.index),
      String(r.status),
      r.job?.id ?? "-",
      r.job?.name ?? "-",
      r.error
        ? `${r.error.code}${r.error.field ? ` (${r.error.field})` : ""}: ${r.error.message}`
        : "-",
    ]),
  );
}

export function runFields(run: Run): string {
  return fields([
    ["run", run.runId],
    ["job", run.jobId],
    ["status", run.status],
    ["attempt", String(run.attempt)],
    ["scheduled for", run.scheduledFor],
    ["planned for", run.plannedFor],
    ["due at", run.dueAt],
    ["started", dash(run.startedAt)],
    ["finished", dash(run.finishedAt)],
    ["duration", run.durationMs === null ? "-" : `${run.durationMs} ms`],
    ["worker", dash(run.workerId)],
    ["error", dash(run.error)],
    ["reason", dash(run.reason)],
    ["job version", `${run.jobVersion} queued, ${dash(run.executedVersion)} executed`],
    ["replayed by", dash(run.replayedBy)],
    ["after", run.trigger ? `${run.trigger.runId} (job ${run.trigger.jobId})` : "-"],
    [
      "cancel",
      run.cancelRequestedAt === null
        ? "-"
        : `asked ${run.cancelRequestedAt} by ${dash(run.cancelledBy)}`,
    ],
  ]);
}

export function runRow(run: Run): string[] {
  return [
    run.runId,
    String(run.attempt),
    run.status,
    run.scheduledFor,
    dash(run.startedAt),
    run.durationMs === null ? "-" : `${run.durationMs} ms`,
    dash(runWhy(run)),
  ];
}

export const RUN_COLUMNS = [
  "RUN",
  "ATTEMPT",
  "STATUS",
  "SCHEDULED FOR",
  "STARTED",
  "DURATION",
  "ERROR / REASON",
];

export function runsTable(runs: readonly Run[]): string {
  return table(RUN_COLUMNS, runs.map(runRow));
}

/**
 * A character as JSON's `\u` escapes of its UTF-16 units: JSON has no `\u{…}`, so a tag character
 * (U+E0041) is its surrogate pair, `\udb40\udc41`, which any parser reads back as the one character.
 */
const jsonEscape = (char: string) => {
  let escaped = "";
  for (let unit = 0; unit < char.length; unit++) escaped += unicodeEscape(char.charCodeAt(unit));
  return escaped;
};

/**
 * JSON as JSON.stringify writes it, with the characters it leaves as they are that a terminal acts
 * on (DEL, the C1 controls, among them U+009B, an 8-bit CSI; the bidirectional overrides and the
 * line separators of isReordering) or draws as nothing (the format characters, U+200B or U+FEFF:
 * a name `a\u200bb` looked like `ab` and was another name) written as `\u` escapes: the same
 * values, read back by any parser, and `-o json` in a terminal prints nothing the terminal obeys
 * or hides. Outside strings JSON is ASCII, so every such character is inside a string, where an
 * escape is valid.
 */
export function json(value: unknown, indent: 2 | 0 = 2): string {
  let text = "";
  // JSON.stringify answers undefined for undefined: null is what a script can read.
  // A payload's number a double would change (a LosslessNumber) written as its digits.
  for (const char of value === undefined ? "null" : writeJson(value, indent)) {
    const code = char.codePointAt(0) ?? 0;
    const escaped = (code >= 0x7f && code <= 0x9f) || isReordering(code) || FORMAT.test(char);
    text += escaped ? jsonEscape(char) : char;
  }
  return text;
}
