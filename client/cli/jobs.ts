import { type Command, Option } from "commander";
import { SchedulerApiError } from "../errors.js";
import type { Job } from "../index.js";
import { contextOf } from "./context.js";
import { CliExit, EXIT, exitCodeOf } from "./exit-codes.js";
import { readInterruptibly } from "./interrupt.js";
import {
  addDefinitionOptions,
  batchFile,
  createBodyFrom,
  editBodyFrom,
  editsPartOfTarget,
  idempotencyKeyArg,
  overTarget,
  wholeNumber,
} from "./job-options.js";
import {
  batchResultsTable,
  type CliIo,
  jobFields,
  jobsTable,
  printable,
  runFields,
} from "./output.js";
import { withOwnKey } from "./own-key.js";
import { withProgress } from "./progress.js";

const NO_KEY_HELP =
  "send no Idempotency-Key (fewer writes; a lost answer is then not retried, exit 1)";

interface KeyFlags {
  /** --idempotency-key's key, or false for --no-idempotency-key. */
  readonly idempotencyKey?: string | false;
}

export function jobsCommand(program: Command, io: CliIo): void {
  const jobs = program.command("jobs").description("schedule jobs and change them");

  addDefinitionOptions(
    jobs
      .command("create")
      .description("schedule a job (flags, or a whole body with --body / --file)")
      .option("--type <type>", "the job type: http, noop, or a registered one")
      .option(
        "--idempotency-key <key>",
        "the same key and body return the first job",
        idempotencyKeyArg,
      )
      .option("--no-idempotency-key", NO_KEY_HELP),
  ).action(async (flags, command: Command) => {
    const context = contextOf(command, io);
    const body = createBodyFrom(flags);
    const given: KeyFlags["idempotencyKey"] = flags.idempotencyKey;
    if (given === false && body.idempotencyKey !== undefined)
      throw new CliExit(
        EXIT.usage,
        "--no-idempotency-key: the --body or --file carries an idempotencyKey",
      );
    const handle = await withOwnKey(
      context,
      "create",
      given ?? body.idempotencyKey,
      (idempotencyKey) => context.client.jobs.create(body, { idempotencyKey }),
    );
    context.print(handle.job, (job) => (job ? jobFields(job) : printable(handle.id)));
  });

  jobs
    .command("create-batch")
    .description(
      "schedule up to 25 jobs in one request, each answered on its own (POST /jobs:batch)",
    )
    .requiredOption(
      "--file <path>",
      'a JSON file: { "jobs": [ ... ] } or the list itself, each job a create body (its idempotencyKey in it)',
    )
    .action(async (flags: { file: string }, command: Command) => {
      const context = contextOf(command, io);
      const results = await context.client.jobs.createBatch(batchFile(flags.file));
      context.print(results, batchResultsTable);
      const refused = results.filter((r) => r.status >= 300);
      const first = refused[0];
      if (first !== undefined) {
        // A refusal without its error (from something that is not the API) is unforeseen: 1.
        throw new CliExit(
          first.error
            ? exitCodeOf(new SchedulerApiError(first.status, first.error.code, first.error.message))
            : EXIT.failed,
          `${refused.length} of ${results.length} jobs were not created`,
        );
      }
    });

  jobs
    .command("list")
    .description("the jobs, newest first")
    .addOption(
      new Option("--status <status>").choices(["active", "paused", "cancelled", "completed"]),
    )
    .option("--limit <n>", "at most this many (pages are followed)", wholeNumber, 50)
    .action(async (flags: { status?: Job["status"]; limit: number }, command: Command) => {
      const context = contextOf(command, io);
      const filtered = flags.status !== undefined;
      const listed = await withProgress(io, { noun: "job", filtered }, async (listing) => {
        const jobs: Job[] = [];
        if (flags.limit > 0) {
          for await (const job of context.client.jobs.list({
            ...(flags.status ? { status: flags.status } : {}),
            pageSize: Math.min(flags.limit, 100),
            ...listing,
          })) {
            jobs.push(job);
            if (jobs.length >= flags.limit) break;
          }
        }
        return jobs;
      });
      context.print(listed, jobsTable);
    });

  jobs
    .command("get")
    .description("one job, with its policies and last run")
    .argument("<id>", "the job's id")
    .action(async (id: string, _flags, command: Command) => {
      const context = contextOf(command, io);
      const handle = await readInterruptibly(io, (options) => context.client.jobs.get(id, options));
      context.print(handle.job, (job) => (job ? jobFields(job) : id));
    });

  addDefinitionOptions(
    jobs
      .command("edit")
      .description("change a job at the version it was last read (If-Match)")
      .argument("<id>", "the job's id")
      .option(
        "--version <n>",
        "the version the change is based on (default: read the job first); a stale one exits 6",
        wholeNumber,
      )
      .addOption(
        new Option(
          "--in-flight <what>",
          "with a new schedule: queued runs of occurrences it drops",
        ).choices(["skip", "complete"]),
      ),
  ).action(async (id: string, flags, command: Command) => {
    const context = contextOf(command, io);
    const handle = context.client.jobs.handle(id);
    let changes = editBodyFrom(flags);
    let version: number | undefined = flags.version;
    if (editsPartOfTarget(flags)) {
      // Laid over the target of the version edited: with --version, a later one answers 412.
      const current = await handle.get();
      changes = overTarget(changes, current.target);
      version ??= current.version;
    }
    const job = await handle.edit(changes, version === undefined ? {} : { version });
    context.print(job, jobFields);
  });

  jobs
    .command("pause")
    .description("stop scheduling; the pending occurrence waits for resume")
    .argument("<id>", "the job's id")
    .addOption(
      new Option(
        "--running <what>",
        "runs in progress: finish (default) or cancel (each ends cancelled within a heartbeat)",
      ).choices(["finish", "cancel"]),
    )
    .action(async (id: string, flags: { running?: "finish" | "cancel" }, command: Command) => {
      const context = contextOf(command, io);
      const job = await context.client.jobs
        .handle(id)
        .pause(flags.running ? { running: flags.running } : {});
      context.print(job, jobFields);
    });

  for (const [name, description] of [
    ["resume", "schedule again; missed occurrences follow the misfire policy"],
    ["cancel", "stop for good; queued runs are cancelled, running runs within a heartbeat"],
  ] as const) {
    jobs
      .command(name)
      .description(description)
      .argument("<id>", "the job's id")
      .action(async (id: string, _flags, command: Command) => {
        const context = contextOf(command, io);
        const job = await context.client.jobs.handle(id)[name]();
        context.print(job, jobFields);
      });
  }

  jobs
    .command("trigger")
    .description("one extra run now, outside the schedule")
    .argument("<id>", "the job's id")
    .option(
      "--idempotency-key <key>",
      "the same key on the same job within 24 hours returns the first trigger's run",
      idempotencyKeyArg,
    )
    .option("--no-idempotency-key", NO_KEY_HELP)
    .action(async (id: string, flags: KeyFlags, command: Command) => {
      const context = contextOf(command, io);
      const run = await withOwnKey(context, "trigger", flags.idempotencyKey, (idempotencyKey) =>
        context.client.jobs.handle(id).trigger({ idempotencyKey }),
      );
      context.print(run, runFields);
    });

  jobs
    .command("delete")
    .description(
      "cancel the job and remove it; its run history stays until it expires (a repeat exits 4)",
    )
    .argument("<id>", "the job's id")
    .action(async (id: string, _flags, command: Command) => {
      const context = contextOf(command, io);
      const outcome = await context.client.jobs.handle(id).delete();
      if (outcome === "deleted") context.print({ id, deleted: true }, () => `deleted job ${id}`);
      // The retry's 404 cannot tell a job the lost attempt deleted from an id that named none.
      else
        context.print(
          { id, gone: true },
          () =>
            `job ${id} is gone: not confirmed deleted by this command (an attempt got no clear answer and may have deleted it, or no job had this id)`,
        );
    });
}
