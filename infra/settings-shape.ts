import type { RetentionDays } from "aws-cdk-lib/aws-logs";
import {
  MAX_TIMEOUT_SECONDS,
  type OneOffClaimWrites,
  type TenantQuotas,
} from "../shared/config.js";
import type { Priority } from "../shared/model.js";
import type { TableCapacity, TableCapacityInput } from "./table-capacity.js";

// What a deployment can choose: the settings, the context keys that give them, and the bounds that
// both their defaults (settings-resolve.ts) and their checks (settings-validation.ts) keep to.

/** How callers of the HTTP API authenticate. */
type ApiAuth =
  | { readonly kind: "iam" }
  | {
      readonly kind: "jwt";
      readonly issuer: string;
      readonly audience: readonly string[];
      /** The web console signs in at the issuer as this public client (PKCE); default the first audience. */
      readonly consoleClientId: string;
      /** The scopes the console asks for; default "openid" and the jwtScopes. */
      readonly consoleScope: string;
      /**
       * The OAuth scopes of which every authorized API route takes a token carrying one (API
       * Gateway's route authorizationScopes); none, any token of the issuer for the audiences.
       */
      readonly scopes: readonly string[];
    };

/** Everything a deployment can choose. Each has a default; `-c key=value` overrides it. */
export interface SchedulerSettings {
  /** `dev` stacks can be destroyed with their data; any other stage retains tables and the secret. */
  readonly stage: string;
  readonly shardCount: number;
  /** The largest shard count this deployment ever had, so that lowering shardCount strands nothing. */
  readonly maxShardCount: number;
  readonly lookaheadSeconds: number;
  readonly leaseSeconds: number;
  readonly misfireGraceSeconds: number;
  /** Run history, and completed or cancelled jobs, kept in the tables (TTL). */
  readonly retentionDays: number;
  /**
   * A dead letter stays listed at least this long after its run died (TTL), and a completed job
   * is kept this long when it is longer than retentionDays, so that its dead letters stay replayable.
   */
  readonly deadLetterRetentionDays: number;
  readonly minIntervalMs: number;
  /** CloudWatch Logs retention of every function and the API access log. */
  readonly logRetentionDays: RetentionDays;
  /** Subscribed to a topic the stack creates; or give alarmTopicArn to use a topic you have. */
  readonly alarmEmail: string | undefined;
  readonly alarmTopicArn: string | undefined;
  readonly auth: ApiAuth;
  readonly tracing: boolean;
  readonly metricsNamespace: string;
  /** The longest job a Lambda worker can run; also the work queues' visibility timeout. */
  readonly workerTimeoutSeconds: number;
  readonly workerBatchSize: number;
  /** Concurrent worker invocations per priority queue: how the pool drains high first. */
  readonly workerConcurrency: Readonly<Record<Priority, number>>;
  /**
   * The starvation guard: the smallest share of the worker pool the low queue keeps while high is
   * saturated (0 to 0.5). Low's event source gets at least this share of the three maximums.
   */
  readonly lowPriorityShare: number;
  /** Deliveries before SQS moves a message to the queue's DLQ. */
  readonly maxReceiveCount: number;
  readonly apiRateLimit: number;
  readonly apiBurstLimit: number;
  readonly lagAlarmMs: number;
  readonly queueAgeAlarmSeconds: number;
  /** Whether the API accepts the demo job types `sleep` and `fail`; off unless asked for. */
  readonly demoJobTypes: boolean;
  /** Every tenant's quotas unless its stored override says otherwise (docs/api.md "Quotas"). */
  readonly quotas: TenantQuotas;
  /** Tenants that may read and set any tenant's quota override over the API. */
  readonly adminTenants: readonly string[];
  /**
   * How a one-off's claim is written: "transaction" (the default) or "plain", 2 write units less
   * a claim, and only once no version before plain claims runs (docs/deploy.md "Upgrade and rollback").
   */
  readonly oneOffClaimWrites: OneOffClaimWrites;
  /** How the jobs and runs tables are billed (docs/deploy.md "What it costs"). */
  readonly tableCapacity: TableCapacity;
}

export type SettingsInput = Partial<
  Omit<SchedulerSettings, "workerConcurrency" | "quotas" | "tableCapacity">
> & {
  readonly workerConcurrency?: Partial<Record<Priority, number>>;
  readonly quotas?: Partial<TenantQuotas>;
  readonly tableCapacity?: TableCapacityInput;
};

/** The highest maximum concurrency AWS takes for an SQS event source (workerConcurrency*). */
export const MAX_WORKER_CONCURRENCY = 1000;
/** The most apiBurstLimit takes: the account's default burst in a region, which bounds every API. */
export const MAX_API_BURST_LIMIT = 5_000;
/** Lambda's hard ceiling; the SQS event source also needs visibility >= timeout, so it bounds both. */
export const MAX_LAMBDA_TIMEOUT_SECONDS = MAX_TIMEOUT_SECONDS;

export function isDevStage(stage: string): boolean {
  return stage === "dev";
}

/** Context keys read by `settingsFromContext`, each a setting of the same name unless noted. */
export const CONTEXT_KEYS = [
  "stage",
  "shardCount",
  "maxShardCount",
  "lookaheadSeconds",
  "leaseSeconds",
  "misfireGraceSeconds",
  "retentionDays",
  "deadLetterRetentionDays",
  "minIntervalMs",
  "logRetentionDays",
  "alarmEmail",
  "alarmTopicArn",
  "jwtIssuer",
  "jwtAudience",
  "consoleClientId",
  "consoleScope",
  "jwtScopes",
  "tracing",
  "metricsNamespace",
  "workerTimeoutSeconds",
  "workerBatchSize",
  "workerConcurrencyHigh",
  "workerConcurrencyNormal",
  "workerConcurrencyLow",
  "lowPriorityShare",
  "maxReceiveCount",
  "apiRateLimit",
  "apiBurstLimit",
  "lagAlarmMs",
  "queueAgeAlarmSeconds",
  "demoJobTypes",
  "quotaActiveJobs",
  "quotaRunsPerMinute",
  "quotaConcurrentRuns",
  "quotaRequestsPerSecond",
  "quotaMaxPriority",
  "adminTenants",
  "oneOffClaimWrites",
  "tableCapacity",
  "tableMinUnits",
  "tableMaxReadUnits",
  "tableMaxWriteUnits",
  "tableTargetUtilization",
] as const;

export type ContextKey = (typeof CONTEXT_KEYS)[number];
