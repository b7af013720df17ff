import { type ChildProcess, spawn } from "node:child_process";
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
  const child = spawn(command, args, { ...options, stdio: ["ignore", "pipe", "pipe"] });
  const outcome = new Promise<CliOutcome>((done, fail) => {
    let out = "";
    let err = "";
    child.stdout.on("data", (chunk: Buffer) => {
      out += chunk.toString("utf8");
    });
    child.stderr.on("data", (chunk: Buffer) => {
      err += chunk.toString("utf8");
    });
    child.once("error", fail);
    child.once("exit", (code) => done({ code: code ?? -1, out, err }));
  });
  return { process: child, outcome };
}
