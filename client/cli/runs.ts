import { type Command, InvalidArgumentError } from "commander";
import { FINAL_RUN_STATUSES, RUN_STATUSES, type Run, type RunStatus } from "../index.js";
import { waitOrAbort } from "../requests.js";
import { LOOK_BACK_MS, pagedRunPolls, unsureUpTo } from "../run-follow.js";
import { MAX_TIMEOUT_MS } from "../transport.js";
import { contextOf } from "./context.js";
import { CliExit, EXIT } from "./exit-codes.js";
import { readInterruptibly } from "./interrupt.js";
import { idempotencyKeyArg, positiveWholeNumber, wholeNumber } from "./job-options.js";
import {
  type CliIo,
  json,
  printable,
  RUN_COLUMNS,
  runFields,
  runRow,
  runsTable,
  table,
} from "./output.js";
import { withOwnKey } from "./own-key.js";
import { type ListingOptions, withProgress } from "./progress.js";

async function firstRuns(list: AsyncIterable<Run>, limit: number): Promise<Run[]> {
  const runs: Run[] = [];
  if (limit === 0) return runs;
  for await (const run of list) {
    runs.push(run);
    if (runs.length >= limit) break;
  }
  return runs;
}

/** An instant flag as given, or the present for `now`. */
const instantFlag = (value: string): string | Date => (value === "now" ? new Date() : value);

const INSTANT =
  /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d{1,9}))?)?(Z|[+-]\d{2}(?::?\d{2})?)?$/;

/**
 * `--since`: an ISO-8601 date-time with "Z" or a UTC offset, as the API takes its instants, in ms.
 * Date.parse took far more and read it otherwise: `1` and `Dec 3` as days of 2001, a time without
 * a zone in the machine's own, and February 30 as March 2; here each is a usage error.
 */
function sinceInstant(raw: string): number {
  const match = INSTANT.exec(raw.trim());
  const problem = (why: string) =>
    new InvalidArgumentError(
      `${JSON.stringify(raw)} ${why}; give an ISO-8601 date-time with "Z" or a UTC offset, such as 2026-03-08T07:30:00Z or 2026-03-08T02:30:00-05:00.`,
    );
  if (match === null) throw problem("is not an ISO-8601 date-time");
  const [, year, month, day, hour, minute, second = "0", fraction = "0", offset] = match;
  if (offset === undefined) throw problem("has no Z or UTC offset, so it names no one instant");
  const fields = [year, month, day, hour, minute, second].map(Number);
  const [y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0] = fields;
  const time = new Date(0);
  time.setUTCFullYear(y, mo - 1, d);
  time.setUTCHours(h, mi, s, Number(fraction.slice(0, 3).padEnd(3, "0")));
  const [sign, offsetHours, offsetMinutes] =
    offset === "Z"
      ? [1, 0, 0]
      : [offset.startsWith("-") ? -1 : 1, Number(offset.slice(1, 3)), Number(offset.slice(-2))];
  const real =
    time.getUTCFullYear() === y &&
    time.getUTCMonth() === mo - 1 &&
    time.getUTCDate() === d &&
    time.getUTCHours() === h &&
    time.getUTCMinutes() === mi &&
    time.getUTCSeconds() === s &&
    offsetHours <= 23 &&
    (offset.length <= 3 || offsetMinutes <= 59);
  if (!real) throw problem("is not a real date-time");
  const offsetMs =
    offset.length <= 3 ? offsetHours * 3_600_000 : (offsetHours * 60 + offsetMinutes) * 60_000;
  return time.getTime() - sign * offsetMs;
}

/** `--status succeeded,failed`: run statuses separated by commas. */
function runStatuses(value: string): RunStatus[] {
  const names = value.split(",").map((name) => name.trim().toLowerCase());
  const known = (name: string): name is RunStatus => RUN_STATUSES.some((status) => status === name);
  const unknown = names.find((name) => !known(name));
  if (unknown !== undefined)
    throw new InvalidArgumentError(
      `"${unknown}" is not a run status; give any of ${RUN_STATUSES.join(", ")}, separated by commas`,
    );
  return names.filter(known);
}

/** Runs a page `runs watch` reads, the most the API gives. */
const WATCH_PAGE = 100;

// Lines printed one at a time cannot be measured together: runs ids are about 48 characters.
const WATCH_WIDTHS = [48, 7, 9, 24, 24, 9];
const fixedColumns = (cells: readonly string[]) =>
  cells
    .map((cell, column) => printable(cell).padEnd(WATCH_WIDTHS[column] ?? 0))
    .join("  ")
    .trimEnd();

export function runsCommand(program: Command, io: CliIo): void {
  const runs = program.command("runs").description("what ran, when, where, and why not");

  runs
    .command("list")
    .description("a job's runs, newest occurrence first")
    .argument("<job-id>", "the job's id")
    .option("--limit <n>", "at most this many (pages are followed)", wholeNumber, 20)
    .option(
      "--status <list>",
      `only runs of these statuses, separated by commas (${RUN_STATUSES.join(", ")})`,
      runStatuses,
    )
    .option("--from <instant>", "only occurrences at or after this ISO-8601 instant")
    .option("--to <instant>", "only occurrences before this ISO-8601 instant (`now`: the present)")
    .action(
      async (
        jobId: string,
        flags: { limit: number; status?: RunStatus[]; from?: string; to?: string },
        command: Command,
      ) => {
        const context = contextOf(command, io);
        const filtered = flags.status !== undefined;
        const listed = await withProgress(io, { noun: "run", filtered }, (listing) =>
          firstRuns(
            context.client.runs.list(jobId, {
              pageSize: Math.min(Math.max(flags.limit, 1), 100),
              ...(flags.status ? { status: flags.status } : {}),
              ...(flags.from === undefined ? {} : { from: instantFlag(flags.from) }),
              ...(flags.to === undefined ? {} : { to: instantFlag(flags.to) }),
              ...listing,
            }),
            flags.limit,
          ),
        );
        context.print(listed, runsTable);
      },
    );

  runs
    .command("get")
    .description("one run: status, times, worker, error, reason")
    .argument("<job-id>", "the job's id")
    .argument("<run-id>", "the run's id")
    .action(async (jobId: string, runId: string, _flags, command: Command) => {
      const context = contextOf(command, io);
      const run = await readInterruptibly(io, (options) =>
        context.client.runs.get(jobId, runId, options),
      );
      context.print(run, runFields);
    });

  runs
    .command("cancel")
    .description(
      "cancel one run: a queued run ends cancelled now, a running one within a heartbeat (prints the run)",
    )
    .argument("<job-id>", "the job's id")
    .argument("<run-id>", "the run's id")
    .action(async (jobId: string, runId: string, _flags, command: Command) => {
      const context = contextOf(command, io);
      context.print(await context.client.jobs.handle(jobId).cancelRun(runId), runFields);
    });

  runs
    .command("watch")
    .description(
      "follow a job's runs live until Ctrl-C: prints the runs running now, then each run as it starts and as it ends (JSON: one object a line); the first poll reads the newest page of runs and those since --since, each later one the runs that can have changed",
    )
    .argument("<job-id>", "the job's id")
    .option("--interval <ms>", "between polls", positiveWholeNumber(MAX_TIMEOUT_MS), 2000)
    .option(
      "--since <instant>",
      "runs that ended at or after this ISO-8601 instant (with Z or an offset) are shown as new (default: when the command started)",
      sinceInstant,
    )
    .option(
      "--count <n>",
      `stop once this many runs reached a final status while watched (exits ${EXIT.ok})`,
      positiveWholeNumber(),
    )
    .option(
      "--timeout <seconds>",
      `stop after this long: exits ${EXIT.ok}, or ${EXIT.timedOut} when --count was not reached`,
      positiveWholeNumber(),
    )
    .action(
      async (
        jobId: string,
        flags: { interval: number; count?: number; timeout?: number; since?: number },
        command: Command,
      ) => {
        const context = contextOf(command, io);
        const since = flags.since ?? (io.startedAt ?? new Date()).getTime();
        // The first read is the newest page, and further pages only down to the occurrences of
        // the look-back before `since` (what it shows: the runs running now, those ended since);
        // each later one the runs that can have changed (runPolls).
        const firstFloor = Math.min(since, Date.now()) - LOOK_BACK_MS;
        // The poll in progress's onPage, told of each page it reads, and Ctrl-C's signal (withProgress).
        let listing: ListingOptions = {};
        const poll = pagedRunPolls(
          (from) =>
            context.client.runs.list(jobId, {
              pageSize: WATCH_PAGE,
              ...(from === undefined ? {} : { from }),
              ...listing,
            }),
          firstFloor,
          WATCH_PAGE,
          // The machine's clock, as `since` (the command's start) is.
          Date.now,
        );
        // The runs read, oldest first; null once Ctrl-C aborted the read (or the wait before a
        // retry of it), which ends the watch at once rather than when the API answers.
        const everyRun = async (): Promise<Run[] | null> => {
          try {
            const read = await withProgress(io, { noun: "run", filtered: false }, (given) => {
              listing = given;
              return poll();
            });
            return read.reverse();
          } catch (error) {
            if (io.signal?.aborted) return null;
            throw error;
          }
        };
        const line = (run: Run) =>
          `${context.format === "json" ? json(run, 0) : fixedColumns(runRow(run))}\n`;
        const before = await everyRun();
        if (before === null) return;
        // A run that ended since `since` is news even when it ended before the first read.
        const endedBefore = (run: Run) =>
          FINAL_RUN_STATUSES.includes(run.status) && Date.parse(run.finishedAt ?? "") < since;
        const seen = new Map(
          before
            .filter((run) => !FINAL_RUN_STATUSES.includes(run.status) || endedBefore(run))
            .map((run) => [run.runId, run.status]),
        );
        // A run a later poll finds where the first may not have read every run, ended before
        // `since`, is no news either: the first read would have passed over it.
        const unsure = unsureUpTo(before, WATCH_PAGE);
        const oldNews = (run: Run) =>
          !seen.has(run.runId) && endedBefore(run) && Date.parse(run.scheduledFor) <= unsure;
        if (context.format === "table") io.stdout(`${fixedColumns(RUN_COLUMNS)}\n`);
        for (const run of before) if (run.status === "running") io.stdout(line(run));
        // On the monotonic clock: --timeout is real time elapsed, whatever the wall clock does.
        const deadline =
          flags.timeout === undefined
            ? Number.POSITIVE_INFINITY
            : performance.now() + flags.timeout * 1000;
        let ended = 0;
        // The first pass shows what the first read found that ended since `since`.
        let runs: Run[] | null = before;
        while (!io.signal?.aborted) {
          if (runs === null) return;
          for (const run of runs) {
            if (seen.get(run.runId) === run.status || oldNews(run)) continue;
            seen.set(run.runId, run.status);
            // A queued run is a plan (the dispatcher queues minutes ahead): shown once it starts or ends.
            if (run.status === "queued") continue;
            io.stdout(line(run));
            if (FINAL_RUN_STATUSES.includes(run.status)) ended += 1;
            if (flags.count !== undefined && ended >= flags.count) return;
          }
          if (performance.now() >= deadline) {
            if (flags.count === undefined) return;
            throw new CliExit(
              EXIT.timedOut,
              `runs watch: ${ended} of ${flags.count} runs ended within ${flags.timeout} s`,
            );
          }
          await waitOrAbort(
            Math.min(flags.interval, Math.max(0, deadline - performance.now())),
            io.signal,
          );
          if (io.signal?.aborted) return;
          runs = await everyRun();
        }
      },
    );
}

export function deadLettersCommand(program: Command, io: CliIo): void {
  const deadLetters = program
    .command("dead-letters")
    .description("dead runs not yet replayed, and replaying them");

  deadLetters
    .command("list")
    .description("dead runs not yet replayed, newest first")
    .option("--limit <n>", "at most this many (pages are followed)", wholeNumber, 20)
    .action(async (flags: { limit: number }, command: Command) => {
      const context = contextOf(command, io);
      const listed = await withProgress(io, { noun: "run", filtered: false }, (listing) =>
        firstRuns(
          context.client.deadLetters.list({
            pageSize: Math.min(Math.max(flags.limit, 1), 100),
            ...listing,
          }),
          flags.limit,
        ),
      );
      context.print(listed, (runs) =>
        table(
          ["JOB", ...RUN_COLUMNS],
          runs.map((run) => [run.jobId, ...runRow(run)]),
        ),
      );
    });

  deadLetters
    .command("replay")
    .description("run a dead occurrence again as its next attempt; prints the new run")
    .argument("<run-id>", "the dead run's id")
    .option(
      "--idempotency-key <key>",
      "the same key on the same dead run prints the run its first replay queued",
      idempotencyKeyArg,
    )
    .action(async (runId: string, flags: { idempotencyKey?: string }, command: Command) => {
      const context = contextOf(command, io);
      const run = await withOwnKey(context, "replay", flags.idempotencyKey, (idempotencyKey) =>
        context.client.deadLetters.replay(runId, { idempotencyKey }),
      );
      context.print(run, runFields);
    });
}
