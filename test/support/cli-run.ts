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
