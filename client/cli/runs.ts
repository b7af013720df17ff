import { type Command, InvalidArgumentError } from "commander";
import { FINAL_RUN_STATUSES, RUN_STATUSES, type Run, type RunStatus } from "../index.js";
import { waitOrAbort } from "../requests.js";
import { MAX_TIMEOUT_MS } from "../transport.js";
import { contextOf } from "./context.js";
import { CliExit, EXIT } from "./exit-codes.js";
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
        const listed = await firstRuns(
          context.client.runs.list(jobId, {
            pageSize: Math.min(Math.max(flags.limit, 1), 100),
            ...(flags.status ? { status: flags.status } : {}),
            ...(flags.from === undefined ? {} : { from: instantFlag(flags.from) }),
            ...(flags.to === undefined ? {} : { to: instantFlag(flags.to) }),
          }),
          flags.limit,
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
      context.print(await context.client.runs.get(jobId, runId), runFields);
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
      "follow a job's runs live until Ctrl-C: prints the runs running now, then each run as it starts and as it ends (JSON: one object a line); each poll reads the job's run history",
    )
    .argument("<job-id>", "the job's id")
    .option("--interval <ms>", "between polls", positiveWholeNumber(MAX_TIMEOUT_MS), 2000)
    .option(
      "--since <instant>",
      "runs that ended at or after this ISO-8601 instant are shown as new (default: when the command started)",
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
        flags: { interval: number; count?: number; timeout?: number; since?: string },
        command: Command,
      ) => {
        const context = contextOf(command, io);
        const everyRun = async () => {
          const runs: Run[] = [];
          for await (const run of context.client.runs.list(jobId, { pageSize: 100 }))
            runs.push(run);
          return runs.reverse();
        };
        const line = (run: Run) =>
          `${context.format === "json" ? json(run, 0) : fixedColumns(runRow(run))}\n`;
        const since =
          flags.since === undefined
            ? (io.startedAt ?? new Date()).getTime()
            : Date.parse(flags.since);
        if (Number.isNaN(since))
          throw new InvalidArgumentError(`--since: "${flags.since}" is not an ISO-8601 instant`);
        const before = await everyRun();
        // A run that ended since `since` is news even when it ended before the first read.
        const endedBefore = (run: Run) =>
          FINAL_RUN_STATUSES.includes(run.status) && Date.parse(run.finishedAt ?? "") < since;
        const seen = new Map(
          before
            .filter((run) => !FINAL_RUN_STATUSES.includes(run.status) || endedBefore(run))
            .map((run) => [run.runId, run.status]),
        );
        if (context.format === "table") io.stdout(`${fixedColumns(RUN_COLUMNS)}\n`);
        for (const run of before) if (run.status === "running") io.stdout(line(run));
        const deadline =
          flags.timeout === undefined
            ? Number.POSITIVE_INFINITY
            : Date.now() + flags.timeout * 1000;
        let ended = 0;
        while (!io.signal?.aborted) {
          for (const run of await everyRun()) {
            if (seen.get(run.runId) === run.status) continue;
            seen.set(run.runId, run.status);
            // A queued run is a plan (the dispatcher queues minutes ahead): shown once it starts or ends.
            if (run.status === "queued") continue;
            io.stdout(line(run));
            if (FINAL_RUN_STATUSES.includes(run.status)) ended += 1;
            if (flags.count !== undefined && ended >= flags.count) return;
          }
          if (Date.now() >= deadline) {
            if (flags.count === undefined) return;
            throw new CliExit(
              EXIT.timedOut,
              `runs watch: ${ended} of ${flags.count} runs ended within ${flags.timeout} s`,
            );
          }
          await waitOrAbort(
            Math.min(flags.interval, Math.max(0, deadline - Date.now())),
            io.signal,
          );
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
      const listed = await firstRuns(
        context.client.deadLetters.list({ pageSize: Math.min(Math.max(flags.limit, 1), 100) }),
        flags.limit,
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
      const run = await context.client.deadLetters.replay(
        runId,
        flags.idempotencyKey ? { idempotencyKey: flags.idempotencyKey } : {},
      );
      context.print(run, runFields);
    });
}
