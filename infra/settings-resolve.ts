import { RetentionDays } from "aws-cdk-lib/aws-logs";
import {
  CLAIM_REACH_SECONDS,
  DEFAULT_LOW_PRIORITY_SHARE,
  DEFAULT_QUOTAS,
  DEFAULT_SETTINGS,
  SHARD_COUNT_LIMIT,
} from "../shared/config.js";
import {
  MAX_API_BURST_LIMIT,
  MAX_LAMBDA_TIMEOUT_SECONDS,
  type SchedulerSettings,
  type SettingsInput,
} from "./settings-shape.js";
import { refuseOutsideDeployedRange, validateSettings } from "./settings-validation.js";
import { resolveTableCapacity } from "./table-capacity.js";

const STAGE_PATTERN = /^[a-z][a-z0-9-]{0,19}$/;

/**
 * Each tenant's requests a second unless set: half the stage's throttle, which every tenant's
 * authenticated requests share (one API Gateway bucket), so that one tenant's requests through a
 * warm API instance leave the others half of it. The engine's own default (the sandbox's, with no
 * stage throttle) is far above any stage's, where the tenant quota would never engage.
 */
function defaultRequestsPerSecond(apiRateLimit: number): number {
  return Math.max(1, Math.floor(apiRateLimit / 2));
}

/**
 * The stage's burst unless set: two seconds' worth of its rate, as a tenant's own bucket holds, so
 * that `-c apiRateLimit=1000` alone deploys a bucket that takes a second's requests arriving
 * together, not a fifth of them.
 */
function defaultBurstLimit(apiRateLimit: number): number {
  return Math.min(MAX_API_BURST_LIMIT, apiRateLimit * 2);
}

/** Applies the design's defaults and refuses what the handlers or AWS would refuse later. */
export function resolveSettings(input: SettingsInput = {}): SchedulerSettings {
  const stage = input.stage ?? "dev";
  if (!STAGE_PATTERN.test(stage)) {
    throw new Error(`stage must match ${STAGE_PATTERN}, got "${stage}"`);
  }
  const shardCount = input.shardCount ?? DEFAULT_SETTINGS.shardCount;
  // Checked before it is raised to shardCount, which would take 0 or -5 for shardCount unsaid.
  refuseOutsideDeployedRange("maxShardCount", input.maxShardCount, [1, SHARD_COUNT_LIMIT], "");
  const lookaheadSeconds = input.lookaheadSeconds ?? DEFAULT_SETTINGS.lookaheadMs / 1000;
  const workerTimeoutSeconds = input.workerTimeoutSeconds ?? MAX_LAMBDA_TIMEOUT_SECONDS;
  const leaseSeconds = input.leaseSeconds ?? DEFAULT_SETTINGS.leaseMs / 1000;
  const apiRateLimit = input.apiRateLimit ?? 100;
  const settings: SchedulerSettings = {
    stage,
    shardCount,
    maxShardCount: Math.max(shardCount, input.maxShardCount ?? shardCount),
    lookaheadSeconds,
    leaseSeconds,
    misfireGraceSeconds: input.misfireGraceSeconds ?? DEFAULT_SETTINGS.misfireGraceMs / 1000,
    retentionDays: input.retentionDays ?? DEFAULT_SETTINGS.retentionDays,
    deadLetterRetentionDays:
      input.deadLetterRetentionDays ?? DEFAULT_SETTINGS.deadLetterRetentionDays,
    minIntervalMs: input.minIntervalMs ?? DEFAULT_SETTINGS.minIntervalMs,
    logRetentionDays: input.logRetentionDays ?? RetentionDays.ONE_MONTH,
    alarmEmail: input.alarmEmail,
    alarmTopicArn: input.alarmTopicArn,
    auth: input.auth ?? { kind: "iam" },
    tracing: input.tracing ?? false,
    // Per stage, so two stages in one account never share (and cross-trigger) alarm metrics.
    metricsNamespace: input.metricsNamespace ?? `Scheduler/${stage}`,
    workerTimeoutSeconds,
    workerBatchSize: input.workerBatchSize ?? 10,
    workerConcurrency: {
      high: input.workerConcurrency?.high ?? 50,
      normal: input.workerConcurrency?.normal ?? 20,
      low: input.workerConcurrency?.low ?? 5,
    },
    lowPriorityShare: input.lowPriorityShare ?? DEFAULT_LOW_PRIORITY_SHARE,
    maxReceiveCount: input.maxReceiveCount ?? 5,
    apiRateLimit,
    apiBurstLimit: input.apiBurstLimit ?? defaultBurstLimit(apiRateLimit),
    lagAlarmMs: input.lagAlarmMs ?? 5_000,
    // Messages wait out their SQS delay (up to a claim's reach) and stay in flight while a job
    // runs (up to the worker timeout); only age beyond both means nobody is consuming.
    queueAgeAlarmSeconds:
      input.queueAgeAlarmSeconds ?? CLAIM_REACH_SECONDS + workerTimeoutSeconds + 300,
    demoJobTypes: input.demoJobTypes ?? false,
    quotas: {
      ...DEFAULT_QUOTAS,
      requestsPerSecond: defaultRequestsPerSecond(apiRateLimit),
      ...definedOnly(input.quotas ?? {}),
    },
    adminTenants: input.adminTenants ?? [],
    oneOffClaimWrites: input.oneOffClaimWrites ?? DEFAULT_SETTINGS.oneOffClaimWrites,
    tableCapacity: resolveTableCapacity(input.tableCapacity),
  };
  validateSettings(settings);
  return settings;
}

function definedOnly<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>;
}
