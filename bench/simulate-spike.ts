import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import {
  MAX_WORKER_CONCURRENCY,
  resolveSettings,
  workerEventSourceConcurrency,
} from "../infra/settings.js";

/**
 * Scale on paper: N one-off jobs all due at 00:00:00. Arithmetic, not a
 * measurement: every rate below is an input, printed with the result.
 *
 * Claim side. Due entries of one shard and minute share one partition key
 * (DUE#minute#shard), so deleting them (inside each claim transaction) is
 * bounded by that partition's 1,000 WCU/s; the query reading them by its
 * 3,000 RCU/s. Claims for 00:00 can start with the first tick whose horizon
 * reaches that minute: up to `lookahead` before (minus up to a tick).
 * Start side. At 00:00 every run is started by a worker: one strongly
 * consistent BatchGetItem (the run and its job) before the handler, its start
 * written with the run's ending (or first heartbeat), then the job's write;
 * these go to the jobs and runs tables' many partitions, so the table-level
 * ceiling and the worker pool decide.
 */

interface Inputs {
  readonly jobs: number;
  /** Write units a claim spends on the bucket partition (the due entry's delete, transactional). */
  readonly bucketWcuPerClaim: number;
  /** All write units of one claim (job update, run put, GSIs…). */
  readonly wruPerClaim: number;
  /** Write units a worker spends before the handler starts (0: a first start is written with the run's first write). */
  readonly startWruPerRun: number;
  /** All write units of the worker per run. */
  readonly workerWruPerRun: number;
  readonly dueEntryBytes: number;
  /** Per-table ceiling, write units/s (the default account quota for an on-demand table is 40,000). */
  readonly tableWruPerSecond: number;
  /** Claims in flight per dispatcher pass and the latency of one claim transaction on AWS. */
  readonly claimConcurrency: number;
  readonly claimLatencyMs: number;
  /**
   * Worker: runs started per second by the pool (concurrency × batch / invocation seconds). The
   * concurrency is the invocations the runs' queue takes: a one-off is normal priority unless
   * given, and the stack caps the normal queue's event source at workerConcurrencyNormal.
   */
  readonly workerConcurrency: number;
  readonly batchSize: number;
  readonly invocationMs: number;
}

const WRITES = new Set([
  "DynamoDB.PutItem",
  "DynamoDB.UpdateItem",
  "DynamoDB.DeleteItem",
  "DynamoDB.BatchWriteItem",
  "DynamoDB.TransactWriteItems",
]);

interface RequestsResult {
  readonly measuredAt: string;
  readonly scenarios: {
    id: string;
    ops: { side: string; op: string; unitsPerRun: number }[];
  }[];
}

/**
 * The requests bench's newest measurement (by `measuredAt`: a file's name may carry a label) of
 * the default claim, a transaction: a result whose dispatcher wrote none (`-plain`, measured with
 * `oneOffClaimWrites: plain`) measures an opt-in setting, and has no transaction to count.
 */
function latestRequestsResult(): RequestsResult | null {
  const dir = join(import.meta.dirname, "results");
  let files: string[] = [];
  try {
    files = readdirSync(dir).filter((f) => /-requests(-[\w-]+)?\.json$/.test(f));
  } catch {
    return null;
  }
  const claimsByTransaction = (result: RequestsResult) =>
    result.scenarios.some(
      (s) =>
        s.id === "b" &&
        s.ops.some((o) => o.side === "dispatcher" && o.op === "DynamoDB.TransactWriteItems"),
    );
  const results = files
    .map((f) => JSON.parse(readFileSync(join(dir, f), "utf8")) as RequestsResult)
    .filter(claimsByTransaction);
  return results.sort((a, b) => a.measuredAt.localeCompare(b.measuredAt)).at(-1) ?? null;
}

function measuredDefaults(): Partial<Inputs> {
  const scenarios = latestRequestsResult()?.scenarios ?? [];
  const b = scenarios.find((s) => s.id === "b");
  if (!b) return {};
  const units = (side: string, op: string) =>
    b.ops.find((o) => o.side === side && o.op === op)?.unitsPerRun ?? Number.NaN;
  const worker = b.ops
    .filter((o) => o.side === "worker" && WRITES.has(o.op))
    .reduce((s, o) => s + o.unitsPerRun, 0);
  // A claim is its runs' puts and its transaction (older results have no puts: the runs were in it).
  const runPuts = b.ops.some((o) => o.side === "dispatcher" && o.op === "DynamoDB.PutItem")
    ? units("dispatcher", "DynamoDB.PutItem")
    : 0;
  return {
    wruPerClaim: units("dispatcher", "DynamoDB.TransactWriteItems") + runPuts,
    workerWruPerRun: worker,
  };
}

/** What a stack deployed with its defaults runs the spike's (normal-priority) runs with. */
const STACK = resolveSettings();

/** The precision spike: the runs due on one second the page also sizes. */
const PRECISION_SPIKE_JOBS = 10_000;

const defaults: Inputs = {
  jobs: 1_000_000,
  bucketWcuPerClaim: 2,
  wruPerClaim: 10,
  // A first start rides on the run's ending or first heartbeat: nothing is written before the handler.
  startWruPerRun: 0,
  workerWruPerRun: 14,
  dueEntryBytes: 600,
  tableWruPerSecond: 40_000,
  claimConcurrency: 16,
  claimLatencyMs: 15,
  workerConcurrency: workerEventSourceConcurrency(STACK).normal,
  batchSize: STACK.workerBatchSize,
  invocationMs: 100,
  ...measuredDefaults(),
};

interface ClaimPlan {
  readonly shards: number;
  readonly lookaheadS: number;
  readonly perShard: number;
  readonly shardRate: number;
  readonly limitedBy: string;
  readonly claimSeconds: number;
  /** Worst case: the first tick that sees the bucket comes up to 60 s after it could. */
  readonly windowSeconds: number;
  readonly claimedBeforeDue: number;
  readonly bucketRcu: number;
}

export function claimPlan(input: Inputs, shards: number, lookaheadS: number): ClaimPlan {
  const perShard = input.jobs / shards;
  const partitionRate = 1_000 / input.bucketWcuPerClaim;
  const dispatcherRate = input.claimConcurrency / (input.claimLatencyMs / 1000);
  const tableRate = input.tableWruPerSecond / input.wruPerClaim / shards;
  const shardRate = Math.min(partitionRate, dispatcherRate, tableRate);
  const limitedBy =
    shardRate === partitionRate
      ? "bucket partition 1,000 WCU/s"
      : shardRate === dispatcherRate
        ? "dispatcher claim concurrency"
        : "table write ceiling";
  const claimSeconds = perShard / shardRate;
  const windowSeconds = Math.max(0, lookaheadS - 60);
  return {
    shards,
    lookaheadS,
    perShard,
    shardRate,
    limitedBy,
    claimSeconds,
    windowSeconds,
    claimedBeforeDue: Math.min(1, windowSeconds / claimSeconds),
    bucketRcu: (perShard * input.dueEntryBytes) / 4096,
  };
}

export function startSide(input: Inputs) {
  const poolRate = (input.workerConcurrency * input.batchSize) / (input.invocationMs / 1000);
  const startWriteRate =
    input.startWruPerRun > 0
      ? input.tableWruPerSecond / input.startWruPerRun
      : Number.POSITIVE_INFINITY;
  const sustainedRate = input.tableWruPerSecond / input.workerWruPerRun;
  const rate = Math.min(poolRate, startWriteRate, sustainedRate);
  return {
    poolRate,
    startWriteRate,
    sustainedRate,
    rate,
    p99LagSeconds: (0.99 * input.jobs) / rate,
    neededTableWruPerSecond: input.jobs * input.workerWruPerRun,
    neededConcurrency: (input.jobs / input.batchSize) * (input.invocationMs / 1000),
  };
}

const n = (x: number, d = 0) => x.toLocaleString("en-US", { maximumFractionDigits: d });

export function report(input: Inputs = defaults): string {
  const lines = [
    `Inputs: ${n(input.jobs)} jobs due at 00:00:00; claim = ${n(input.wruPerClaim, 1)} WRU (${input.bucketWcuPerClaim} on the bucket partition); worker = ${n(input.workerWruPerRun, 1)} WRU/run (${input.startWruPerRun} before the handler); table ceiling ${n(input.tableWruPerSecond)} WRU/s; ${input.claimConcurrency} claims in flight × ${input.claimLatencyMs} ms; ${n(input.workerConcurrency)} workers × batch ${input.batchSize} × ${input.invocationMs} ms.`,
    "",
    "| S | lookahead | entries per bucket | claims/s per shard | limited by | time to claim | window (lookahead − a tick) | claimed before 00:00 | bucket query RCU |",
    "|---|---|---|---|---|---|---|---|---|",
  ];
  for (const shards of [8, 16, 32, 64, 128]) {
    for (const lookahead of [300, 600]) {
      const p = claimPlan(input, shards, lookahead);
      lines.push(
        `| ${shards} | ${lookahead} s | ${n(p.perShard)} | ${n(p.shardRate)} | ${p.limitedBy} | ${n(p.claimSeconds)} s | ${p.windowSeconds} s | ${n(p.claimedBeforeDue * 100)} % | ${n(p.bucketRcu)} |`,
      );
    }
  }
  const startLine = (label: string, pool: Inputs) => {
    const s = startSide(pool);
    const precision = startSide({ ...pool, jobs: PRECISION_SPIKE_JOBS });
    return `${label}: worker pool ${n(s.poolRate)} starts/s; ${Number.isFinite(s.startWriteRate) ? `start writes under the table ceiling ${n(s.startWriteRate)}/s` : "no write before the handler"}; all worker writes ${n(s.sustainedRate)}/s → p99 start lag ≈ ${n(s.p99LagSeconds, 1)} s (${n(PRECISION_SPIKE_JOBS)} due: ≈ ${n(precision.p99LagSeconds, 1)} s).`;
  };
  const s = startSide(input);
  lines.push(
    "",
    startLine(`Start side at 00:00, ${n(input.workerConcurrency)} workers`, input),
    startLine(`With workerConcurrencyNormal ${n(MAX_WORKER_CONCURRENCY)} (its highest)`, {
      ...input,
      workerConcurrency: MAX_WORKER_CONCURRENCY,
    }),
    `For p99 < 1 s: ${n(s.neededTableWruPerSecond)} WRU/s on the tables for that second and ${n(s.neededConcurrency)} concurrent worker invocations already running.`,
  );
  return lines.join("\n");
}

if (process.argv[1]?.endsWith("simulate-spike.ts")) console.log(report());
