import { horizonOf } from "../shared/dispatch/dispatcher.js";
import type { Run } from "../shared/model.js";
import { percentile } from "./percentile.js";
import type { ConfigurationResult, LagStats, Resolved } from "./throughput.js";
import type {
  DynamoTimer,
  Expected,
  LogTally,
  Plan,
  Producer,
  RunningEngine,
  Tick,
  Window,
  WindowMeasures,
} from "./throughput-configuration.js";

/** The throughput bench's figures for one configuration, from what its run measured. */

const SECOND = 1000;

/** An expected run's key: its job and the occurrence it is for. */
export const runKeyOf = (jobId: string, scheduledFor: string) => `${jobId}|${scheduledFor}`;

const maxInFlightNote = (o: Resolved) =>
  `creates are capped at ${o.maxCreatesInFlight} in flight: DynamoDB Local could not keep up`;

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

interface Lag {
  readonly lag: number;
  readonly kind: Expected["kind"];
  readonly scheduledForMs: number;
}

/** The expected runs as the runs table has them: status counts, start lags, the backlog at the end. */
function dueFigures(expected: readonly Expected[], runs: readonly Run[], window: Window) {
  const firstAttempts = new Map<string, Run>();
  for (const r of runs)
    if (r.attempt === 1) firstAttempts.set(runKeyOf(r.jobId, r.scheduledFor), r);
  const statuses: Record<string, number> = {};
  const lags: Lag[] = [];
  let backlogAtEnd = 0;
  const cutoff = window.t1 - 5 * SECOND;
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
      if (startedMs === null || startedMs >= window.t1) backlogAtEnd++;
    }
  }
  return { statuses, lags, backlogAtEnd, dueBeforeCutoff };
}

/** The dispatcher's ticks in the window: the minute bursts and the tick that claimed the most. */
function tickFigures(ticks: readonly Tick[], window: Window, lookaheadMs: number) {
  const { t0, t1 } = window;
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
  return { windowTicks, minuteBursts, peak, tickMs };
}

/** Calls per second over the window by side and operation, DynamoDB and SQS totals. */
function callFigures(counts: WindowMeasures["counts"], seconds: number) {
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
    dynamoCallsPerSecond,
    dynamoTransactionsPerSecond: perSecond(transactions),
    sqsCallsPerSecond: perSecond(sqsCalls),
    opsPerSecond,
  };
}

/** Everything measured, put together as the configuration's result. */
export interface Measured {
  readonly plan: Plan;
  readonly o: Resolved;
  readonly window: Window;
  readonly expected: readonly Expected[];
  readonly runs: readonly Run[];
  readonly engine: RunningEngine;
  readonly producer: Producer;
  readonly measures: WindowMeasures;
  readonly timer: DynamoTimer;
  readonly logs: LogTally;
  readonly drained: boolean;
  readonly notes: readonly string[];
}

export function configurationResult(m: Measured): ConfigurationResult {
  const { plan, o, window, expected } = m;
  const { t0, t1 } = window;
  const inWindow = (iso: string | null) => {
    if (iso === null) return false;
    const ms = Date.parse(iso);
    return ms >= t0 && ms < t1;
  };
  const { statuses, lags, backlogAtEnd, dueBeforeCutoff } = dueFigures(expected, m.runs, window);
  const lagValues = lags.map((l) => l.lag).sort((a, b) => a - b);
  const half = t0 + plan.windowMs / 2;
  const p95Of = (xs: number[]) =>
    percentile(
      [...xs].sort((a, b) => a - b),
      95,
    );
  const claimedRuns = m.runs.filter((r) => inWindow(r.enqueuedAt));
  const completedRuns = m.runs.filter((r) => r.status === "SUCCEEDED" && inWindow(r.finishedAt));
  const { windowTicks, minuteBursts, peak, tickMs } = tickFigures(
    m.engine.ticks,
    window,
    plan.lookaheadMs,
  );

  /** Why the offered rate was not sustained; empty when it was. */
  const verdict: string[] = [];
  if (!m.drained)
    verdict.push(`the window's runs had not all finished ${o.drainSeconds} s after it`);
  const offeredOneOffs = Math.floor(o.seconds * plan.oneOffPerSecond);
  const shortfall = Math.max(0, offeredOneOffs - m.producer.launched);
  if (m.producer.launched < 0.95 * offeredOneOffs) {
    verdict.push(
      `the producer created ${m.producer.launched} of ${offeredOneOffs} offered one-offs (${maxInFlightNote(o)})`,
    );
  }
  if (m.producer.failed > 0) verdict.push(`${m.producer.failed} creates failed`);
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

  const seconds = plan.windowMs / SECOND;
  const perSecond = (x: number) => x / seconds;
  const byDispatcher = windowTicks.reduce((s, t) => s + t.claims, 0);
  const calls = callFigures(m.measures.counts, seconds);
  return {
    label: plan.label,
    shards: plan.shards,
    concurrency: plan.concurrency,
    loops: o.loops,
    windowSeconds: seconds,
    offered: {
      runsPerSecond: plan.oneOffPerSecond + plan.recurringPerSecond,
      oneOffPerSecond: plan.oneOffPerSecond,
      recurringPerSecond: plan.recurringPerSecond,
      recurringJobs: plan.recurringJobs,
      everySeconds: o.everySeconds,
    },
    created: {
      oneOffs: m.producer.created,
      perSecond: perSecond(m.producer.created),
      shortfall,
      failed: m.producer.failed,
    },
    claimed: {
      runs: claimedRuns.length,
      perSecond: perSecond(claimedRuns.length),
      perSecondPerShard: perSecond(claimedRuns.length) / plan.shards,
      byDispatcher,
      byFastPath: claimedRuns.length - byDispatcher,
      peakTickClaims: peak.claims,
      peakTickMs: peak.ms,
      peakPerSecondPerShard: peak.ms > 0 ? peak.claims / (peak.ms / SECOND) / plan.shards : 0,
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
    notes: m.notes,
    clockOffsetMs: plan.offsetMs,
    warmup: window.warmup,
    dispatcher: {
      ticks: windowTicks.length,
      tickMsP50: percentile(tickMs, 50),
      tickMsP95: percentile(tickMs, 95),
      tickMsMax: tickMs.at(-1) ?? Number.NaN,
      failedTicks: m.engine.failedTicks,
    },
    load: {
      dynamoCallsPerSecond: calls.dynamoCallsPerSecond,
      dynamoTransactionsPerSecond: calls.dynamoTransactionsPerSecond,
      dynamoLatencyMs: Object.fromEntries(
        Object.entries(m.timer.latencies).map(([side, xs]) => {
          const sorted = [...xs].sort((a, b) => a - b);
          return [side, { p50: percentile(sorted, 50), p95: percentile(sorted, 95) }];
        }),
      ),
      sqsCallsPerSecond: calls.sqsCallsPerSecond,
      opsPerSecond: calls.opsPerSecond,
      nodeCpuPercent: (m.measures.nodeCpuSeconds / seconds) * 100,
      dynamoLocalCpuPercent:
        m.measures.dynamoCpuSeconds === null ? null : (m.measures.dynamoCpuSeconds / seconds) * 100,
      eventLoopDelayP99Ms: m.measures.eventLoopDelayP99Ms,
      eventLoopDelayMaxMs: m.measures.eventLoopDelayMaxMs,
    },
    logs: [...m.logs.entries.values()].sort((a, b) => b.count - a.count),
    lagsMs: lagValues,
  };
}
