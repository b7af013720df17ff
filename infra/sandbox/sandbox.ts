import { randomBytes } from "node:crypto";
import { mkdir } from "node:fs/promises";
import { join, resolve } from "node:path";
import { printable } from "../../client/cli/output.js";
import { customJobTypes } from "../../functions/worker/handlers/index.js";
import { startLocalServer } from "../../shared/api/local-server.js";
import { createAwsClients } from "../../shared/aws.js";
import { sleep, systemClock } from "../../shared/clock.js";
import { ENV, type Env, loadSettings } from "../../shared/config.js";
import { buildConsoleAssets } from "../../shared/console/build.js";
import { runTickLoop } from "../../shared/dispatch/tick.js";
import type { Engine } from "../../shared/engine.js";
import { asyncCallbacksFrom } from "../../shared/execution/async-callbacks.js";
import { builtInJobTypes } from "../../shared/execution/built-in-handlers.js";
import { handleCrashedRun } from "../../shared/execution/dead-letter-queue.js";
import { handlerRegistry } from "../../shared/execution/job-contract.js";
import { allowPrivateTargetsFrom } from "../../shared/execution/private-targets.js";
import { recoverLostMessages } from "../../shared/execution/restart-recovery.js";
import { runWorkerLoop } from "../../shared/execution/worker-loop.js";
import { demoJobTypesFrom } from "../../shared/job-types/demo-types.js";
import { jobTypeCatalog } from "../../shared/job-types/registry.js";
import type { Observability } from "../../shared/observability.js";
import { deleteMessages, receiveRuns } from "../../shared/queue/work-queue.js";
import { sweepExpired } from "../../shared/storage/expiry-sweep.js";
import { cachedSigningSecrets } from "../../shared/webhooks/secrets.js";
import { type RunningEmulator, startDynamoDbLocal, startSqsEmulator } from "./emulators.js";
import { stackResourcePlan } from "./plan-cache.js";
import { provision, type ResourcePlan } from "./resources.js";
import { lowPriorityShareFrom, sandboxSettingOverrides, secretCacheFrom } from "./sandbox-env.js";

export interface SandboxOptions {
  /** 0 picks a free port. */
  readonly port: number;
  readonly dataDir: string;
  /** Seconds between ticks; null runs no tick loop (a test that drives passes and the reaper itself). */
  readonly tickSeconds: number | null;
  /** Runs in progress at once. */
  readonly workers: number;
  /** Use this AWS-compatible endpoint (LocalStack, …) for DynamoDB instead of starting DynamoDB Local. */
  readonly dynamoEndpoint?: string;
  /** Use this AWS-compatible endpoint for SQS instead of starting the SQS emulator. */
  readonly sqsEndpoint?: string;
  /**
   * Names the tables and queues (`<prefix>-jobs`, …; default `sandbox`). At an endpoint they outlive
   * the sandbox, so sandboxes that must not share data (test runs) each take their own.
   */
  readonly prefix?: string;
  /** API keys (SCHEDULER_API_KEYS), ALLOW_PRIVATE_TARGETS, and setting overrides (LEASE_SECONDS, …). */
  readonly env?: Env;
  /** Where log lines go. */
  readonly print?: (line: string) => void;
  /** A plan already read from the template (tests synthesize once per file). */
  readonly plan?: ResourcePlan;
}

export interface Sandbox {
  readonly url: string;
  readonly dataDir: string;
  readonly engine: Engine;
  stop(): Promise<void>;
}

/** How long in-progress runs get to finish at shutdown before they are released back to QUEUED. */
const SHUTDOWN_GRACE_MS = 3000;

/**
 * The whole scheduler on one machine: DynamoDB Local persisted under the data
 * directory and an in-memory SQS emulator (each unless an endpoint is given for it), tables and
 * queues read from the synthesized CDK stack, the API, the tick (dispatcher
 * for every shard, then the reaper), a worker loop and the DLQ consumer: the
 * same code as the Lambdas.
 */
export async function startSandbox(options: SandboxOptions): Promise<Sandbox> {
  const env = options.env ?? process.env;
  const print = options.print ?? ((line: string) => console.log(line));
  const dataDir = resolve(options.dataDir);
  await mkdir(dataDir, { recursive: true });
  // Built while the emulators start: it takes a moment, and only the server needs it.
  const consoleAssets = buildConsoleAssets();
  // Awaited below; if start-up fails first, its failure is not the one to report.
  consoleAssets.catch(() => undefined);
  const emulators: RunningEmulator[] = [];
  const started = (emulator: RunningEmulator) => {
    emulators.push(emulator);
    return emulator.endpoint;
  };
  const stopEmulators = () => Promise.all(emulators.map((e) => e.stop()));
  try {
    // Only the emulators no endpoint was given for (a test run passes its own pair). Both starts
    // settle before a failure is thrown, so the catch below stops the one that did start.
    const [dynamoEndpoint, sqsEndpoint] = settledOrThrow(
      await Promise.allSettled([
        options.dynamoEndpoint ??
          (async () => {
            const dbPath = join(dataDir, "dynamodb");
            await mkdir(dbPath, { recursive: true });
            return started(await startDynamoDbLocal({ dbPath }));
          })(),
        options.sqsEndpoint ?? startSqsEmulator().then(started),
      ]),
    );
    const dynamoSide = createAwsClients({ endpoint: dynamoEndpoint });
    const sqsSide = createAwsClients({ endpoint: sqsEndpoint });
    const plan = options.plan ?? (await stackResourcePlan());
    const resources = await provision(
      { dynamo: dynamoSide.dynamo, sqs: sqsSide.sqs },
      plan,
      options.prefix ?? "sandbox",
    );
    const obs = sandboxObservability(print);
    const engine: Engine = {
      doc: dynamoSide.doc,
      sqs: sqsSide.sqs,
      tables: resources.tables,
      queues: resources.queues,
      settings: loadSettings({ ...plan.settingsEnv, ...sandboxSettingOverrides(env) }),
      clock: systemClock,
      random: Math.random,
      obs,
    };

    // An SQS emulator started now has empty queues: every run in flight when the sandbox last
    // stopped lost its message. Re-send them all at once rather than a lease later.
    if (options.sqsEndpoint === undefined) {
      const recovered = await recoverLostMessages(engine);
      if (recovered.resent > 0)
        print(`recovered ${recovered.resent} run(s) in flight at the last stop`);
    }

    // The demo types are accepted locally; DEMO_JOB_TYPES=false refuses them as a deployed API does.
    const jobTypes = jobTypeCatalog({
      custom: customJobTypes.map((t) => t.definition),
      demoTypes: demoJobTypesFrom(env, true),
    });
    const server = await startLocalServer({
      engine,
      port: options.port,
      hostname: "127.0.0.1",
      jobTypes,
      env,
      consoleAssets: await consoleAssets,
    });

    const handlers = handlerRegistry([
      // Loopback receivers are the usual local target; ALLOW_PRIVATE_TARGETS=false refuses them
      // as a deployed worker does.
      ...builtInJobTypes(
        {
          signingSecrets: cachedSigningSecrets(engine, secretCacheFrom(env)),
          allowPrivateTargets: allowPrivateTargetsFrom(env, true),
          // Async targets call back on this sandbox's own API unless API_URL names another way in.
          ...asyncCallbacksFrom({ [ENV.apiUrl]: server.url, ...env }, engine.settings),
        },
        engine.clock,
      ),
      ...customJobTypes,
    ]);
    const stopping = new AbortController();
    const release = new AbortController();
    const owner = `sandbox-${process.pid}-${randomBytes(3).toString("hex")}`;
    const loops = [
      ...(options.tickSeconds === null
        ? []
        : [
            runTickLoop(engine, {
              owner,
              tickMs: options.tickSeconds * 1000,
              signal: stopping.signal,
            }),
          ]),
      runWorkerLoop(
        { engine, handlers, workerId: owner, shutdown: release.signal },
        {
          concurrency: options.workers,
          signal: stopping.signal,
          idleWaitSeconds: 1,
          lowPriorityShare: lowPriorityShareFrom(env),
        },
      ),
      consumeDeadLetters(engine, resources.deadLetterQueues, stopping.signal),
      sweepExpiredItems(engine, stopping.signal),
    ];

    let stopped: Promise<void> | null = null;
    return {
      url: server.url,
      dataDir,
      engine,
      stop() {
        stopped ??= (async () => {
          stopping.abort();
          const grace = setTimeout(() => release.abort(), SHUTDOWN_GRACE_MS);
          await Promise.allSettled(loops);
          clearTimeout(grace);
          await server.close();
          dynamoSide.dynamo.destroy();
          sqsSide.sqs.destroy();
          await stopEmulators();
        })();
        return stopped;
      },
    };
  } catch (error) {
    await stopEmulators();
    throw error;
  }
}

function settledOrThrow<T>(results: readonly PromiseSettledResult<T>[]): T[] {
  return results.map((result) => {
    if (result.status === "rejected") throw result.reason;
    return result.value;
  });
}

/** How often the sandbox deletes expired items: DynamoDB Local has no TTL of its own. */
const EXPIRY_SWEEP_MS = 10 * 60_000;

/** The sandbox's stand-in for DynamoDB TTL: a sweep at start, then every ten minutes. */
async function sweepExpiredItems(engine: Engine, signal: AbortSignal): Promise<void> {
  while (!signal.aborted) {
    try {
      const swept = await sweepExpired(engine, engine.clock());
      if (swept.jobs + swept.runs > 0) engine.obs.log.info("expired items deleted", swept);
    } catch (error) {
      engine.obs.log.error("expiry sweep failed", { error: String(error) });
    }
    await sleep(EXPIRY_SWEEP_MS, signal);
  }
}

async function consumeDeadLetters(
  engine: Engine,
  queueUrls: readonly string[],
  signal: AbortSignal,
) {
  while (!signal.aborted) {
    for (const url of queueUrls) {
      try {
        const batch = await receiveRuns(engine.sqs, url, { max: 10, waitSeconds: 0, signal });
        for (const received of batch) {
          await handleCrashedRun(engine, received.message, received.receiveCount);
          await deleteMessages(engine.sqs, url, [received.receiptHandle]);
        }
      } catch (error) {
        if (!signal.aborted)
          engine.obs.log.warn("DLQ consumer failed; will try again", { error: String(error) });
      }
    }
    await sleep(2000, signal);
  }
}

/**
 * One readable line per finished run; warnings and errors as they come; the rest stays quiet. A
 * line is printed as `printable` shows it: an error quotes a webhook receiver's answer, which the
 * tenant's own server writes, and nothing in it may act on the terminal the sandbox runs in.
 */
export function sandboxObservability(printRaw: (line: string) => void): Observability {
  const print = (line: string) => printRaw(printable(line));
  const time = () => new Date().toISOString().slice(11, 19);
  const plain = (level: string) => (message: string, fields?: Record<string, unknown>) =>
    print(`${time()} ${level} ${message}${fields ? ` ${JSON.stringify(fields)}` : ""}`);
  return {
    log: {
      debug: () => undefined,
      info: (message, fields) => {
        if (message !== "run finished" || !fields) return;
        const f = fields as Record<string, string | number | undefined>;
        const error = f.error ? `  ${String(f.error)}` : "";
        // A run the DLQ consumer ends (it crashed every worker) has no duration.
        const took = f.durationMs === undefined ? "" : `, took ${f.durationMs} ms`;
        print(
          `${time()} run ${String(f.status).padEnd(9)} job ${f.jobId} at ${f.scheduledFor} attempt ${f.attempt}` +
            `  lag ${f.lagMs} ms${took}${error}`,
        );
      },
      warn: plain("WARN"),
      error: plain("ERROR"),
    },
    metrics: { add: () => undefined },
  };
}
