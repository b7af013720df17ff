import { readFileSync } from "node:fs";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { DeleteTableCommand } from "@aws-sdk/client-dynamodb";
import { DeleteQueueCommand } from "@aws-sdk/client-sqs";
import { type Clock, sleep } from "../shared/clock.js";
import { forEachConcurrently } from "../shared/concurrency.js";
import type { EngineSettings } from "../shared/config.js";
import { tickOnce } from "../shared/dispatch/tick.js";
import type { Engine } from "../shared/engine.js";
import { builtInHandlers } from "../shared/execution/built-in-handlers.js";
import { runWorkerLoop } from "../shared/execution/worker-loop.js";
import { createJob } from "../shared/jobs/index.js";
import {
  type Logger,
  METRICS,
  type MetricName,
  type Metrics,
  type MetricUnit,
} from "../shared/observability.js";
import { cachedSigningSecrets } from "../shared/webhooks/secrets.js";
import type { OperationCount } from "./aws-counter.js";
import { allRuns, createHarness, type Harness, noopJob } from "./requests-per-run.js";
import type { ConfigurationResult, Resolved } from "./throughput.js";
import { configurationResult, runKeyOf } from "./throughput-figures.js";

/**
 * One configuration of the throughput bench (bench/throughput.ts): set up the recurring jobs,
 * start the engine and warm it up, offer the load for the window, drain, and read the figures
 * back from the runs table.
 */

const SECOND = 1000;
/** The dispatcher's first pass must be over by then, or the window starts regardless. */
const MAX_WARMUP_MS = 90 * SECOND;

type Side = "producer" | "dispatcher" | "worker";
const SIDES: readonly Side[] = ["producer", "dispatcher", "worker"];

/** Metrics the engine reports, summed in memory: run outcomes feed the progress bar. */
class Tally implements Metrics {
  readonly outcomes = new Map<string, number>();

  add(name: MetricName, value: number, _unit: MetricUnit, dimensions: Record<string, string> = {}) {
    if (name === METRICS.runOutcome) {
      const status = dimensions.status ?? "?";
      this.outcomes.set(status, (this.outcomes.get(status) ?? 0) + value);
    }
  }
}

/** Counts the engine's warnings and errors by message, keeping one sample of each. */
export class LogTally {
  readonly entries = new Map<
    string,
    { side: Side; level: string; message: string; count: number; sample: string }
  >();

  logger(side: Side): Logger {
    const record = (level: string) => (message: string, fields?: Record<string, unknown>) => {
      const key = `${side}|${level}|${message}`;
      const entry = this.entries.get(key);
      if (entry) entry.count++;
      else
        this.entries.set(key, {
          side,
          level,
          message,
          count: 1,
          sample: JSON.stringify(fields ?? {}).slice(0, 300),
        });
    };
    return {
      debug: () => undefined,
      info: () => undefined,
      warn: record("warn"),
      error: record("error"),
    };
  }
}

/** CPU seconds used so far by a process (all its threads), from /proc; null elsewhere. */
function processCpuSeconds(pid: number | undefined): number | null {
  if (pid === undefined) return null;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    // Fields 14 and 15 of stat(5), utime and stime, in clock ticks (USER_HZ, 100 on Linux).
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return null;
  }
}

/**
 * The progress bar, on stderr: one line redrawn with \r on a terminal, else a line every 5 s.
 */
export class Progress {
  private lastLine = 0;
  private drawn = false;

  constructor(
    private readonly stream: NodeJS.WriteStream | null,
    private readonly clockMs: () => number,
  ) {}

  get intervalMs(): number {
    return this.stream?.isTTY ? 250 : 1000;
  }

  show(line: string, force = false): void {
    if (!this.stream) return;
    if (this.stream.isTTY) {
      this.stream.write(`\r${line}\x1b[K`);
      this.drawn = true;
      return;
    }
    const now = this.clockMs();
    if (force || now - this.lastLine >= 5 * SECOND) {
      this.stream.write(`${line}\n`);
      this.lastLine = now;
    }
  }

  end(): void {
    if (this.stream?.isTTY && this.drawn) this.stream.write("\n");
    this.drawn = false;
    this.lastLine = 0;
  }
}

function bar(fraction: number, width = 24): string {
  const filled = Math.round(Math.min(1, Math.max(0, fraction)) * width);
  return `[${"#".repeat(filled)}${"-".repeat(width - filled)}]`;
}

export interface Expected {
  readonly key: string;
  readonly kind: "oneOff" | "recurring";
  readonly scheduledForMs: number;
}

const mod = (a: number, m: number) => ((a % m) + m) % m;

/** The offered load and the timing of one configuration, fixed before it starts. */
export interface Plan {
  readonly label: string;
  readonly shards: number;
  readonly concurrency: number;
  readonly periodMs: number;
  readonly recurringJobs: number;
  readonly recurringPerSecond: number;
  readonly oneOffPerSecond: number;
  readonly windowMs: number;
  readonly lookaheadMs: number;
  /** How far ahead of the given clock the engines' clock runs. */
  readonly offsetMs: number;
  /** The recurring jobs' first occurrences are spread over one period from here. */
  readonly firstOccurrenceAt: number;
  /** The engines' clock. */
  readonly clock: Clock;
}

function planConfiguration(shards: number, concurrency: number, o: Resolved): Plan {
  const periodMs = o.everySeconds * SECOND;
  const recurringJobs = Math.round(o.rate * o.recurringShare * o.everySeconds);
  const recurringPerSecond = recurringJobs / o.everySeconds;
  const windowMs = o.seconds * SECOND;
  const lookaheadMs = o.lookaheadSeconds * SECOND;
  // Budgets for creating the recurring jobs and for the dispatcher's first pass (~100 claims/s).
  const setupMs = 3 * SECOND + recurringJobs * 40;
  const warmupMs = 3 * SECOND + ((windowMs / 2 + lookaheadMs) / SECOND) * recurringPerSecond * 10;
  const plannedStart = o.clock().getTime() + setupMs + warmupMs;
  // The dispatcher claims a whole minute of occurrences when its horizon (now + lookahead) enters
  // a new minute. The engines' clock is set ahead by up to a minute so that this happens in the
  // middle of the window: every configuration's window then holds the same burst (exactly one
  // for a window under two minutes) instead of one or none depending on when it started.
  const offsetMs = mod(-(plannedStart + windowMs / 2 + lookaheadMs), 60 * SECOND);
  return {
    label: `${shards} shards × ${concurrency} workers${o.loops > 1 ? ` × ${o.loops} loops` : ""}`,
    shards,
    concurrency,
    periodMs,
    recurringJobs,
    recurringPerSecond,
    oneOffPerSecond: o.rate * (1 - o.recurringShare),
    windowMs,
    lookaheadMs,
    offsetMs,
    firstOccurrenceAt: Math.ceil((plannedStart + offsetMs) / SECOND) * SECOND,
    clock: () => new Date(o.clock().getTime() + offsetMs),
  };
}

/** What every step of a configuration works with. */
interface Context {
  readonly h: Harness;
  readonly sides: Sides;
  readonly plan: Plan;
  readonly o: Resolved;
  readonly progress: Progress;
}

/** An engine per side on one harness, each with its own metrics tally, all logging into one tally. */
interface Sides {
  readonly tallies: Record<Side, Tally>;
  readonly logs: LogTally;
  engineFor(side: Side, sideClock?: Clock): Engine;
}

function observedSides(h: Harness, plan: Plan): Sides {
  const settings: Partial<EngineSettings> = {
    shardCount: plan.shards,
    maxShardCount: plan.shards,
    lookaheadMs: plan.lookaheadMs,
  };
  const tallies: Record<Side, Tally> = {
    producer: new Tally(),
    dispatcher: new Tally(),
    worker: new Tally(),
  };
  const logs = new LogTally();
  return {
    tallies,
    logs,
    engineFor: (side, sideClock = plan.clock) => ({
      ...h.engine(side, settings, sideClock),
      obs: { log: logs.logger(side), metrics: tallies[side] },
    }),
  };
}

interface RecurringJob {
  readonly jobId: string;
  readonly startAtMs: number;
}

/** Recurring jobs, as if created long ago: the producer's clock is an hour behind. */
async function createRecurringJobs({ sides, plan, o, progress }: Context): Promise<RecurringJob[]> {
  progress.show(`throughput ${plan.label}: creating ${plan.recurringJobs} recurring jobs…`, true);
  const longAgo: Clock = () => new Date(plan.clock().getTime() - 3_600_000);
  const setupProducer = sides.engineFor("producer", longAgo);
  const recurring: RecurringJob[] = [];
  await forEachConcurrently(
    Array.from({ length: plan.recurringJobs }, (_, i) => i),
    16,
    async (i) => {
      const startAtMs =
        plan.firstOccurrenceAt + Math.round((i * plan.periodMs) / plan.recurringJobs);
      const { job } = await createJob(
        setupProducer,
        noopJob({ every: `PT${o.everySeconds}S`, startAt: new Date(startAtMs).toISOString() }),
      );
      recurring.push({ jobId: job.jobId, startAtMs });
    },
  );
  return recurring;
}

/** DynamoDB latency as each side sees it (whole calls, SDK retries included), while `on`. */
export interface DynamoTimer {
  on: boolean;
  readonly latencies: Record<Side, number[]>;
}

function timeDynamoCalls(h: Harness): DynamoTimer {
  const timer: DynamoTimer = { on: false, latencies: { producer: [], dispatcher: [], worker: [] } };
  for (const side of SIDES) {
    h.sides[side].clients.dynamo.middlewareStack.add(
      (next) => async (args) => {
        if (!timer.on) return next(args);
        const started = performance.now();
        try {
          return await next(args);
        } finally {
          timer.latencies[side].push(performance.now() - started);
        }
      },
      { step: "initialize", name: "benchThroughputTimer", override: true },
    );
  }
  return timer;
}

export interface Tick {
  readonly at: number;
  readonly ms: number;
  readonly claims: number;
}

/** The dispatcher's ticks and the worker loop(s), running until `stop`. */
export interface RunningEngine {
  readonly ticks: Tick[];
  failedTicks: number;
  stop(): Promise<void>;
}

function startEngine({ sides, plan, o }: Context): RunningEngine {
  const stopEngine = new AbortController();
  const nowMs = () => plan.clock().getTime();
  const dispatcherEngine = sides.engineFor("dispatcher");
  const engine: RunningEngine = {
    ticks: [],
    failedTicks: 0,
    async stop() {
      stopEngine.abort();
      await Promise.all([dispatcher, ...workers]);
    },
  };
  const dispatcher = (async () => {
    while (!stopEngine.signal.aborted) {
      const started = nowMs();
      try {
        const { passes } = await tickOnce(dispatcherEngine, "bench-dispatcher");
        const claims = passes.reduce((s, p) => s + (p.outcome === "swept" ? p.runs : 0), 0);
        engine.ticks.push({ at: started, ms: nowMs() - started, claims });
      } catch (error) {
        engine.failedTicks++;
        dispatcherEngine.obs.log.error("tick failed", { error: String(error) });
      }
      await sleep(Math.max(0, o.tickMs - (nowMs() - started)), stopEngine.signal);
    }
  })();

  const workerEngine = sides.engineFor("worker");
  const handlers = builtInHandlers(
    { signingSecrets: cachedSigningSecrets(workerEngine), allowPrivateTargets: true },
    workerEngine.clock,
  );
  const workers = Array.from({ length: o.loops }, (_, i) =>
    runWorkerLoop(
      { engine: workerEngine, handlers, workerId: `bench-worker-${i}` },
      {
        concurrency: plan.concurrency,
        signal: stopEngine.signal,
        idleWaitSeconds: 0,
        idleSleepMs: 50,
      },
    ),
  );
  return engine;
}

/** The measured window, [t0, t1) on the engines' clock. */
export interface Window {
  readonly t0: number;
  readonly t1: number;
  readonly warmup: ConfigurationResult["warmup"];
}

/**
 * The engine starts before the window: the dispatcher's first pass claims everything from the
 * first occurrences up to its horizon at once, a catch-up that is not steady state. The window
 * starts after it (or after MAX_WARMUP_MS), on a whole second.
 */
async function warmUp(
  { plan, progress }: Context,
  engine: RunningEngine,
  notes: string[],
): Promise<Window> {
  const nowMs = () => plan.clock().getTime();
  const warmupStarted = nowMs();
  const warmingUp = (what: string) =>
    progress.show(
      `throughput ${plan.label}: warming up (${what}) ${((nowMs() - warmupStarted) / SECOND).toFixed(0)} s`,
    );
  while (
    engine.ticks.length + engine.failedTicks === 0 &&
    nowMs() - warmupStarted < MAX_WARMUP_MS
  ) {
    warmingUp("the dispatcher's first pass");
    await sleep(100);
  }
  const t0 = Math.max(plan.firstOccurrenceAt, Math.ceil((nowMs() + 500) / SECOND) * SECOND);
  const firstPass = engine.ticks[0];
  const warmup = {
    seconds: (t0 - warmupStarted) / SECOND,
    firstPassClaims: firstPass?.claims ?? 0,
    firstPassMs: firstPass?.ms ?? Number.NaN,
  };
  if (t0 > plan.firstOccurrenceAt) {
    notes.push(
      `warm-up: the dispatcher's first pass took ${warmup.firstPassMs} ms; occurrences before the window were left out`,
    );
  }
  while (nowMs() < t0) {
    warmingUp(`the window starts in ${((t0 - nowMs()) / SECOND).toFixed(0)} s`);
    await sleep(Math.min(250, Math.max(0, t0 - nowMs())));
  }
  return { t0, t1: t0 + plan.windowMs, warmup };
}

/** The recurring jobs' occurrences in the window. */
function recurringOccurrences(
  recurring: readonly RecurringJob[],
  window: Window,
  periodMs: number,
): Expected[] {
  const expected: Expected[] = [];
  for (const r of recurring) {
    for (let at = r.startAtMs; at < window.t1; at += periodMs) {
      if (at < window.t0) continue;
      expected.push({
        key: runKeyOf(r.jobId, new Date(at).toISOString()),
        kind: "recurring",
        scheduledForMs: at,
      });
    }
  }
  return expected;
}

/** The one-off producer's counts so far, and its end. */
export interface Producer {
  launched: number;
  created: number;
  failed: number;
  done: Promise<void>;
}

/**
 * One-offs, paced: the k-th create is due at t0 + k / rate, each run due `leadMs` after its
 * create starts. Runs due in the window are added to `expected`.
 */
function produceOneOffs(
  { plan, o }: Context,
  engine: Engine,
  window: Window,
  expected: Expected[],
): Producer {
  const { t0, t1 } = window;
  const nowMs = () => plan.clock().getTime();
  const producer: Producer = { launched: 0, created: 0, failed: 0, done: Promise.resolve() };
  producer.done = (async () => {
    if (plan.oneOffPerSecond <= 0) return;
    const inFlight = new Set<Promise<void>>();
    for (;;) {
      const now = nowMs();
      if (now >= t1) break;
      const target = Math.floor(((now - t0) / SECOND) * plan.oneOffPerSecond) + 1;
      while (producer.launched < target && inFlight.size < o.maxCreatesInFlight) {
        producer.launched++;
        const runAtMs = nowMs() + o.leadMs;
        const runAt = new Date(runAtMs).toISOString();
        const task: Promise<void> = createJob(engine, noopJob({ runAt }))
          .then(
            ({ job }) => {
              producer.created++;
              if (runAtMs < t1) {
                expected.push({
                  key: runKeyOf(job.jobId, runAt),
                  kind: "oneOff",
                  scheduledForMs: runAtMs,
                });
              }
            },
            (error: unknown) => {
              producer.failed++;
              engine.obs.log.error("create failed", { error: String(error) });
            },
          )
          .finally(() => inFlight.delete(task));
        inFlight.add(task);
      }
      if (producer.launched < target) {
        await Promise.race(inFlight);
      } else {
        const nextAt = t0 + (producer.launched / plan.oneOffPerSecond) * SECOND;
        await sleep(Math.max(1, Math.min(nextAt, t1) - nowMs()));
      }
    }
    await Promise.allSettled(inFlight);
  })();
  return producer;
}

/** The progress line from the window's start (the warm-up's claims are left out) to the drain's end. */
interface WindowProgress {
  /** What the line says before the counts, and how full the bar is. */
  phase(next: () => readonly [string, number]): void;
  end(): void;
}

function showWindowProgress(
  { h, sides, plan, progress }: Context,
  producer: Producer,
  phase: () => readonly [string, number],
): WindowProgress {
  // Claimed: runs enqueued, i.e. messages sent (every claim, fast path or dispatcher, sends).
  const claimedSoFar = () =>
    Object.values(h.sides).reduce((sum, side) => {
      const ops = side.counter.snapshot().window ?? {};
      return (
        sum + (ops["SQS.SendMessageBatch"]?.messages ?? 0) + (ops["SQS.SendMessage"]?.messages ?? 0)
      );
    }, 0);
  const completedNow = () => sides.tallies.worker.outcomes.get("SUCCEEDED") ?? 0;
  const completedBefore = completedNow();
  const completedSoFar = () => completedNow() - completedBefore;
  let current = phase;
  const line = () => {
    const [text, fraction] = current();
    return `throughput ${plan.label} ${bar(fraction)} ${text} · created ${producer.created} · claimed ${claimedSoFar()} · completed ${completedSoFar()}`;
  };
  const timer = setInterval(() => progress.show(line()), progress.intervalMs);
  progress.show(line(), true);
  return {
    phase(next) {
      current = next;
    },
    end() {
      clearInterval(timer);
      progress.show(line(), true);
      progress.end();
    },
  };
}

/** What was measured over the window itself (the runs are read back after the drain). */
export interface WindowMeasures {
  /** Calls by side and operation. */
  readonly counts: Record<string, Record<string, OperationCount>>;
  readonly nodeCpuSeconds: number;
  readonly dynamoCpuSeconds: number | null;
  readonly eventLoopDelayP99Ms: number;
  readonly eventLoopDelayMaxMs: number;
}

/** Offers the one-offs through the window and measures it; returns once the producer is done. */
async function runWindow(
  context: Context,
  window: Window,
  dynamoPid: number | undefined,
  timer: DynamoTimer,
  expected: Expected[],
): Promise<{ measures: WindowMeasures; producer: Producer; bar: WindowProgress }> {
  const { h, sides, plan, o } = context;
  const nowMs = () => plan.clock().getTime();
  for (const side of Object.values(h.sides)) {
    side.counter.reset();
    side.counter.phase = "window";
  }
  timer.on = true;
  const nodeCpuAtStart = process.cpuUsage();
  const dynamoCpuAtStart = processCpuSeconds(dynamoPid);
  const loopDelay = monitorEventLoopDelay({ resolution: 10 });
  loopDelay.enable();

  const producer = produceOneOffs(context, sides.engineFor("producer"), window, expected);
  const windowBar = showWindowProgress(context, producer, () => {
    const elapsed = Math.min(o.seconds, Math.max(0, (nowMs() - window.t0) / SECOND));
    return [`${elapsed.toFixed(0).padStart(3)}/${o.seconds} s`, elapsed / o.seconds];
  });

  await sleep(Math.max(0, window.t1 - nowMs()));
  const nodeCpu = process.cpuUsage(nodeCpuAtStart);
  const dynamoCpuAtEnd = processCpuSeconds(dynamoPid);
  loopDelay.disable();
  timer.on = false;
  // A copy at the window's end; the counters go on through the drain for the progress bar.
  const counts = Object.fromEntries(
    Object.entries(h.sides).map(([side, s]) => [side, s.counter.snapshot().window ?? {}]),
  );
  // Creates still in flight at the end: their runs are due after the window, but wait for them.
  await producer.done;
  return {
    measures: {
      counts,
      nodeCpuSeconds: (nodeCpu.user + nodeCpu.system) / 1e6,
      dynamoCpuSeconds:
        dynamoCpuAtStart !== null && dynamoCpuAtEnd !== null
          ? dynamoCpuAtEnd - dynamoCpuAtStart
          : null,
      eventLoopDelayP99Ms: loopDelay.percentile(99) / 1e6,
      eventLoopDelayMaxMs: loopDelay.max / 1e6,
    },
    producer,
    bar: windowBar,
  };
}

/**
 * The window's runs finish (or the drain times out) with dispatcher and workers still on.
 * True when every expected run finished.
 */
async function drain(
  { h, plan, o }: Context,
  window: Window,
  expected: readonly Expected[],
  windowBar: WindowProgress,
): Promise<boolean> {
  const nowMs = () => plan.clock().getTime();
  const expectedKeys = new Set(expected.map((e) => e.key));
  const drainUntil = window.t1 + o.drainSeconds * SECOND;
  windowBar.phase(() => {
    const elapsed = Math.max(0, (nowMs() - window.t1) / SECOND);
    return [`draining ${elapsed.toFixed(0)}/${o.drainSeconds} s`, 1];
  });
  while (nowMs() < drainUntil) {
    const finished = (await allRuns(h)).filter(
      (r) =>
        r.attempt === 1 &&
        r.status !== "QUEUED" &&
        r.status !== "RUNNING" &&
        expectedKeys.has(runKeyOf(r.jobId, r.scheduledFor)),
    ).length;
    if (finished >= expectedKeys.size) return true;
    await sleep(2 * SECOND);
  }
  return false;
}

/** One configuration (shard count × worker concurrency), on tables and queues of its own. */
export async function runConfiguration(
  endpoints: { dynamo: string; sqs: string; dynamoPid: number | undefined },
  shards: number,
  concurrency: number,
  o: Resolved,
  progress: Progress,
): Promise<ConfigurationResult> {
  const h = await createHarness(endpoints.dynamo, endpoints.sqs);
  const plan = planConfiguration(shards, concurrency, o);
  const sides = observedSides(h, plan);
  const context: Context = { h, sides, plan, o, progress };
  try {
    /** What else a reader should know about this configuration's figures. */
    const notes: string[] = [];
    const recurring = await createRecurringJobs(context);
    const timer = timeDynamoCalls(h);
    const engine = startEngine(context);
    const window = await warmUp(context, engine, notes);
    const expected = recurringOccurrences(recurring, window, plan.periodMs);
    const { measures, producer, bar } = await runWindow(
      context,
      window,
      endpoints.dynamoPid,
      timer,
      expected,
    );
    const drained = await drain(context, window, expected, bar);
    bar.end();
    await engine.stop();
    for (const side of Object.values(h.sides)) side.counter.phase = null;
    const runs = await allRuns(h);
    return configurationResult({
      plan,
      o,
      window,
      expected,
      runs,
      engine,
      producer,
      measures,
      timer,
      logs: sides.logs,
      drained,
      notes,
    });
  } finally {
    await Promise.allSettled([
      h.plain.dynamo.send(new DeleteTableCommand({ TableName: h.tables.jobs })),
      h.plain.dynamo.send(new DeleteTableCommand({ TableName: h.tables.runs })),
      h.plain.dynamo.send(new DeleteTableCommand({ TableName: h.tables.webhookSecrets })),
      ...Object.values(h.queues).map((url) =>
        h.plain.sqs.send(new DeleteQueueCommand({ QueueUrl: url })),
      ),
    ]);
    h.destroy();
  }
}
