import { cpus, totalmem } from "node:os";
import { pathToFileURL } from "node:url";
import { type Clock, systemClock } from "../shared/clock.js";
import { benchArgs } from "./args.js";
import { lagChartSvg } from "./lag-chart.js";
import { writeResults } from "./requests-per-run.js";
import { Progress, runConfiguration } from "./throughput-configuration.js";

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

export type Resolved = Required<Omit<ThroughputOptions, "print" | "progress" | "resultsDir">>;

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
  const values = benchArgs(import.meta.url, {
    seconds: { type: "string", default: "60" },
    shards: { type: "string", default: "4,8", list: true },
    concurrency: { type: "string", default: "16,64", list: true },
    rate: { type: "string", default: "24" },
    "recurring-share": { type: "string", default: "0.5" },
    every: { type: "string", default: "10" },
    "lead-ms": { type: "string", default: "2000" },
    lookahead: { type: "string", default: "10" },
    "tick-ms": { type: "string", default: "1000" },
    loops: { type: "string", default: "1" },
    drain: { type: "string", default: "30" },
    "no-write": { type: "boolean", default: false },
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
