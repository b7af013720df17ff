#!/usr/bin/env node
// `scheduler` (npx scheduler … in a clone): the CLI in client/cli, run from its TypeScript source.
import { register } from "tsx/esm/api";

process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= "true";
register();
// `scheduler … | head` closes the pipe early; that is not an error of the command.
for (const stream of [process.stdout, process.stderr])
  stream.on("error", (error) => {
    if (error.code === "EPIPE") process.exit(process.exitCode ?? 0);
    throw error;
  });
const { runCli } = await import("../client/cli/main.ts");
const { EXIT } = await import("../client/cli/exit-codes.ts");
const interrupted = new AbortController();
const exiting = new AbortController();
// Ctrl-C ends runs watch (exit 0) and a command that only reads (130) at once; a write still
// running 2 s later is stopped with 130, once `exiting` let it print what it must (the Idempotency-Key of a create
// in flight; stderr is written synchronously). A second Ctrl-C finds no handler: Node's default
// ends the process by the signal (a shell reports 130).
process.once("SIGINT", () => {
  interrupted.abort();
  setTimeout(() => {
    exiting.abort();
    process.exit(EXIT.interrupted);
  }, 2000).unref();
});
process.exitCode = await runCli(process.argv.slice(2), {
  stdout: (text) => process.stdout.write(text),
  stderr: (text) => process.stderr.write(text),
  stderrIsTty: process.stderr.isTTY === true,
  env: process.env,
  startedAt: new Date(performance.timeOrigin),
  signal: interrupted.signal,
  exiting: exiting.signal,
});
