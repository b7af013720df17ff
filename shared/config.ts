import { decimalDigitsValue } from "./decimal-digits.js";
import type { Priority } from "./model.js";

/**
 * Deployment-wide settings. Every Lambda and the local sandbox read the same
 * environment variables, so that the CDK stack (which sets them) and the
 * handlers (which read them) share one list of names.
 */
export const ENV = {
  jobsTable: "JOBS_TABLE",
  runsTable: "RUNS_TABLE",
  queueHigh: "QUEUE_URL_HIGH",
  queueNormal: "QUEUE_URL_NORMAL",
  queueLow: "QUEUE_URL_LOW",
  shardCount: "SHARD_COUNT",
  maxShardCount: "MAX_SHARD_COUNT",
  lookaheadSeconds: "LOOKAHEAD_SECONDS",
  leaseSeconds: "LEASE_SECONDS",
  misfireGraceSeconds: "MISFIRE_GRACE_SECONDS",
  retentionDays: "RUN_RETENTION_DAYS",
  deadLetterRetentionDays: "DEAD_LETTER_RETENTION_DAYS",
  minIntervalMs: "MIN_INTERVAL_MS",
  /** Deliveries before SQS moves a work message to its redrive DLQ (the queues' maxReceiveCount). */
  maxReceiveCount: "MAX_RECEIVE_COUNT",
  /** The worker Lambda's timeout: the longest job it can run follows from it. */
  workerTimeoutSeconds: "WORKER_TIMEOUT_SECONDS",
  dispatcherFunction: "DISPATCHER_FUNCTION_NAME",
  webhookSecretsTable: "WEBHOOK_SECRETS_TABLE",
  allowPrivateTargets: "ALLOW_PRIVATE_TARGETS",
  /** The API's base URL as webhook targets reach it: async (long-job) targets heartbeat there. */
  apiUrl: "API_URL",
  /** Whether the API accepts the demo job types (`sleep`, `fail`): "true" or "false". */
  demoJobTypes: "DEMO_JOB_TYPES",
  /** How the API Lambda finds the caller's tenant: "iam" (default) or "jwt" (claims). */
  apiAuth: "API_AUTH",
  /** How the web console signs in: a ConsoleAuth as JSON (shared/console/config.ts). */
  consoleAuth: "CONSOLE_AUTH",
  /** The default per-tenant quotas (a tenant's stored override wins). */
  quotaActiveJobs: "QUOTA_ACTIVE_JOBS",
  quotaRunsPerMinute: "QUOTA_RUNS_PER_MINUTE",
  quotaConcurrentRuns: "QUOTA_CONCURRENT_RUNS",
  quotaRequestsPerSecond: "QUOTA_REQUESTS_PER_SECOND",
  quotaMaxPriority: "QUOTA_MAX_PRIORITY",
  /** The API's: tenants (comma-separated) that may read and set every tenant's quotas. */
  adminTenants: "ADMIN_TENANTS",
  /** How a one-off's claim is written: "transaction" (default) or "plain" (OneOffClaimWrites). */
  oneOffClaimWrites: "ONE_OFF_CLAIM_WRITES",
} as const;

/**
 * What one tenant may use. The deployment's defaults are settings; a tenant's
 * override is stored (shared/storage/tenant-quotas.ts) and read without a restart.
 */
export interface TenantQuotas {
  /** Jobs not yet ended (ACTIVE or PAUSED); null: no limit. */
  readonly activeJobs: number | null;
  /** Peak runs per minute summed over the tenant's jobs, a dependent counting its upstreams' (shared/quotas/run-measure.ts); null: no limit. */
  readonly runsPerMinute: number | null;
  /** Runs RUNNING at once; the worker makes the rest wait; null: no limit. */
  readonly concurrentRuns: number | null;
  /** API requests per second (a token bucket holding two seconds' worth). */
  readonly requestsPerSecond: number;
  /** The highest priority the tenant's jobs may take. */
  readonly maxPriority: Priority;
}

/**
 * The counted quotas default to no limit, so a deployment with one tenant behaves as without
 * quotas and pays no request for them (a quota that cannot bind is not counted); a deployment
 * that serves many tenants sets caps (docs/deploy.md).
 */
export const DEFAULT_QUOTAS: TenantQuotas = {
  activeJobs: null,
  runsPerMinute: null,
  concurrentRuns: null,
  requestsPerSecond: 1_000,
  maxPriority: "high",
};

/**
 * How a one-off's claim is written (docs/architecture.md "Claim"): "transaction", the entry's
 * delete and the job's update in one TransactWriteItems, which every version of the engine reads;
 * "plain", the job's update as the commit, then the entry's delete (2 write units fewer), which a
 * claimer of a version before this one misreads as its job moving on, deleting the committed
 * claim's run (docs/deploy.md "Upgrade and rollback"). Plain only once no earlier version runs.
 */
export type OneOffClaimWrites = "transaction" | "plain";

export interface EngineSettings {
  /** Shards new jobs are spread over (S in the design). */
  readonly shardCount: number;
  /** Shards the dispatcher scans: the largest S ever deployed, so S can grow. */
  readonly maxShardCount: number;
  /** How far ahead of now the dispatcher claims and enqueues with an SQS delay. */
  readonly lookaheadMs: number;
  /** Run lease (and per-message visibility) while a worker runs it; heartbeat every lease/3. */
  readonly leaseMs: number;
  readonly misfireGraceMs: number;
  /** Run history, and ended (completed, cancelled) jobs, are kept this long (TTL). */
  readonly retentionDays: number;
  /**
   * A dead letter stays listed at least this long after its run died, and a completed job is kept
   * this long when it is longer than retentionDays, so that its dead letters stay replayable.
   */
  readonly deadLetterRetentionDays: number;
  /** Schedules firing more often than this are refused. */
  readonly minIntervalMs: number;
  readonly maxPayloadBytes: number;
  /** The longest job timeout the deployment's workers can honour (jobTimeoutLimitSeconds). */
  readonly maxTimeoutSeconds: number;
  /**
   * The work queues' maxReceiveCount: the redrive DLQ consumer dead-letters a run only once it has
   * been started by every delivery of one message (but the first, for a run never started: a poison
   * run; see dead-letter-queue.ts).
   */
  readonly maxReceiveCount: number;
  /** Each tenant's quotas unless it has an override. */
  readonly quotas: TenantQuotas;
  /** How long a process keeps a tenant's quota override before it reads it again (shared/quotas/override-cache.ts). */
  readonly quotaCacheMs: number;
  /**
   * How long after a recount of a tenant's usage a request over a quota is refused from the stored
   * usage instead of recounting again (shared/quotas/usage.ts).
   */
  readonly quotaRecountMs: number;
  /**
   * The pages of a tenant's jobs (100 each) one request reads of a recount before it records where
   * it stopped and answers busy, for the next to go on (shared/quotas/recount.ts).
   */
  readonly quotaRecountPages: number;
  /** How a one-off's claim is written; a deployment setting, "transaction" unless chosen. */
  readonly oneOffClaimWrites: OneOffClaimWrites;
}

/** The longest job timeout accepted at all: Lambda's own ceiling. */
export const MAX_TIMEOUT_SECONDS = 900;

/** Left for recording the result after a handler is cut short by the worker's own deadline. */
export const WORKER_RESULT_MARGIN_MS = 10_000;
/**
 * Spent in a worker invocation before the handler starts: an early message waits up to 2 s for
 * its second, then the run's start write and the job's read.
 */
const WORKER_START_ALLOWANCE_MS = 5_000;

/**
 * The longest job timeout a worker with this (Lambda) timeout can run in full: the worker stops a
 * handler WORKER_RESULT_MARGIN_MS before its own end, and the handler starts a little after the
 * invocation does. Never above Lambda's ceiling.
 */
function jobTimeoutLimitSeconds(workerTimeoutSeconds: number): number {
  const usableMs =
    workerTimeoutSeconds * 1000 - WORKER_RESULT_MARGIN_MS - WORKER_START_ALLOWANCE_MS;
  return Math.min(MAX_TIMEOUT_SECONDS, Math.max(0, Math.floor(usableMs / 1000)));
}

export const DEFAULT_SETTINGS: EngineSettings = {
  shardCount: 8,
  maxShardCount: 8,
  lookaheadMs: 300_000,
  leaseMs: 60_000,
  misfireGraceMs: 60_000,
  retentionDays: 30,
  deadLetterRetentionDays: 30,
  minIntervalMs: 1_000,
  maxPayloadBytes: 64 * 1024,
  // The stack's default worker timeout is Lambda's ceiling.
  maxTimeoutSeconds: jobTimeoutLimitSeconds(MAX_TIMEOUT_SECONDS),
  maxReceiveCount: 5,
  quotas: DEFAULT_QUOTAS,
  quotaCacheMs: 10_000,
  quotaRecountMs: 5_000,
  // 50,000 jobs (a one-off a minute kept 30 days): about 1,000 requests one after another, some
  // 5-10 s on AWS, so that a tenant's recount is one request unless it is very large, since parts
  // start afresh whenever the usage changes between them.
  quotaRecountPages: 500,
  oneOffClaimWrites: "transaction",
};

/** The starvation guard's default: low priority keeps 10 % of the workers while high is saturated. */
export const DEFAULT_LOW_PRIORITY_SHARE = 0.1;

/** The longest delay SQS accepts on a message. */
export const MAX_SQS_DELAY_SECONDS = 900;
/**
 * How far ahead a claim queues a job's occurrences (shared/dispatch/fast-path-window.ts): SQS's
 * longest delay less a minute for the send and for clock skew.
 */
export const CLAIM_REACH_SECONDS = MAX_SQS_DELAY_SECONDS - 60;

/** Environment variables as read: `process.env`, or a record a test or the sandbox passes. */
export type Env = Readonly<Record<string, string | undefined>>;

/** `why`, when given, ends the refusal: a bound the design sets, not the setting's type. */
function intFrom(
  env: Env,
  name: string,
  fallback: number,
  min: number,
  max: number,
  why?: string,
): number {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  const value = decimalDigitsValue(raw);
  if (value === undefined || !Number.isInteger(value) || value < min || value > max) {
    const because = why === undefined ? "" : `: ${why}`;
    throw new Error(`${name} must be an integer from ${min} to ${max}, got "${raw}"${because}`);
  }
  return value;
}

/**
 * The shortest `minIntervalMs` a deployment may set: one second. The design is sized for
 * per-second jobs (docs/architecture.md "Claim reach"): a claim queues at most 50 occurrences and
 * SQS delays a message by whole seconds, so under a second a claim covers a few seconds at most,
 * runs are let go in bunches each second, and under the default overlap policy each one that
 * starts while the one before still runs is skipped.
 */
const MIN_INTERVAL_FLOOR_MS = 1_000;
const MIN_INTERVAL_FLOOR_WHY =
  "the scheduler is sized for per-second jobs at most (a claim queues 50 occurrences, SQS delays are whole seconds), and a shorter interval runs late, bunched and mostly skipped";

/** The most shards a deployment may have (`shardCount`, `maxShardCount`). */
export const SHARD_COUNT_LIMIT = 1024;

/**
 * The shortest `lookaheadSeconds` the handlers take (the sandbox's and the tests' floor); a
 * deployment's settings refuse below 120 (infra/settings-validation.ts).
 */
export const MIN_LOOKAHEAD_SECONDS = 60;
/** The longest `lookaheadSeconds` the handlers and a deployment take. */
export const MAX_LOOKAHEAD_SECONDS = 600;

/** The longest `misfireGraceSeconds` the handlers and a deployment take: a day. */
export const MAX_MISFIRE_GRACE_SECONDS = 86_400;

/**
 * The shortest `retentionDays` and `deadLetterRetentionDays` a deployment may set. A completed job
 * is kept at least this long after any run it has could have run, whatever retention the deploy
 * that wrote its expiry had: a waiting run counts on it (`keepCompletedJobForWaitingRun`).
 */
export const MIN_RETENTION_DAYS = 1;

export function loadSettings(env: Env = process.env): EngineSettings {
  const shardCount = intFrom(
    env,
    ENV.shardCount,
    DEFAULT_SETTINGS.shardCount,
    1,
    SHARD_COUNT_LIMIT,
  );
  const lookaheadSeconds = intFrom(
    env,
    ENV.lookaheadSeconds,
    300,
    MIN_LOOKAHEAD_SECONDS,
    MAX_LOOKAHEAD_SECONDS,
  );
  return {
    shardCount,
    maxShardCount: Math.max(
      shardCount,
      intFrom(env, ENV.maxShardCount, shardCount, 1, SHARD_COUNT_LIMIT),
    ),
    lookaheadMs: lookaheadSeconds * 1000,
    leaseMs: intFrom(env, ENV.leaseSeconds, 60, 6, 900) * 1000,
    misfireGraceMs: intFrom(env, ENV.misfireGraceSeconds, 60, 1, MAX_MISFIRE_GRACE_SECONDS) * 1000,
    retentionDays: intFrom(env, ENV.retentionDays, 30, MIN_RETENTION_DAYS, 3650),
    deadLetterRetentionDays: intFrom(
      env,
      ENV.deadLetterRetentionDays,
      30,
      MIN_RETENTION_DAYS,
      3650,
    ),
    minIntervalMs: intFrom(
      env,
      ENV.minIntervalMs,
      DEFAULT_SETTINGS.minIntervalMs,
      MIN_INTERVAL_FLOOR_MS,
      86_400_000,
      MIN_INTERVAL_FLOOR_WHY,
    ),
    maxPayloadBytes: DEFAULT_SETTINGS.maxPayloadBytes,
    // The stack checks its own bounds (30 to 900) with a clearer message; any positive value works.
    maxTimeoutSeconds: jobTimeoutLimitSeconds(
      intFrom(env, ENV.workerTimeoutSeconds, MAX_TIMEOUT_SECONDS, 1, 86_400),
    ),
    // The stack refuses fewer than 2 (infra/settings-validation.ts): one crash would
    // dead-letter a run.
    maxReceiveCount: intFrom(env, ENV.maxReceiveCount, DEFAULT_SETTINGS.maxReceiveCount, 2, 1000),
    quotas: quotasFrom(env),
    quotaCacheMs: DEFAULT_SETTINGS.quotaCacheMs,
    quotaRecountMs: DEFAULT_SETTINGS.quotaRecountMs,
    quotaRecountPages: DEFAULT_SETTINGS.quotaRecountPages,
    oneOffClaimWrites: oneOffClaimWritesFrom(env),
  };
}

function oneOffClaimWritesFrom(env: Env): OneOffClaimWrites {
  const raw = env[ENV.oneOffClaimWrites] || DEFAULT_SETTINGS.oneOffClaimWrites;
  if (raw === "transaction" || raw === "plain") return raw;
  throw new Error(`${ENV.oneOffClaimWrites} must be transaction or plain, got "${raw}"`);
}

/** The highest value a quota's setting or override may take. */
export const QUOTA_MAXIMUM = 1_000_000;
/** The highest concurrent-runs quota: the worker reads every slot item of a tenant at each start. */
export const MAX_CONCURRENT_RUNS_QUOTA = 1_000;

function quotasFrom(env: Env): TenantQuotas {
  const d = DEFAULT_QUOTAS;
  const priority = env[ENV.quotaMaxPriority] || d.maxPriority;
  if (priority !== "high" && priority !== "normal" && priority !== "low") {
    throw new Error(`${ENV.quotaMaxPriority} must be high, normal or low, got "${priority}"`);
  }
  return {
    activeJobs: capFrom(env, ENV.quotaActiveJobs, d.activeJobs, QUOTA_MAXIMUM),
    runsPerMinute: capFrom(env, ENV.quotaRunsPerMinute, d.runsPerMinute, QUOTA_MAXIMUM),
    concurrentRuns: capFrom(
      env,
      ENV.quotaConcurrentRuns,
      d.concurrentRuns,
      MAX_CONCURRENT_RUNS_QUOTA,
    ),
    requestsPerSecond: intFrom(
      env,
      ENV.quotaRequestsPerSecond,
      d.requestsPerSecond,
      1,
      QUOTA_MAXIMUM,
    ),
    maxPriority: priority,
  };
}

/** What a counted quota's setting says when it sets none: no limit. */
export const NO_QUOTA = "none";

/** A counted quota's setting: 1 … max, or `none` (no limit); unset: the default. */
function capFrom(env: Env, name: string, fallback: number | null, max: number): number | null {
  const raw = env[name];
  if (raw === NO_QUOTA) return null;
  return raw === undefined || raw === "" ? fallback : intFrom(env, name, 1, 1, max);
}

export function requireEnv(name: string, env: Env = process.env): string {
  const value = env[name];
  if (value === undefined || value === "") {
    throw new Error(`environment variable ${name} is not set`);
  }
  return value;
}
