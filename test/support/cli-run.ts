import { spawn } from "node:child_process";
import { runCli } from "../../client/cli/main.js";

/** What one CLI run printed and how it exited. */
export interface CliOutcome {
  readonly code: number;
  readonly out: string;
  readonly err: string;
}

/** Runs the CLI in-process on exactly these arguments (no `--api` added), its output captured. */
export async function runCaptured(
  args: readonly string[],
  env: Record<string, string> = {},
): Promise<CliOutcome> {
  let out = "";
  let err = "";
  const code = await runCli(args, {
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
  return new Promise<CliOutcome>((done, fail) => {
    const child = spawn(command, args, { ...options, stdio: ["ignore", "pipe", "pipe"] });
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
}
