import { readFileSync } from "node:fs";
import { cpus, totalmem } from "node:os";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { DeleteTableCommand } from "@aws-sdk/client-dynamodb";
import { DeleteQueueCommand } from "@aws-sdk/client-sqs";
import { type Clock, sleep, systemClock } from "../shared/clock.js";
import { forEachConcurrently } from "../shared/concurrency.js";
import type { EngineSettings } from "../shared/config.js";
import { horizonOf } from "../shared/dispatch/dispatcher.js";
import { tickOnce } from "../shared/dispatch/tick.js";
import type { Engine } from "../shared/engine.js";
import { builtInHandlers } from "../shared/execution/built-in-handlers.js";
import { runWorkerLoop } from "../shared/execution/worker-loop.js";
import { createJob } from "../shared/jobs/index.js";
import type { Run } from "../shared/model.js";
import {
  type Logger,
  METRICS,
  type MetricName,
  type Metrics,
  type MetricUnit,
} from "../shared/observability.js";
import { cachedSigningSecrets } from "../shared/webhooks/secrets.js";
import { lagChartSvg } from "./lag-chart.js";
import { percentile } from "./percentile.js";
import { allRuns, createHarness, type Harness, noopJob, writeResults } from "./requests-per-run.js";

/**
 * Sustained throughput: for each configuration (shard count × worker concurrency), a steady
 * offered load of one-off and recurring `noop` runs for a while, against DynamoDB Local and
 * fauxqs with an in-process engine: a dispatcher tick (every shard's pass, then the reaper) every
 * `tickMs`, worker loop(s) as the sandbox runs them, and one-offs created through createJob, whose
 * fast path claims and enqueues them at once. Reports claims per second per shard, completions per
 * second and the start lag (startedAt − scheduledFor, read back from the runs table) under load.
 *
 * Load:
 * - one-offs: created at `rate × (1 − recurringShare)` per second, each due `leadMs` after its
 *   create starts (create's fast path claims and enqueues it at once);
 * - recurring: `rate × recurringShare × everySeconds` jobs every `everySeconds`, their first
 *   occurrences spread evenly over one period from the window's start. They are created before
 *   the window with the producer's clock an hour behind, i.e. as jobs created long ago: create
 *   claims nothing (the occurrences are beyond its fast-path window as it sees it), and every run
 *   is claimed by the dispatcher's passes, as for established recurring jobs.
 *
 * The engine starts before the window (warm-up), so the dispatcher's first pass, a catch-up, is
 * not measured. It runs with a short lookahead (default 10 s); its horizon is still rounded up
 * to the end of a minute, so the pass whose horizon enters a new minute claims a whole minute of
 * occurrences at once. The engines' clock parameter is set up to a minute ahead so that this
 * burst falls in the middle of every window (see the "minute bursts" and peak-tick columns).
 *
 * DynamoDB Local does a few hundred puts/s and on the order of a hundred multi-item transactions
 * per second on a 2-core machine (transactions gain little from concurrency), and fauxqs runs in this Node
 * process: the default offered rate (24 runs/s) is one such a machine sustains; the output says
 * when an offered rate was not sustained and why.
 */

const SECOND = 1000;
/** The dispatcher's first pass must be over by then, or the window starts regardless. */
const MAX_WARMUP_MS = 90 * SECOND;

export interface ThroughputOptions {
  /** Length of the measured window per configuration, in seconds. Default 60. */
  readonly seconds?: number;
  /** Shard counts to try (shardCount = maxShardCount). Default [4, 8]. */
  readonly shards?: readonly number[];
  /** Worker concurrencies to try (runs in progress at once per worker loop). Default [16, 64]. */
  readonly concurrency?: readonly number[];
  /** Offered load, runs per second (one-off + recurring). Default 24. */
  readonly rate?: number;
  /** Share of the offered rate that comes from recurring jobs. Default 0.5. */
  readonly recurringShare?: number;
  /** Period of the recurring jobs, whole seconds. Default 10. */
  readonly everySeconds?: number;
  /** A one-off is due this long after its create. Default 2,000 ms. */
  readonly leadMs?: number;
  /** The dispatcher's lookahead. Default 10 s. */
  readonly lookaheadSeconds?: number;
  /** Dispatcher tick period. Default 1,000 ms (as the sandbox with --tick 1). */
  readonly tickMs?: number;
  /** Worker loops, each with the configuration's concurrency. Default 1. */
  readonly loops?: number;
  /** After the window, how long to wait for the window's runs to finish. Default 30 s. */
  readonly drainSeconds?: number;
  /** Creates in flight at once before the producer counts itself behind. Default 32. */
  readonly maxCreatesInFlight?: number;
  /** Time for every engine and for the window; the engine's clock parameter. Default the system clock. */
  readonly clock?: Clock;
  readonly print?: (line: string) => void;
  /** Where the progress bar goes; null for none. Default stderr. */
  readonly progress?: NodeJS.WriteStream | null;
  /** Where results go; null writes nothing. Default bench/results. */
  readonly resultsDir?: string | null;
}

type Resolved = Required<Omit<ThroughputOptions, "print" | "progress" | "resultsDir">>;

export interface LagStats {
  readonly runs: number;
  readonly p50: number;
  readonly p95: number;
  readonly p99: number;
  readonly max: number;
  readonly min: number;
  readonly mean: number;
}

export interface ConfigurationResult {
  readonly label: string;
  readonly shards: number;
  readonly concurrency: number;
  readonly loops: number;
  readonly windowSeconds: number;
  readonly offered: {
    readonly runsPerSecond: number;
    readonly oneOffPerSecond: number;
    readonly recurringPerSecond: number;
    readonly recurringJobs: number;
    readonly everySeconds: number;
  };
  readonly created: {
    readonly oneOffs: number;
    readonly perSecond: number;
    /** One-offs the producer should have created by the end of the window but had not started. */
    readonly shortfall: number;
    readonly failed: number;
  };
  /** Runs whose enqueuedAt (the claim) falls in the window. */
  readonly claimed: {
    readonly runs: number;
    readonly perSecond: number;
    readonly perSecondPerShard: number;
    readonly byDispatcher: number;
    readonly byFastPath: number;
    /** The largest number of runs one tick claimed, and how long that tick took. */
    readonly peakTickClaims: number;
    readonly peakTickMs: number;
    /** The peak tick's claims per second of its duration, per shard: the dispatcher's claim rate flat out. */
    readonly peakPerSecondPerShard: number;
    /**
     * Ticks in the window whose horizon entered a new minute: each claims a whole minute of the
     * recurring jobs' occurrences at once. A window under 60 s holds zero or one of them.
     */
    readonly minuteBursts: number;
  };
  /** Runs that SUCCEEDED with finishedAt in the window. */
  readonly completed: { readonly runs: number; readonly perSecond: number };
  /** The runs (first attempts) scheduled for the window: one-offs created, recurring occurrences. */
  readonly due: {
    readonly runs: number;
    readonly started: number;
    /** Not started even after the drain. */
    readonly notStarted: number;
    /** Due at least 5 s before the window ended but not started by its end. */
    readonly backlogAtEnd: number;
    readonly statuses: Readonly<Record<string, number>>;
  };
  readonly lagMs: LagStats & { readonly firstHalfP95: number; readonly secondHalfP95: number };
  readonly lagByKind: { readonly oneOff: LagStats; readonly recurring: LagStats };
  readonly sustained: boolean;
  /** Why the offered rate was not sustained. */
  readonly verdict: readonly string[];
  readonly notes: readonly string[];
  /** How far ahead of the given clock the engines' clock ran (to place the minute burst). */
  readonly clockOffsetMs: number;
  /** Before the window: the dispatcher's first pass, which claims up to its horizon at once. */
  readonly warmup: {
    readonly seconds: number;
    readonly firstPassClaims: number;
    readonly firstPassMs: number;
  };
  readonly dispatcher: {
    readonly ticks: number;
    readonly tickMsP50: number;
    readonly tickMsP95: number;
    readonly tickMsMax: number;
    readonly failedTicks: number;
  };
  readonly load: {
    readonly dynamoCallsPerSecond: Readonly<Record<string, number>>;
    readonly dynamoTransactionsPerSecond: number;
    /** Whole DynamoDB calls as each side saw them (queueing in DynamoDB Local included). */
    readonly dynamoLatencyMs: Readonly<
      Record<string, { readonly p50: number; readonly p95: number }>
    >;
    readonly sqsCallsPerSecond: number;
    /** Calls per second by side and operation (DynamoDB and SQS). */
    readonly opsPerSecond: Readonly<Record<string, Readonly<Record<string, number>>>>;
    /** This Node process (engine, fauxqs, bench), % of one core. */
    readonly nodeCpuPercent: number;
    /** The DynamoDB Local JVM, % of one core; null where /proc is not readable. */
    readonly dynamoLocalCpuPercent: number | null;
    readonly eventLoopDelayP99Ms: number;
    readonly eventLoopDelayMaxMs: number;
  };
  /** Warnings and errors the engine logged, by message. */
  readonly logs: readonly {
    readonly side: string;
    readonly level: string;
    readonly message: string;
    readonly count: number;
    readonly sample: string;
  }[];
  /** Start lags of every started run in `due`, sorted: what bench/lag-chart.ts draws. */
  readonly lagsMs: readonly number[];
}

export interface ThroughputResult {
  readonly kind: "throughput";
  readonly measuredAt: string;
  readonly target: string;
  readonly machine: string;
  readonly settings: Omit<Resolved, "clock">;
  readonly method: readonly string[];
  readonly configurations: readonly ConfigurationResult[];
}

type Side = "producer" | "dispatcher" | "worker";

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
class LogTally {
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

function lagStats(lags: readonly number[]): LagStats {
  const sorted = [...lags].sort((a, b) => a - b);
  return {
    runs: sorted.length,
    p50: percentile(sorted, 50),
    p95: percentile(sorted, 95),
    p99: percentile(sorted, 99),
    max: sorted.at(-1) ?? Number.NaN,
    min: sorted[0] ?? Number.NaN,
    mean: sorted.length
      ? Math.round(sorted.reduce((s, x) => s + x, 0) / sorted.length)
      : Number.NaN,
  };
}

/**
 * The progress bar, on stderr: one line redrawn with \r on a terminal, else a line every 5 s.
 */
class Progress {
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

interface Expected {
  readonly key: string;
  readonly kind: "oneOff" | "recurring";
  readonly scheduledForMs: number;
}

const runKeyOf = (jobId: string, scheduledFor: string) => `${jobId}|${scheduledFor}`;

const mod = (a: number, m: number) => ((a % m) + m) % m;

async function runConfiguration(
  endpoints: { dynamo: string; sqs: string; dynamoPid: number | undefined },
  shards: number,
  concurrency: number,
  o: Resolved,
  progress: Progress,
): Promise<ConfigurationResult> {
  const label = `${shards} shards × ${concurrency} workers${o.loops > 1 ? ` × ${o.loops} loops` : ""}`;
  const h: Harness = await createHarness(endpoints.dynamo, endpoints.sqs);
  const periodMs = o.everySeconds * SECOND;
  const recurringJobs = Math.round(o.rate * o.recurringShare * o.everySeconds);
  const recurringPerSecond = recurringJobs / o.everySeconds;
  const oneOffPerSecond = o.rate * (1 - o.recurringShare);
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
  const clock: Clock = () => new Date(o.clock().getTime() + offsetMs);
  const nowMs = () => clock().getTime();
  const settings: Partial<EngineSettings> = {
    shardCount: shards,
    maxShardCount: shards,
    lookaheadMs,
  };
  const tallies: Record<Side, Tally> = {
    producer: new Tally(),
    dispatcher: new Tally(),
    worker: new Tally(),
  };
  const logs = new LogTally();
  const engineFor = (side: Side, sideClock: Clock = clock): Engine => ({
    ...h.engine(side, settings, sideClock),
    obs: { log: logs.logger(side), metrics: tallies[side] },
  });

  try {
    /** Why the offered rate was not sustained; empty when it was. */
    const verdict: string[] = [];
    /** What else a reader should know about this configuration's figures. */
    const notes: string[] = [];

    // Recurring jobs, as if created long ago: the producer's clock is an hour behind.
    progress.show(`throughput ${label}: creating ${recurringJobs} recurring jobs…`, true);
    const firstOccurrenceAt = Math.ceil((plannedStart + offsetMs) / SECOND) * SECOND;
    const longAgo: Clock = () => new Date(clock().getTime() - 3_600_000);
    const setupProducer = engineFor("producer", longAgo);
    const recurring: { jobId: string; startAtMs: number }[] = [];
    await forEachConcurrently(
      Array.from({ length: recurringJobs }, (_, i) => i),
      16,
      async (i) => {
        const startAtMs = firstOccurrenceAt + Math.round((i * periodMs) / recurringJobs);
        const { job } = await createJob(
          setupProducer,
          noopJob({ every: `PT${o.everySeconds}S`, startAt: new Date(startAtMs).toISOString() }),
        );
        recurring.push({ jobId: job.jobId, startAtMs });
      },
    );

    // DynamoDB latency as each side sees it (whole calls, SDK retries included), in the window.
    let timing = false;
    const latencies: Record<Side, number[]> = { producer: [], dispatcher: [], worker: [] };
    for (const side of ["producer", "dispatcher", "worker"] as const) {
      h.sides[side].clients.dynamo.middlewareStack.add(
        (next) => async (args) => {
          if (!timing) return next(args);
          const started = performance.now();
          try {
            return await next(args);
          } finally {
            latencies[side].push(performance.now() - started);
          }
        },
        { step: "initialize", name: "benchThroughputTimer", override: true },
      );
    }

    // The engine starts before the window: the dispatcher's first pass claims everything from the
    // first occurrences up to its horizon at once, a catch-up that is not steady state.
    const stopEngine = new AbortController();
    const ticks: { at: number; ms: number; claims: number }[] = [];
    let failedTicks = 0;
    const dispatcherEngine = engineFor("dispatcher");
    const dispatcher = (async () => {
      while (!stopEngine.signal.aborted) {
        const started = nowMs();
        try {
          const { passes } = await tickOnce(dispatcherEngine, "bench-dispatcher");
          const claims = passes.reduce((s, p) => s + (p.outcome === "swept" ? p.runs : 0), 0);
          ticks.push({ at: started, ms: nowMs() - started, claims });
        } catch (error) {
          failedTicks++;
          dispatcherEngine.obs.log.error("tick failed", { error: String(error) });
        }
        await sleep(Math.max(0, o.tickMs - (nowMs() - started)), stopEngine.signal);
      }
    })();

    const workerEngine = engineFor("worker");
    const handlers = builtInHandlers(
      { signingSecrets: cachedSigningSecrets(workerEngine), allowPrivateTargets: true },
      workerEngine.clock,
    );
    const workers = Array.from({ length: o.loops }, (_, i) =>
      runWorkerLoop(
        { engine: workerEngine, handlers, workerId: `bench-worker-${i}` },
        { concurrency, signal: stopEngine.signal, idleWaitSeconds: 0, idleSleepMs: 50 },
      ),
    );

    const warmupStarted = nowMs();
    const warmingUp = (what: string) =>
      progress.show(
        `throughput ${label}: warming up (${what}) ${((nowMs() - warmupStarted) / SECOND).toFixed(0)} s`,
      );
    while (ticks.length + failedTicks === 0 && nowMs() - warmupStarted < MAX_WARMUP_MS) {
      warmingUp("the dispatcher's first pass");
      await sleep(100);
    }
    const t0 = Math.max(firstOccurrenceAt, Math.ceil((nowMs() + 500) / SECOND) * SECOND);
    const t1 = t0 + windowMs;
    const firstPass = ticks[0];
    const warmup = {
      seconds: (t0 - warmupStarted) / SECOND,
      firstPassClaims: firstPass?.claims ?? 0,
      firstPassMs: firstPass?.ms ?? Number.NaN,
    };
    if (t0 > firstOccurrenceAt) {
      notes.push(
        `warm-up: the dispatcher's first pass took ${warmup.firstPassMs} ms; occurrences before the window were left out`,
      );
    }
    const expected: Expected[] = [];
    for (const r of recurring) {
      for (let at = r.startAtMs; at < t1; at += periodMs) {
        if (at < t0) continue;
        expected.push({
          key: runKeyOf(r.jobId, new Date(at).toISOString()),
          kind: "recurring",
          scheduledForMs: at,
        });
      }
    }
    while (nowMs() < t0) {
      warmingUp(`the window starts in ${((t0 - nowMs()) / SECOND).toFixed(0)} s`);
      await sleep(Math.min(250, Math.max(0, t0 - nowMs())));
    }

    // The window.
    for (const side of Object.values(h.sides)) {
      side.counter.reset();
      side.counter.phase = "window";
    }
    timing = true;
    const nodeCpuAtStart = process.cpuUsage();
    const dynamoCpuAtStart = processCpuSeconds(endpoints.dynamoPid);
    const loopDelay = monitorEventLoopDelay({ resolution: 10 });
    loopDelay.enable();

    // One-offs, paced: the k-th create is due at t0 + k / rate.
    const producerEngine = engineFor("producer");
    let launched = 0;
    let created = 0;
    let failedCreates = 0;
    const producer = (async () => {
      if (oneOffPerSecond <= 0) return;
      const inFlight = new Set<Promise<void>>();
      for (;;) {
        const now = nowMs();
        if (now >= t1) break;
        const target = Math.floor(((now - t0) / SECOND) * oneOffPerSecond) + 1;
        while (launched < target && inFlight.size < o.maxCreatesInFlight) {
          launched++;
          const runAtMs = nowMs() + o.leadMs;
          const runAt = new Date(runAtMs).toISOString();
          const task: Promise<void> = createJob(producerEngine, noopJob({ runAt }))
            .then(
              ({ job }) => {
                created++;
                if (runAtMs < t1) {
                  expected.push({
                    key: runKeyOf(job.jobId, runAt),
                    kind: "oneOff",
                    scheduledForMs: runAtMs,
                  });
                }
              },
              (error: unknown) => {
                failedCreates++;
                producerEngine.obs.log.error("create failed", { error: String(error) });
              },
            )
            .finally(() => inFlight.delete(task));
          inFlight.add(task);
        }
        if (launched < target) {
          await Promise.race(inFlight);
        } else {
          const nextAt = t0 + (launched / oneOffPerSecond) * SECOND;
          await sleep(Math.max(1, Math.min(nextAt, t1) - nowMs()));
        }
      }
      await Promise.allSettled(inFlight);
    })();

    // The progress bar counts from the window's start (the warm-up's claims are left out).
    // Claimed: runs enqueued, i.e. messages sent (every claim, fast path or dispatcher, sends).
    const claimedSoFar = () =>
      Object.values(h.sides).reduce((sum, side) => {
        const ops = side.counter.snapshot().window ?? {};
        return (
          sum +
          (ops["SQS.SendMessageBatch"]?.messages ?? 0) +
          (ops["SQS.SendMessage"]?.messages ?? 0)
        );
      }, 0);
    const completedNow = () => tallies.worker.outcomes.get("SUCCEEDED") ?? 0;
    const completedBefore = completedNow();
    const completedSoFar = () => completedNow() - completedBefore;
    const status = (phase: string, fraction: number) =>
      `throughput ${label} ${bar(fraction)} ${phase} · created ${created} · claimed ${claimedSoFar()} · completed ${completedSoFar()}`;
    let phaseLine = () => {
      const elapsed = Math.min(o.seconds, Math.max(0, (nowMs() - t0) / SECOND));
      return status(`${elapsed.toFixed(0).padStart(3)}/${o.seconds} s`, elapsed / o.seconds);
    };
    const timer = setInterval(() => progress.show(phaseLine()), progress.intervalMs);
    progress.show(phaseLine(), true);

    await sleep(Math.max(0, t1 - nowMs()));
    const nodeCpu = process.cpuUsage(nodeCpuAtStart);
    const dynamoCpuAtEnd = processCpuSeconds(endpoints.dynamoPid);
    loopDelay.disable();
    timing = false;
    // A copy at the window's end; the counters go on through the drain for the progress bar.
    const counts = Object.fromEntries(
      Object.entries(h.sides).map(([side, s]) => [side, s.counter.snapshot().window ?? {}]),
    );
    // Creates still in flight at the end: their runs are due after the window, but wait for them.
    await producer;

    // Drain: the window's runs finish (or the drain times out) with dispatcher and workers still on.
    const expectedKeys = new Set(expected.map((e) => e.key));
    const drainUntil = t1 + o.drainSeconds * SECOND;
    phaseLine = () => {
      const elapsed = Math.max(0, (nowMs() - t1) / SECOND);
      return status(`draining ${elapsed.toFixed(0)}/${o.drainSeconds} s`, 1);
    };
    let drained = false;
    while (nowMs() < drainUntil) {
      const finished = (await allRuns(h)).filter(
        (r) =>
          r.attempt === 1 &&
          r.status !== "QUEUED" &&
          r.status !== "RUNNING" &&
          expectedKeys.has(runKeyOf(r.jobId, r.scheduledFor)),
      ).length;
      if (finished >= expectedKeys.size) {
        drained = true;
        break;
      }
      await sleep(2 * SECOND);
    }
    clearInterval(timer);
    progress.show(phaseLine(), true);
    progress.end();
    stopEngine.abort();
    await Promise.all([dispatcher, ...workers]);
    for (const side of Object.values(h.sides)) side.counter.phase = null;
    if (!drained)
      verdict.push(`the window's runs had not all finished ${o.drainSeconds} s after it`);

    // Figures, from the runs table.
    const runs = await allRuns(h);
    const inWindow = (iso: string | null) => {
      if (iso === null) return false;
      const ms = Date.parse(iso);
      return ms >= t0 && ms < t1;
    };
    const firstAttempts = new Map<string, Run>();
    for (const r of runs)
      if (r.attempt === 1) firstAttempts.set(runKeyOf(r.jobId, r.scheduledFor), r);
    const statuses: Record<string, number> = {};
    const lags: { lag: number; kind: Expected["kind"]; scheduledForMs: number }[] = [];
    let backlogAtEnd = 0;
    const cutoff = t1 - 5 * SECOND;
    let dueBeforeCutoff = 0;
    for (const e of expected) {
      const run = firstAttempts.get(e.key);
      const state = run?.status ?? "NOT_CLAIMED";
      statuses[state] = (statuses[state] ?? 0) + 1;
      const startedMs = run?.startedAt ? Date.parse(run.startedAt) : null;
      if (startedMs !== null) {
        lags.push({
          lag: startedMs - e.scheduledForMs,
          kind: e.kind,
          scheduledForMs: e.scheduledForMs,
        });
      }
      if (e.scheduledForMs < cutoff) {
        dueBeforeCutoff++;
        if (startedMs === null || startedMs >= t1) backlogAtEnd++;
      }
    }
    const lagValues = lags.map((l) => l.lag).sort((a, b) => a - b);
    const half = t0 + windowMs / 2;
    const p95Of = (xs: number[]) =>
      percentile(
        [...xs].sort((a, b) => a - b),
        95,
      );
    const claimedRuns = runs.filter((r) => inWindow(r.enqueuedAt));
    const completedRuns = runs.filter((r) => r.status === "SUCCEEDED" && inWindow(r.finishedAt));
    const windowTicks = ticks.filter((t) => t.at >= t0 && t.at < t1);
    const horizonMinute = (at: number) => horizonOf(new Date(at), lookaheadMs).minute;
    const minuteBursts = ticks.filter(
      (t, i) =>
        t.at >= t0 &&
        t.at < t1 &&
        i > 0 &&
        horizonMinute(t.at) !== horizonMinute(ticks[i - 1]?.at ?? t.at),
    ).length;
    const peak = windowTicks.reduce((best, t) => (t.claims > best.claims ? t : best), {
      at: 0,
      ms: 0,
      claims: 0,
    });
    const tickMs = windowTicks.map((t) => t.ms).sort((a, b) => a - b);

    const offeredOneOffs = Math.floor(o.seconds * oneOffPerSecond);
    const shortfall = Math.max(0, offeredOneOffs - launched);
    if (launched < 0.95 * offeredOneOffs) {
      verdict.push(
        `the producer created ${launched} of ${offeredOneOffs} offered one-offs (${maxInFlightNote(o)})`,
      );
    }
    if (failedCreates > 0) verdict.push(`${failedCreates} creates failed`);
    const backlogLimit = Math.max(3, Math.ceil(0.02 * dueBeforeCutoff));
    if (backlogAtEnd > backlogLimit) {
      verdict.push(
        `backlog: ${backlogAtEnd} of ${dueBeforeCutoff} runs due ≥ 5 s before the window ended had not started by its end`,
      );
    }
    const notStarted = expected.length - lags.length;
    if (notStarted > 0) verdict.push(`${notStarted} runs due in the window never started`);
    const skipped = statuses.SKIPPED ?? 0;
    if (skipped > 0) verdict.push(`${skipped} runs were SKIPPED (late past the misfire grace?)`);

    const seconds = windowMs / SECOND;
    const perSecond = (x: number) => x / seconds;
    const dynamoCallsPerSecond: Record<string, number> = {};
    let transactions = 0;
    let sqsCalls = 0;
    let dynamoTotal = 0;
    const opsPerSecond: Record<string, Record<string, number>> = {};
    for (const [side, ops] of Object.entries(counts)) {
      let dynamo = 0;
      const sideOps: Record<string, number> = {};
      opsPerSecond[side] = sideOps;
      for (const [op, c] of Object.entries(ops)) {
        sideOps[op] = perSecond(c.calls);
        if (op.startsWith("DynamoDB.")) {
          dynamo += c.calls;
          if (op === "DynamoDB.TransactWriteItems") transactions += c.calls;
        } else {
          sqsCalls += c.calls;
        }
      }
      dynamoCallsPerSecond[side] = perSecond(dynamo);
      dynamoTotal += dynamo;
    }
    dynamoCallsPerSecond.total = perSecond(dynamoTotal);

    return {
      label,
      shards,
      concurrency,
      loops: o.loops,
      windowSeconds: seconds,
      offered: {
        runsPerSecond: oneOffPerSecond + recurringPerSecond,
        oneOffPerSecond,
        recurringPerSecond,
        recurringJobs,
        everySeconds: o.everySeconds,
      },
      created: {
        oneOffs: created,
        perSecond: perSecond(created),
        shortfall,
        failed: failedCreates,
      },
      claimed: {
        runs: claimedRuns.length,
        perSecond: perSecond(claimedRuns.length),
        perSecondPerShard: perSecond(claimedRuns.length) / shards,
        byDispatcher: windowTicks.reduce((s, t) => s + t.claims, 0),
        byFastPath: claimedRuns.length - windowTicks.reduce((s, t) => s + t.claims, 0),
        peakTickClaims: peak.claims,
        peakTickMs: peak.ms,
        peakPerSecondPerShard: peak.ms > 0 ? peak.claims / (peak.ms / SECOND) / shards : 0,
        minuteBursts,
      },
      completed: { runs: completedRuns.length, perSecond: perSecond(completedRuns.length) },
      due: {
        runs: expected.length,
        started: lags.length,
        notStarted,
        backlogAtEnd,
        statuses,
      },
      lagMs: {
        ...lagStats(lagValues),
        firstHalfP95: p95Of(lags.filter((l) => l.scheduledForMs < half).map((l) => l.lag)),
        secondHalfP95: p95Of(lags.filter((l) => l.scheduledForMs >= half).map((l) => l.lag)),
      },
      lagByKind: {
        oneOff: lagStats(lags.filter((l) => l.kind === "oneOff").map((l) => l.lag)),
        recurring: lagStats(lags.filter((l) => l.kind === "recurring").map((l) => l.lag)),
      },
      sustained: verdict.length === 0,
      verdict,
      notes,
      clockOffsetMs: offsetMs,
      warmup,
      dispatcher: {
        ticks: windowTicks.length,
        tickMsP50: percentile(tickMs, 50),
        tickMsP95: percentile(tickMs, 95),
        tickMsMax: tickMs.at(-1) ?? Number.NaN,
        failedTicks,
      },
      load: {
        dynamoCallsPerSecond,
        dynamoTransactionsPerSecond: perSecond(transactions),
        dynamoLatencyMs: Object.fromEntries(
          Object.entries(latencies).map(([side, xs]) => {
            const sorted = [...xs].sort((a, b) => a - b);
            return [side, { p50: percentile(sorted, 50), p95: percentile(sorted, 95) }];
          }),
        ),
        sqsCallsPerSecond: perSecond(sqsCalls),
        opsPerSecond,
        nodeCpuPercent: ((nodeCpu.user + nodeCpu.system) / 1e6 / seconds) * 100,
        dynamoLocalCpuPercent:
          dynamoCpuAtStart !== null && dynamoCpuAtEnd !== null
            ? ((dynamoCpuAtEnd - dynamoCpuAtStart) / seconds) * 100
            : null,
        eventLoopDelayP99Ms: loopDelay.percentile(99) / 1e6,
        eventLoopDelayMaxMs: loopDelay.max / 1e6,
      },
      logs: [...logs.entries.values()].sort((a, b) => b.count - a.count),
      lagsMs: lagValues,
    };
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

const maxInFlightNote = (o: Resolved) =>
  `creates are capped at ${o.maxCreatesInFlight} in flight: DynamoDB Local could not keep up`;

const fmt = (x: number, digits = 1) => (Number.isFinite(x) ? x.toFixed(digits) : "–");
const ms = (x: number) => (Number.isFinite(x) ? `${Math.round(x)}` : "–");

export function markdown(result: ThroughputResult): string {
  const s = result.settings;
  const lines = [
    `## Sustained throughput (${result.measuredAt.slice(0, 10)}, ${result.target}, in-process engine)`,
    "",
    `${result.machine}. Offered ${s.rate} runs/s per configuration for ${s.seconds} s (${Math.round((1 - s.recurringShare) * 100)} % one-offs created through the fast path, due ${s.leadMs} ms after their create; ${Math.round(s.recurringShare * 100)} % recurring jobs every ${s.everySeconds} s, claimed by the dispatcher). Dispatcher tick every ${s.tickMs} ms, lookahead ${s.lookaheadSeconds} s; ${s.loops} worker loop(s). Lag = startedAt − scheduledFor of the runs due in the window, read from the runs table.`,
    "",
    "| shards × workers | offered runs/s | one-offs created/s | claimed/s/shard (avg) | claimed/s/shard (peak tick) | completed/s | lag p50 ms | p95 ms | p99 ms | max ms | sustained |",
    "|---|---|---|---|---|---|---|---|---|---|---|",
  ];
  for (const c of result.configurations) {
    lines.push(
      `| ${c.shards} × ${c.concurrency}${c.loops > 1 ? ` × ${c.loops} loops` : ""} | ${fmt(c.offered.runsPerSecond)} | ${fmt(c.created.perSecond)} | ${fmt(c.claimed.perSecondPerShard, 2)} | ${fmt(c.claimed.peakPerSecondPerShard, 1)} | ${fmt(c.completed.perSecond)} | ${ms(c.lagMs.p50)} | ${ms(c.lagMs.p95)} | ${ms(c.lagMs.p99)} | ${ms(c.lagMs.max)} | ${c.sustained ? "yes" : "**no**"} |`,
    );
  }
  lines.push(
    "",
    "### Under the hood (per configuration, over the window)",
    "",
    "| shards × workers | due / started | lag p95 one-off / recurring ms | lag p95 1st / 2nd half ms | claims fast path / dispatcher | minute bursts | peak tick: claims (ms) | tick p50 / max ms | first pass: claims (ms) | DynamoDB calls/s (tx/s) | DynamoDB ms p50/p95: worker · dispatcher · producer | SQS calls/s | Node CPU % | DynamoDB Local CPU % | event-loop p99 ms |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
  );
  for (const c of result.configurations) {
    const l = c.load;
    const latency = (side: string) => {
      const x = l.dynamoLatencyMs[side];
      return x ? `${ms(x.p50)}/${ms(x.p95)}` : "–";
    };
    lines.push(
      `| ${c.shards} × ${c.concurrency} | ${c.due.runs} / ${c.due.started} | ${ms(c.lagByKind.oneOff.p95)} / ${ms(c.lagByKind.recurring.p95)} | ${ms(c.lagMs.firstHalfP95)} / ${ms(c.lagMs.secondHalfP95)} | ${c.claimed.byFastPath} / ${c.claimed.byDispatcher} | ${c.claimed.minuteBursts} | ${c.claimed.peakTickClaims} (${ms(c.claimed.peakTickMs)}) | ${ms(c.dispatcher.tickMsP50)} / ${ms(c.dispatcher.tickMsMax)} | ${c.warmup.firstPassClaims} (${ms(c.warmup.firstPassMs)}) | ${fmt(l.dynamoCallsPerSecond.total ?? Number.NaN, 0)} (${fmt(l.dynamoTransactionsPerSecond, 0)}) | ${latency("worker")} · ${latency("dispatcher")} · ${latency("producer")} | ${fmt(l.sqsCallsPerSecond, 0)} | ${fmt(l.nodeCpuPercent, 0)} | ${l.dynamoLocalCpuPercent === null ? "–" : fmt(l.dynamoLocalCpuPercent, 0)} | ${fmt(l.eventLoopDelayP99Ms, 0)} |`,
    );
  }
  const unsustained = result.configurations.filter((c) => !c.sustained);
  if (unsustained.length > 0) {
    lines.push("", "**Offered rate not sustained:**", "");
    for (const c of unsustained) lines.push(`- ${c.label}: ${c.verdict.join("; ")}`);
  }
  const noted = result.configurations.filter((c) => c.notes.length > 0);
  if (noted.length > 0) {
    lines.push("", "Notes:", "");
    for (const c of noted) lines.push(`- ${c.label}: ${c.notes.join("; ")}`);
  }
  const logged = result.configurations.flatMap((c) =>
    c.logs.map((e) => `- ${c.label}: ${e.side} ${e.level} "${e.message}" × ${e.count}`),
  );
  if (logged.length > 0) lines.push("", "Engine warnings and errors:", "", ...logged);
  lines.push("", "Method:", "", ...result.method.map((m) => `- ${m}`));
  return lines.join("\n");
}

function resolve_(options: ThroughputOptions): Resolved {
  return {
    seconds: options.seconds ?? 60,
    shards: options.shards ?? [4, 8],
    concurrency: options.concurrency ?? [16, 64],
    rate: options.rate ?? 24,
    recurringShare: options.recurringShare ?? 0.5,
    everySeconds: options.everySeconds ?? 10,
    leadMs: options.leadMs ?? 2000,
    lookaheadSeconds: options.lookaheadSeconds ?? 10,
    tickMs: options.tickMs ?? 1000,
    loops: options.loops ?? 1,
    drainSeconds: options.drainSeconds ?? 30,
    maxCreatesInFlight: options.maxCreatesInFlight ?? 32,
    clock: options.clock ?? systemClock,
  };
}

function validate(o: Resolved): void {
  const positiveInt = (name: string, x: number) => {
    if (!Number.isInteger(x) || x < 1)
      throw new Error(`${name} must be a positive integer, got ${x}`);
  };
  positiveInt("seconds", o.seconds);
  positiveInt("everySeconds", o.everySeconds);
  positiveInt("loops", o.loops);
  positiveInt("maxCreatesInFlight", o.maxCreatesInFlight);
  for (const s of o.shards) positiveInt("shards", s);
  for (const c of o.concurrency) positiveInt("concurrency", c);
  if (o.shards.length === 0 || o.concurrency.length === 0)
    throw new Error("no configuration to run");
  if (!(o.rate > 0)) throw new Error(`rate must be positive, got ${o.rate}`);
  if (!(o.recurringShare >= 0 && o.recurringShare <= 1))
    throw new Error(`recurringShare must be in [0, 1], got ${o.recurringShare}`);
  if (!(o.leadMs >= 0 && o.tickMs > 0 && o.drainSeconds >= 0 && o.lookaheadSeconds >= 0))
    throw new Error("leadMs, tickMs, drainSeconds and lookaheadSeconds must not be negative");
}

export async function runThroughput(options: ThroughputOptions = {}): Promise<ThroughputResult> {
  process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= "true";
  const print = options.print ?? ((line: string) => console.log(line));
  const o = resolve_(options);
  validate(o);
  const progress = new Progress(
    options.progress === undefined ? process.stderr : options.progress,
    () => o.clock().getTime(),
  );
  const configs = o.shards.flatMap((shards) =>
    o.concurrency.map((concurrency) => ({ shards, concurrency })),
  );
  print(
    `throughput: ${configs.length} configuration(s) × ${o.seconds} s at ${o.rate} runs/s offered; starting DynamoDB Local and fauxqs…`,
  );
  const { startDynamoDbLocal, startSqsEmulator } = await import("../infra/sandbox/emulators.js");
  const [dynamo, sqs] = await Promise.all([startDynamoDbLocal(), startSqsEmulator()]);
  const configurations: ConfigurationResult[] = [];
  try {
    for (const { shards, concurrency } of configs) {
      const c = await runConfiguration(
        { dynamo: dynamo.endpoint, sqs: sqs.endpoint, dynamoPid: dynamo.pid },
        shards,
        concurrency,
        o,
        progress,
      );
      configurations.push(c);
      print(
        `throughput ${c.label}: offered ${fmt(c.offered.runsPerSecond)} runs/s; claimed ${fmt(c.claimed.perSecondPerShard, 2)}/s per shard (${fmt(c.claimed.perSecond)}/s); completed ${fmt(c.completed.perSecond)}/s; start lag p50 ${ms(c.lagMs.p50)} ms, p95 ${ms(c.lagMs.p95)} ms, p99 ${ms(c.lagMs.p99)} ms, max ${ms(c.lagMs.max)} ms (${c.due.started}/${c.due.runs} runs) — ${c.sustained ? "sustained" : `NOT sustained: ${c.verdict.join("; ")}`}`,
      );
    }
  } finally {
    await Promise.all([dynamo.stop(), sqs.stop()]);
  }
  const cpu = cpus();
  const { clock: _clock, ...settings } = o;
  const result: ThroughputResult = {
    kind: "throughput",
    measuredAt: o.clock().toISOString(),
    target: "DynamoDB Local + fauxqs (in this process)",
    machine: `${cpu.length} × ${cpu[0]?.model ?? "cpu"}, ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}`,
    settings,
    method: [
      "One process: the engine (dispatcher ticks, worker loop(s), the one-off producer), fauxqs, and the bench; DynamoDB Local in its own JVM.",
      "One-offs: createJob, whose fast path claims the run and enqueues it at once (whatever the engine's create does at the time of the run: see opsPerSecond.producer in the JSON); due `leadMs` after the create starts, so a slow create shows as lag.",
      "Recurring: jobs created before the window with a clock an hour behind (as if created long ago), first occurrences spread over one period from 2 s into the window; every run claimed by the dispatcher.",
      "Claimed: runs whose enqueuedAt is in the window (the dispatcher claims up to the end of the minute after now + lookahead, so it runs ahead of what is due). Completed: SUCCEEDED with finishedAt in the window. Lag: first attempts scheduled in the window.",
      "Not sustained when: the producer fell 5 % behind its pace, runs due ≥ 5 s before the end had not started by the end (over 2 %, min 3), any run due in the window never started after the drain, or runs were skipped.",
      "The dispatcher claims a whole minute of recurring occurrences in the pass whose horizon (now + lookahead) enters a new minute. The engines' clock (their clock parameter) is set up to a minute ahead so that this pass falls in the middle of every window: each window under two minutes holds exactly one such burst ('minute bursts').",
      "Per-shard figures divide by the shard count; DynamoDB Local has no partitions, so they show how the dispatcher's claims spread, not a partition limit.",
    ],
    configurations,
  };
  const table = markdown(result);
  print(table);
  if (options.resultsDir !== null) {
    const base = await writeResults(options.resultsDir, result.measuredAt, "throughput", {
      json: `${JSON.stringify(result, null, 2)}\n`,
      md: `${table}\n`,
      svg: lagChartSvg(
        configurations.map((c) => ({ label: c.label, lagsMs: c.lagsMs })),
        { title: `Start lag under ${o.rate} runs/s offered (${result.measuredAt.slice(0, 10)})` },
      ),
    });
    print(`wrote ${base}.json, .md and .svg`);
  }
  return result;
}

function numberList(name: string, text: string): number[] {
  const list = text.split(",").map((s) => Number(s.trim()));
  if (list.some((x) => !Number.isInteger(x) || x < 1))
    throw new Error(`--${name} must be positive integers separated by commas, got "${text}"`);
  return list;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const { values } = parseArgs({
    options: {
      seconds: { type: "string", default: "60" },
      shards: { type: "string", default: "4,8" },
      concurrency: { type: "string", default: "16,64" },
      rate: { type: "string", default: "24" },
      "recurring-share": { type: "string", default: "0.5" },
      every: { type: "string", default: "10" },
      "lead-ms": { type: "string", default: "2000" },
      lookahead: { type: "string", default: "10" },
      "tick-ms": { type: "string", default: "1000" },
      loops: { type: "string", default: "1" },
      drain: { type: "string", default: "30" },
      "no-write": { type: "boolean", default: false },
    },
  });
  await runThroughput({
    seconds: Number(values.seconds),
    shards: numberList("shards", values.shards),
    concurrency: numberList("concurrency", values.concurrency),
    rate: Number(values.rate),
    recurringShare: Number(values["recurring-share"]),
    everySeconds: Number(values.every),
    leadMs: Number(values["lead-ms"]),
    lookaheadSeconds: Number(values.lookahead),
    tickMs: Number(values["tick-ms"]),
    loops: Number(values.loops),
    drainSeconds: Number(values.drain),
    ...(values["no-write"] ? { resultsDir: null } : {}),
  });
}
