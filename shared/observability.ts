/**
 * The two things the engine reports besides its writes: log lines and metrics.
 * Lambdas plug in Powertools Logger and Metrics (EMF); tests and the sandbox
 * plug in their own. Metric names are listed once here so dashboards and
 * alarms (infra/) can refer to the same names.
 */
export const METRICS = {
  schedulingLagMs: "SchedulingLag",
  runOutcome: "RunOutcome",
  claims: "Claims",
  claimsLost: "ClaimsLostToRaces",
  staleDueEntries: "StaleDueEntries",
  leaseTakeovers: "LeaseTakeovers",
  reaperResends: "ReaperResends",
  /**
   * How far the reaper's reading stands behind its settle line after a pass, the furthest shard's:
   * 0 when every shard's cursor caught up; above it when a pass stopped at its maximum or at an
   * entry it could not handle, and lost messages are re-sent that much later.
   */
  reaperBehindMs: "ReaperBehind",
  /**
   * How many shards the reaper's pass read, after each pass: below the stage's shard count when
   * the pass ran out of its tick's time, and the next tick goes on from where it stopped.
   */
  reaperShardsReached: "ReaperShardsReached",
  /**
   * After each tick's reaper pass, how long ago the shard longest unread was last read through
   * (its overdue entries read and dealt with): 0 when the pass read every shard; about a tick
   * less than ⌈S ÷ K⌉ ticks when passes go round in turns; growing for a shard that holds more than
   * the passes deal with until they work through it, and without end for one whose reads fail or
   * whose first read alone outlasts the tick's time every time, whose lost messages are then never
   * re-sent.
   */
  reaperLongestUnreadMs: "ReaperLongestUnread",
  fenceLost: "FenceLost",
  /**
   * A worker's run whose lease, as the worker last wrote it, ran out before a heartbeat extended it
   * (its beats failed, or did not come): the worker stopped its handler part-way and wrote nothing
   * more, and the run is started again (the reaper, a redelivery), so its target may see it twice.
   */
  leaseLapsed: "LeaseLapsed",
  /**
   * A start a worker's delivery gave back, the run QUEUED again, because the delivery failed on
   * storage before its handler had the run. Such a run is never dead-lettered for it: rising round
   * after round, it is a run waiting for storage (docs/architecture.md, "Known limits").
   */
  startsGivenBack: "StartsGivenBack",
  /** A due entry a pass could not claim, by `handling`: set aside for operators, or left for the next pass. */
  dueEntryFailures: "DueEntryFailures",
  /** A write sent again because a transaction conflict or throttling cancelled it, by `operation`. */
  writeContention: "WriteContention",
  /** A writer's fast-path claim that failed after its write committed, by `operation`. */
  fastPathFailures: "FastPathFailures",
  /**
   * A request the API answered 503 `busy`: it met another request's write (its tenant's own
   * contention), which a retry passes. API Gateway counts these among its 5xx; the server-error
   * alarm leaves them out.
   */
  busyAnswers: "BusyAnswers",
} as const;

export type MetricName = (typeof METRICS)[keyof typeof METRICS];

/**
 * Log lines that name their tenant (`tenantId`), counted per tenant by the stack's Contributor
 * Insights rules (infra/constructs/observability.ts): runs by outcome and their lag (`lagMs`,
 * from the worker's line), and requests refused with 429. Per-tenant figures come from these
 * rules rather than from a `tenant` metric dimension, whose cost grows with every tenant
 * (docs/architecture.md, "Observability").
 */
export const TENANT_LOG_EVENTS = {
  runFinished: "run finished",
  requestThrottled: "request throttled",
} as const;
export type MetricUnit = "Count" | "Milliseconds";

/** The keys every log line about one run names it by (docs/deploy.md, "Alarms"). */
export interface RunLogKeys {
  readonly tenantId: string;
  readonly jobId: string;
  readonly runId: string;
  readonly attempt: number;
}

/**
 * A run's log keys, and nothing else of it: one query by `runId` (or `tenantId`) over the log
 * groups follows the run through the worker, the DLQ consumer and the API, whichever line it is.
 */
export function runLogKeys(run: RunLogKeys): RunLogKeys {
  return { tenantId: run.tenantId, jobId: run.jobId, runId: run.runId, attempt: run.attempt };
}

export interface Logger {
  debug(message: string, fields?: Record<string, unknown>): void;
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}

export interface Metrics {
  add(name: MetricName, value: number, unit: MetricUnit, dimensions?: Record<string, string>): void;
}

export interface Observability {
  readonly log: Logger;
  readonly metrics: Metrics;
}

const noop = () => undefined;

export const silentObservability: Observability = {
  log: { debug: noop, info: noop, warn: noop, error: noop },
  metrics: { add: noop },
};

/** Collects metrics in memory; tests assert on them. */
export class MetricsRecorder implements Metrics {
  readonly points: { name: MetricName; value: number; dimensions: Record<string, string> }[] = [];

  add(name: MetricName, value: number, _unit: MetricUnit, dimensions: Record<string, string> = {}) {
    this.points.push({ name, value, dimensions });
  }

  sum(name: MetricName, dimensions: Record<string, string> = {}): number {
    return this.points
      .filter(
        (p) =>
          p.name === name && Object.entries(dimensions).every(([k, v]) => p.dimensions[k] === v),
      )
      .reduce((total, p) => total + p.value, 0);
  }
}
