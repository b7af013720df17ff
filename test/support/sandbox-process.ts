import { type ChildProcess, spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { inject } from "vitest";
import { testNamespace } from "./namespace.js";

/** The sandbox CLI (`npm start`) as a child process: what a user runs, reached only over HTTP. */
export interface SandboxProcess {
  readonly url: string;
  readonly dataDir: string;
  /** Everything it printed so far, stdout and stderr. */
  readonly output: string[];
  /** SIGINT, then the exit code (null if it had to be killed after `timeoutMs`). */
  stop(timeoutMs?: number): Promise<number | null>;
}

export interface SandboxProcessOptions {
  readonly env?: Readonly<Record<string, string>>;
  readonly tickSeconds?: number;
  /**
   * The shards it files jobs into and ticks over (SHARD_COUNT and MAX_SHARD_COUNT; default 1,
   * `npm start`'s is 8). A test's sandbox ticks every second, and every shard's pass costs its
   * requests each tick whether or not anything is due: eight shards kept DynamoDB Local and the
   * sandbox busy for half a core between a test's requests.
   */
  readonly shards?: number;
  readonly workers?: number;
  readonly startTimeoutMs?: number;
  /** Keep the data directory after stop (default: removed). */
  readonly keepData?: boolean;
  /** Where the temporary data directory is made (default: the OS's temporary directory). */
  readonly dataParent?: string;
  /**
   * Names its tables and queues (`--prefix`): at a shared endpoint (the test run's emulators,
   * LocalStack), one per sandbox. Default there: a fresh one.
   */
  readonly prefix?: string;
}

const REPO = resolve(import.meta.dirname, "../..");
const READY = /scheduler sandbox ready at (http:\/\/\S+)/;

/**
 * The test run's emulators (AWS_ENDPOINT_URL_DYNAMODB and AWS_ENDPOINT_URL_SQS) when the file's
 * project provides them: a DynamoDB Local started per file cost seconds of CPU on two cores, and
 * is slow until its JIT warms up. A project without the global setup (`alone`) provides none, and
 * neither does a run outside vitest (the benches, `npm run bench:spike`, whose inject() would
 * throw): the sandbox starts its own, as `npm start` does.
 */
export function runEmulators(): Record<string, string> {
  if (process.env.VITEST === undefined) return {};
  // inject() is typed by what the global setup provides; a project without one provides nothing.
  const dynamo: string | undefined = inject("dynamoEndpoint");
  const sqs: string | undefined = inject("sqsEndpoint");
  if (dynamo === undefined || sqs === undefined) return {};
  return { AWS_ENDPOINT_URL_DYNAMODB: dynamo, AWS_ENDPOINT_URL_SQS: sqs };
}

export async function spawnSandbox(options: SandboxProcessOptions = {}): Promise<SandboxProcess> {
  const dataDir = await mkdtemp(join(options.dataParent ?? tmpdir(), "scheduler-e2e-"));
  const endpoints = runEmulators();
  const prefix =
    options.prefix ?? (Object.keys(endpoints).length > 0 ? testNamespace("sandbox").id : undefined);
  const child: ChildProcess = spawn(
    process.execPath,
    [
      // One process, as `npm start` runs it: tsx's CLI would relay SIGINT to a child and kill it
      // if the child, busy, does not answer within a few milliseconds.
      "--import",
      "tsx",
      join(REPO, "infra/sandbox/main.ts"),
      "--port",
      "0",
      "--data-dir",
      dataDir,
      "--tick-seconds",
      String(options.tickSeconds ?? 1),
      "--workers",
      String(options.workers ?? 16),
      ...(prefix ? ["--prefix", prefix] : []),
    ],
    {
      cwd: REPO,
      env: {
        ...process.env,
        AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: "true",
        SHARD_COUNT: String(options.shards ?? 1),
        MAX_SHARD_COUNT: String(options.shards ?? 1),
        ...endpoints,
        ...options.env,
      },
      stdio: ["ignore", "pipe", "pipe"],
    },
  );
  const output: string[] = [];
  const exited = new Promise<number | null>((done) => child.once("exit", (code) => done(code)));
  const url = await new Promise<string>((done, fail) => {
    const timer = setTimeout(
      () =>
        fail(
          new Error(
            `sandbox not ready after ${options.startTimeoutMs ?? 90_000} ms:\n${output.join("")}`,
          ),
        ),
      options.startTimeoutMs ?? 90_000,
    );
    let ready = false;
    const onData = (chunk: Buffer) => {
      output.push(chunk.toString("utf8"));
      // Once ready, stop joining: a spike prints a line per run, and joining it all per chunk is quadratic.
      if (ready) return;
      const match = READY.exec(output.join(""));
      if (match?.[1]) {
        ready = true;
        clearTimeout(timer);
        done(match[1]);
      }
    };
    child.stdout?.on("data", onData);
    child.stderr?.on("data", onData);
    void exited.then((code) => {
      clearTimeout(timer);
      fail(new Error(`sandbox exited (${code}) before it was ready:\n${output.join("")}`));
    });
  }).catch(async (error: unknown) => {
    child.kill("SIGKILL");
    await rm(dataDir, { recursive: true, force: true });
    throw error;
  });

  let stopped: Promise<number | null> | null = null;
  return {
    url,
    dataDir,
    output,
    stop(timeoutMs = 30_000) {
      stopped ??= (async () => {
        child.kill("SIGINT");
        const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
        const code = await exited;
        clearTimeout(timer);
        if (!options.keepData) await rm(dataDir, { recursive: true, force: true });
        return code;
      })();
      return stopped;
    },
  };
}
