import { type Command, InvalidArgumentError } from "commander";
import type { Preview } from "../index.js";
import { contextOf } from "./context.js";
import { readInterruptibly } from "./interrupt.js";
import { addScheduleOptions, idempotencyKeyArg, scheduleFrom, wholeNumber } from "./job-options.js";
import { type CliIo, describeSchedule, printable, table } from "./output.js";
import { withOwnKey } from "./own-key.js";

function previewTable(preview: Preview): string {
  // A job with a jitter window: each occurrence's planned time, a column of its own.
  const jittered = preview.occurrences.some((occurrence) => occurrence.plannedFor !== undefined);
  return [
    printable(`${describeSchedule(preview.schedule)}; times in ${preview.timezone}`),
    table(
      ["#", `LOCAL (${preview.timezone})`, "UTC", ...(jittered ? ["PLANNED (UTC)"] : [])],
      preview.occurrences.map((occurrence, index) => [
        String(index + 1),
        occurrence.local,
        occurrence.utc,
        ...(jittered ? [occurrence.plannedFor ?? "-"] : []),
      ]),
    ),
  ].join("\n");
}

export function schedulesCommand(program: Command, io: CliIo): void {
  const schedules = program
    .command("schedules")
    .description("check schedules before trusting them");

  addScheduleOptions(
    schedules
      .command("preview")
      .description(
        "the next occurrences of a schedule (or of a job, with --job), in its own zone and in UTC",
      )
      .option("--job <id>", "preview this job's schedule instead")
      .option("--count <n>", "how many occurrences (default 5, at most 100)", wholeNumber)
      .option(
        "--from <instant>",
        "occurrences at or after this ISO-8601 instant, such as a DST night months ahead (default now; one before now shows only what still runs)",
      )
      .option(
        "--end-at <instant>",
        "recurring schedules: stop at this ISO-8601 instant, as a job's endAt would",
      )
      .option(
        "--max-runs <n>",
        "recurring schedules: stop after this many occurrences, as a job's maxRuns would",
        wholeNumber,
      ),
  ).action(async (flags, command: Command) => {
    const context = contextOf(command, io);
    const schedule = scheduleFrom(flags);
    const end = {
      ...(flags.endAt !== undefined ? { endAt: flags.endAt } : {}),
      ...(flags.maxRuns !== undefined ? { maxRuns: flags.maxRuns } : {}),
    };
    let preview: Preview;
    if (flags.job !== undefined) {
      if (schedule !== undefined)
        throw new InvalidArgumentError("give either --job or a schedule, not both");
      if (Object.keys(end).length > 0)
        throw new InvalidArgumentError(
          "--end-at and --max-runs go with a schedule; a job's preview stops at the job's own end",
        );
      const job = context.client.jobs.handle(flags.job);
      preview = await readInterruptibly(io, (options) =>
        job.preview(flags.count, flags.from, options),
      );
    } else {
      if (schedule === undefined)
        throw new InvalidArgumentError(
          "give a schedule (--run-at, --cron with --timezone, or --every) or --job",
        );
      preview = await readInterruptibly(io, (options) =>
        context.client.schedules.preview(schedule, flags.count, flags.from, end, options),
      );
    }
    context.print(preview, previewTable);
  });
}

export function webhookSecretCommand(program: Command, io: CliIo): void {
  const secret = program
    .command("webhook-secret")
    .description("the secret your webhook deliveries are signed with");

  secret
    .command("get")
    .description("the current secret (made on first use)")
    .action(async (_flags, command: Command) => {
      const context = contextOf(command, io);
      const secret = await readInterruptibly(io, (options) =>
        context.client.webhookSecret.get(options),
      );
      context.print({ secret }, (s) => printable(s.secret));
    });

  secret
    .command("rotate")
    .description("a new secret; deliveries carry signatures of both for 24 hours")
    .option(
      "--idempotency-key <key>",
      "the same key within 24 hours answers the secret its rotation made, and rotates nothing",
      idempotencyKeyArg,
    )
    .action(async (flags: { idempotencyKey?: string }, command: Command) => {
      const context = contextOf(command, io);
      const secret = await withOwnKey(context, "rotate", flags.idempotencyKey, (idempotencyKey) =>
        context.client.webhookSecret.rotate({ idempotencyKey }),
      );
      context.print({ secret }, (s) => printable(s.secret));
    });
}
