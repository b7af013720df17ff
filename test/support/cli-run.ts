import { type ChildProcess, spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { runCli } from "../../client/cli/main.js";
import type { CliIo } from "../../client/cli/output.js";

/** What one CLI run printed and how it exited. */
export interface CliOutcome {
  readonly code: number;
  readonly out: string;
  readonly err: string;
}

/**
 * Runs the CLI in-process on exactly these arguments (no `--api` added), its output captured;
 * `io` gives the rest of its CliIo (a retrySleep; a terminal's stderr and a clock; Ctrl-C's signal).
 */
export async function runCaptured(
  args: readonly string[],
  env: Record<string, string> = {},
  io: Pick<CliIo, "retrySleep" | "stderrIsTty" | "now" | "signal"> = {},
): Promise<CliOutcome> {
  let out = "";
  let err = "";
  const code = await runCli(args, {
    ...io,
    stdout: (text) => {
      out += text;
    },
    stderr: (text) => {
      err += text;
    },
    env,
  });
  return { code, out, err };
}

/** Runs a command as a process of its own (the CLI's bin, npx), its output captured. */
export function spawnCaptured(
  command: string,
  args: readonly string[],
  options: { readonly cwd: string; readonly env: NodeJS.ProcessEnv },
): Promise<CliOutcome> {
  return spawnRunning(command, args, options).outcome;
}

/** As spawnCaptured, with the process itself, for a case that signals it while it runs. */
export function spawnRunning(
  command: string,
  args: readonly string[],
  options: { readonly cwd: string; readonly env: NodeJS.ProcessEnv },
): { readonly process: ChildProcess; readonly outcome: Promise<CliOutcome> } {
  const { process: child, outcome } = spawnCollecting(command, args, options, false);
  return { process: child, outcome: outcome.then(({ code, out, err }) => ({ code, out, err })) };
}

/** How a spawned bin ended, as test/support/exit-witness.mjs saw it from inside the process. */
export interface ProcessEnd {
  /** The event loop ran out of work: nothing called process.exit (the bin's exit 2 s after Ctrl-C). */
  readonly drained: boolean;
  /** Callbacks of timers that keep the process alive, run after the command returned its code. */
  readonly timersAfterCommand: number;
}

const EXIT_WITNESS = fileURLToPath(new URL("./exit-witness.mjs", import.meta.url));

/**
 * As spawnRunning, for bin/scheduler.mjs run on `args` by this Node with exit-witness.mjs preloaded:
 * the outcome also says how the process ended (undefined: it ended without its 'exit' event, by a
 * signal).
 */
export function spawnWitnessed(
  args: readonly string[],
  options: { readonly cwd: string; readonly env: NodeJS.ProcessEnv },
): {
  readonly process: ChildProcess;
  readonly outcome: Promise<CliOutcome & { readonly end: ProcessEnd | undefined }>;
} {
  const { process: child, outcome } = spawnCollecting(
    process.execPath,
    ["--import", EXIT_WITNESS, "bin/scheduler.mjs", ...args],
    options,
    true,
  );
  return {
    process: child,
    outcome: outcome.then(({ code, out, err, fd3 }) => ({
      code,
      out,
      err,
      end: fd3 === "" ? undefined : (JSON.parse(fd3) as ProcessEnd),
    })),
  };
}

/**
 * Spawns `command`, collecting its stdout, its stderr and, with `withFd3`, a fourth pipe. Without
 * one it settles at 'exit'; with one at 'close': the witness writes fd 3 as the process exits,
 * read once its pipes are done.
 */
function spawnCollecting(
  command: string,
  args: readonly string[],
  options: { readonly cwd: string; readonly env: NodeJS.ProcessEnv },
  withFd3: boolean,
): { readonly process: ChildProcess; readonly outcome: Promise<CliOutcome & { fd3: string }> } {
  const child = spawn(command, args, {
    ...options,
    stdio: withFd3 ? ["ignore", "pipe", "pipe", "pipe"] : ["ignore", "pipe", "pipe"],
  });
  const outcome = new Promise<CliOutcome & { fd3: string }>((done, fail) => {
    const read = { out: "", err: "", fd3: "" };
    const collect = (stream: NodeJS.ReadableStream | null | undefined, into: keyof typeof read) =>
      stream?.on("data", (chunk: Buffer) => {
        read[into] += chunk.toString("utf8");
      });
    collect(child.stdout, "out");
    collect(child.stderr, "err");
    if (withFd3) collect(child.stdio[3] as NodeJS.ReadableStream | null, "fd3");
    child.once("error", fail);
    child.once(withFd3 ? "close" : "exit", (code: number | null) =>
      done({ code: code ?? -1, ...read }),
    );
  });
  return { process: child, outcome };
}
