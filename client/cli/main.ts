import { Command, CommanderError, Option } from "commander";
import { isSchedulerApiError, SchedulerClientError, VersionConflictError } from "../index.js";
import { brokeOnceOpen } from "../retries.js";
import { DEFAULT_TIMEOUT_MS } from "../transport.js";
import { DEFAULT_API, positiveSeconds } from "./context.js";
import { CliExit, EXIT, exitCodeOf, isMissingCredentials, isUnreachable } from "./exit-codes.js";
import { jobsCommand } from "./jobs.js";
import { type CliIo, json as jsonText, printable } from "./output.js";
import { FailedUnderOwnKey, retryHint } from "./own-key.js";
import { quotasCommand } from "./quotas.js";
import { deadLettersCommand, runsCommand } from "./runs.js";
import { schedulesCommand, webhookSecretCommand } from "./schedules.js";

/** The `scheduler` command with its subcommands, writing to `io`. */
export function cliProgram(io: CliIo): Command {
  const program = new Command("scheduler")
    .description("The scheduler's API from the command line (docs/cli.md).")
    .exitOverride()
    .configureOutput({
      writeOut: io.stdout,
      // With -o json, runCli prints a usage error as JSON instead of commander's text and help.
      writeErr: (text) => {
        if (!jsonOutput(program)) io.stderr(text);
      },
    })
    .showHelpAfterError()
    .option(
      "--api <url>",
      `the API's URL (env SCHEDULER_API_URL; default ${DEFAULT_API}, the sandbox)`,
    )
    .option(
      "--key <key>",
      "a bearer key (env SCHEDULER_API_KEY, which other users' ps and the shell's history do not show, as they do --key); the sandbox's is local-dev-key",
    )
    .option(
      "--allow-insecure-http",
      "send the bearer key to an http:// URL that is not loopback (refused without it)",
    )
    .option("--profile <name>", "sign requests with SigV4 using this AWS profile")
    .option("--region <region>", "the region to sign for (default: from the URL, else AWS_REGION)")
    .option(
      "--request-timeout <seconds>",
      `give up on a request after this long, its answer included (default ${DEFAULT_TIMEOUT_MS / 1000})`,
      positiveSeconds,
    )
    .addOption(
      new Option("-o, --output <format>", "table for people, json for scripts")
        .choices(["table", "json"])
        .default("table"),
    )
    .addHelpText(
      "after",
      `
Without --key or --profile, a loopback --api (the sandbox) gets local-dev-key and any
other is signed with SigV4 from the AWS SDK's default credential chain. A key is not sent
over http:// to a host that is not loopback (exit 2) unless --allow-insecure-http is given.

Exit codes: 0 done; 1 failed unexpectedly; 2 usage; 3 input refused (400, 413, 415, 428);
4 not found; 5 conflict (409); 6 stale version (412); 7 unauthorized; 8 busy or
unavailable, try again (503, or a read, PUT, DELETE, pause, resume, cancel, edit or schedules
preview that timed out or got API Gateway's 502 or 504); 9 API unreachable, or its connection broke once a request was sent (which may have been applied); 10 runs watch timed out; 11 not supported by the API (405); 12 over a
quota (403 quota_exceeded); 13 not allowed (403 forbidden); 130 interrupted (Ctrl-C: a read (a
listing, jobs get, runs get, schedules preview, quotas get, webhook-secret get) at once; a write
still running 2 s later, a key it made printed as below; runs watch exits 0). A 429 (rate_limited, or API
Gateway's throttle) exits 8. A 429 or 503 to a request safe to repeat (a read, PUT, DELETE,
pause, resume, cancel, edit, schedules preview, or a POST with an idempotency key: a create,
trigger, replay or rotation carries --idempotency-key or a random one of its own, unless a
create or trigger has --no-idempotency-key, a batch only the keys in its file) is retried 3 times (Retry-After) first, and so is one that timed out or
got a 502 or 504. A create, batch, trigger, replay or rotation that still timed out or got a
502 or 504 exits 1: it may have been applied. A create, trigger, replay or rotation that may
have been applied under a key the command made prints it: retry with --idempotency-key KEY.
See docs/cli.md.`,
    );
  jobsCommand(program, io);
  runsCommand(program, io);
  deadLettersCommand(program, io);
  schedulesCommand(program, io);
  webhookSecretCommand(program, io);
  quotasCommand(program, io);
  return program;
}

/**
 * Prints `error` on stderr: a line (and its details) for people, one JSON object for scripts. With
 * `ownKey`, the Idempotency-Key the command made for a create, trigger, replay or rotation that
 * may have been applied: the only key whose repeat answers what it did instead of doing it again.
 */
function report(error: unknown, json: boolean, io: CliIo, ownKey?: string): void {
  const { detail, lines } = described(error);
  if (ownKey !== undefined) lines.push(`  ${retryHint(ownKey)}`);
  io.stderr(
    json
      ? `${jsonText({ error: { ...detail, ...(ownKey !== undefined ? { idempotencyKey: ownKey } : {}) } }, 0)}\n`
      : `${lines.join("\n")}\n`,
  );
}

/** An error as the JSON object's fields, and as the lines people read. */
function described(error: unknown): { detail: Record<string, unknown>; lines: string[] } {
  if (isSchedulerApiError(error)) {
    const detail = {
      status: error.status,
      code: error.code,
      message: error.message,
      ...(error.field !== undefined ? { field: error.field } : {}),
      ...(error.currentStatus !== undefined ? { currentStatus: error.currentStatus } : {}),
      ...(error.quota !== undefined ? { quota: error.quota } : {}),
      ...(error.issues.length > 0 ? { issues: error.issues } : {}),
      ...(error instanceof VersionConflictError
        ? { expectedVersion: error.expectedVersion, currentVersion: error.currentVersion ?? null }
        : {}),
      ...(error.retryAfterSeconds !== undefined
        ? { retryAfterSeconds: error.retryAfterSeconds }
        : {}),
    };
    // The message and the issues may quote the input, or a page that is not the API's: printable.
    const lines = [`error: ${error.code} (${error.status}): ${printable(error.message)}`];
    for (const issue of error.issues.slice(1))
      lines.push(`  ${printable(issue.field)}: ${printable(issue.message)}`);
    if (error instanceof VersionConflictError)
      lines.push(
        `  the job is at version ${error.currentVersion ?? "?"}, not ${error.expectedVersion}: read it again (jobs get) and edit at that version`,
      );
    if (error.retryAfterSeconds !== undefined)
      lines.push(`  try again in ${error.retryAfterSeconds} s`);
    return { detail, lines };
  }
  if (error instanceof SchedulerClientError) {
    // No answer to show: the client's own error (a timeout), by its code.
    return {
      detail: { code: error.code, message: error.message },
      lines: [`error: ${error.code}: ${printable(error.message)}`],
    };
  }
  // A connection that broke once open reached the API: what was sent may have been done.
  const message = brokeOnceOpen(error)
    ? `the connection to the API broke after the request was sent (${String((error as Error).cause)}): it may have been applied; read before sending it again`
    : isUnreachable(error)
      ? `cannot reach the API: ${String((error as Error).cause ?? (error as Error).message)}`
      : isMissingCredentials(error)
        ? `no AWS credentials to sign requests with (${error.message}): give --key for a bearer key, or --profile NAME (after aws sso login for an SSO profile), or AWS credentials in the environment`
        : error instanceof Error
          ? error.message
          : String(error);
  return { detail: { message }, lines: [`error: ${printable(message)}`] };
}

/**
 * Whether `-o json` was given. Commander reads the program's options from the whole command line
 * before it runs a subcommand, so this holds for every error a subcommand raises.
 */
const jsonOutput = (program: Command) => program.opts<{ output?: string }>().output === "json";

/** Runs `scheduler <argv…>` and resolves with its exit code; never exits the process itself. */
export async function runCli(argv: readonly string[], io: CliIo): Promise<number> {
  const program = cliProgram(io);
  try {
    await program.parseAsync([...argv], { from: "user" });
    return EXIT.ok;
  } catch (error) {
    if (error instanceof CommanderError) {
      // Help and version are "errors" to commander; exitCode 0 says they are not.
      if (error.exitCode === 0) return EXIT.ok;
      if (jsonOutput(program)) {
        // Commander's message for help it would have shown in place of a command is "(outputHelp)".
        const message =
          error.code === "commander.help"
            ? "a command is missing: --help lists the commands"
            : error.message.replace(/^error: /, "");
        io.stderr(`${jsonText({ error: { message } }, 0)}\n`);
      } else if (
        error.code === "commander.invalidArgument" &&
        !error.message.startsWith("error:")
      ) {
        // A usage error raised inside an action is not printed by commander itself.
        io.stderr(`error: ${error.message}\n`);
      }
      return EXIT.usage;
    }
    // Ctrl-C ended a read (interruptible): the user stopped it, there is nothing to tell them.
    if (error instanceof CliExit && error.exitCode === EXIT.interrupted) return EXIT.interrupted;
    if (error instanceof FailedUnderOwnKey) {
      report(error.failure, jsonOutput(program), io, error.idempotencyKey);
      return exitCodeOf(error.failure);
    }
    report(error, jsonOutput(program), io);
    return exitCodeOf(error);
  }
}
