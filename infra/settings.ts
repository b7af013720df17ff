import { RetentionDays } from "aws-cdk-lib/aws-logs";
import { RegionInfo } from "aws-cdk-lib/region-info";
import type { Node } from "constructs";
import { isValidTenantId, TENANT_ID_CHARS } from "../shared/api/auth.js";
import { defaultConsoleScope, OAUTH_SCOPES, scopesRefusal } from "../shared/api/oauth-scopes.js";
import {
  CLAIM_REACH_SECONDS,
  DEFAULT_LOW_PRIORITY_SHARE,
  DEFAULT_QUOTAS,
  DEFAULT_SETTINGS,
  ENV,
  loadSettings,
  MAX_CONCURRENT_RUNS_QUOTA,
  MAX_LOOKAHEAD_SECONDS,
  MAX_MISFIRE_GRACE_SECONDS,
  MAX_TIMEOUT_SECONDS,
  NO_QUOTA,
  type OneOffClaimWrites,
  QUOTA_MAXIMUM,
  SHARD_COUNT_LIMIT,
  type TenantQuotas,
} from "../shared/config.js";
import type { ConsoleAuth } from "../shared/console/config.js";
import { decimalDigitsValue, decimalNumberValue } from "../shared/decimal-digits.js";
import type { Priority } from "../shared/model.js";
import {
  DEPLOY_TIME_VARIABLES,
  type DeployTimeValue,
  environmentBytes,
  functionEnvironment,
  LAMBDA_ENVIRONMENT_LIMIT_BYTES,
} from "./lambda-environment.js";
import {
  resolveTableCapacity,
  type TableCapacity,
  type TableCapacityInput,
} from "./table-capacity.js";

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

const STAGE_PATTERN = /^[a-z][a-z0-9-]{0,19}$/;
/** The highest maximum concurrency AWS takes for an SQS event source (workerConcurrency*). */
export const MAX_WORKER_CONCURRENCY = 1000;
/** Lambda's hard ceiling; the SQS event source also needs visibility >= timeout, so it bounds both. */
const MAX_LAMBDA_TIMEOUT_SECONDS = MAX_TIMEOUT_SECONDS;
const RETENTION_CHOICES = new Set<number>(
  Object.values(RetentionDays).filter((v): v is number => typeof v === "number"),
);

/**
 * Each tenant's requests a second unless set: half the stage's throttle, which every tenant's
 * authenticated requests share (one API Gateway bucket), so that one tenant's requests through a
 * warm API instance leave the others half of it. The engine's own default (the sandbox's, with no
 * stage throttle) is far above any stage's, where the tenant quota would never engage.
 */
function defaultRequestsPerSecond(apiRateLimit: number): number {
  return Math.max(1, Math.floor(apiRateLimit / 2));
}

export function isDevStage(stage: string): boolean {
  return stage === "dev";
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
    apiBurstLimit: input.apiBurstLimit ?? 200,
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
  validate(settings);
  return settings;
}

/** A CloudWatch namespace, without spaces (and not ":" first, CloudWatch's rule). */
const METRICS_NAMESPACE = /^[A-Za-z0-9._/#-][A-Za-z0-9._/#:-]*$/;

/**
 * One address as SNS takes it: a local part of letters (any script), digits and RFC 5322's atom
 * signs, dot-separated; a domain of two or more labels (letters, digits, inner hyphens), the last
 * one letters or an IDN's "xn--" form. Nothing else: no list (comma, semicolon, space), no
 * "mailto:", no invisible character (a zero-width space copied with the address).
 */
const LOCAL_ATOM = "[\\p{L}\\p{M}\\p{N}!#$%&'*+/=?^_`{|}~-]+";
const DOMAIN_LABEL = "[\\p{L}\\p{M}\\p{N}](?:[\\p{L}\\p{M}\\p{N}-]*[\\p{L}\\p{M}\\p{N}])?";
const TOP_LABEL = "(?:[\\p{L}\\p{M}]{2,}|[xX][nN]--[a-zA-Z0-9-]*[a-zA-Z0-9])";
const EMAIL_ADDRESS = new RegExp(
  `^(?=[^@]{1,64}@[^@]{1,253}$)${LOCAL_ATOM}(?:\\.${LOCAL_ATOM})*@(?:${DOMAIN_LABEL}\\.)+${TOP_LABEL}$`,
  "u",
);

/** A text quoted in a refusal with its invisible characters (U+200B, U+00A0…) written out. */
function shownVisibly(text: string): string {
  return text.replace(
    /[\p{C}\p{Zl}\p{Zp}]|(?! )\p{Zs}/gu,
    (c) => `\\u{${(c.codePointAt(0) ?? 0).toString(16)}}`,
  );
}

/** SQS's longest message retention: no message gets older. */
const MAX_QUEUE_AGE_SECONDS = 1_209_600;

/** The fewest deliveries a work message may have before SQS moves it to the DLQ (maxReceiveCount). */
const MIN_RECEIVE_COUNT = 2;

/**
 * The shortest lookahead a deployment may have: the dispatcher ticks once a minute (the schedule
 * in constructs/dispatch.ts), so a minute's due entries are claimed from up to `lookahead − 60 s`
 * before it in the worst tick phase (docs/scaling.md), and at the handlers' own floor (60 s) that
 * is nothing. The sandbox and the tests, whose handlers read the variable alone, still take 60.
 */
const MIN_DEPLOYED_LOOKAHEAD_SECONDS = 120;

/**
 * The shortest misfire grace a deployment takes: lateness counts from a run's planned time, and a
 * run that is on time still starts seconds after it: up to the lag the SchedulingLagP99 alarm
 * lets pass (lagAlarmMs, 5 s by default), plus up to 4 s of clocks apart, which the design
 * tolerates (docs/architecture.md), plus SQS's whole-second delays. A grace shorter than that
 * would follow the misfire policy for runs that were merely on time (`skip` records them skipped).
 * The sandbox and the tests, whose handlers read the variable alone, still take 1.
 */
const MIN_DEPLOYED_MISFIRE_GRACE_SECONDS = 10;

function validate(s: SchedulerSettings): void {
  // Before the handlers' own parse, whose range alone would not say why 1 is refused.
  if (Number.isInteger(s.maxReceiveCount) && s.maxReceiveCount < MIN_RECEIVE_COUNT) {
    throw new Error(
      `invalid scheduler settings:\n- maxReceiveCount must be at least ${MIN_RECEIVE_COUNT}, got ${s.maxReceiveCount}: a run's message would get no second delivery, so one worker crash (or a batch lost with its worker) would send it to the DLQ and fire the DLQ alarm; the default is 5`,
    );
  }
  // Before the handlers' own parse, whose ranges (60 to 600, 1 to 86400) are the sandbox's and the
  // tests', and would not say why a deployment takes less.
  const lookahead = s.lookaheadSeconds;
  refuseOutsideDeployedRange(
    "lookaheadSeconds",
    lookahead,
    [MIN_DEPLOYED_LOOKAHEAD_SECONDS, MAX_LOOKAHEAD_SECONDS],
    `the dispatcher ticks once a minute, so a minute's due entries have a claim window of lookaheadSeconds less 60 s in the worst tick phase (${Math.max(0, lookahead - 60)} s here), and their runs start late by however long their claims take past it; the default is 300`,
  );
  refuseOutsideDeployedRange(
    "misfireGraceSeconds",
    s.misfireGraceSeconds,
    [MIN_DEPLOYED_MISFIRE_GRACE_SECONDS, MAX_MISFIRE_GRACE_SECONDS],
    "lateness counts from a run's planned time, and a run on time starts seconds after it (up to lagAlarmMs, 5 s by default, at p99, and up to 4 s more between hosts' clocks), so a shorter grace would apply the misfire policy to runs that were merely on time (skip records them skipped); the default is 60",
  );
  // Named by their context keys, as the operator gives them (-c quotaActiveJobs=none).
  for (const [key, value, max] of [
    ["quotaActiveJobs", s.quotas.activeJobs, QUOTA_MAXIMUM],
    ["quotaRunsPerMinute", s.quotas.runsPerMinute, QUOTA_MAXIMUM],
    ["quotaConcurrentRuns", s.quotas.concurrentRuns, MAX_CONCURRENT_RUNS_QUOTA],
  ] as const) {
    if (value !== null && !(Number.isInteger(value) && value >= 1 && value <= max)) {
      throw new Error(
        `invalid scheduler settings:\n- ${key} must be "${NO_QUOTA}" or an integer from 1 to ${max}, got ${value}`,
      );
    }
  }
  // The handlers parse the same variables at cold start; failing here beats a deployed crash loop.
  try {
    loadSettings(engineEnvironment(s));
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    throw new Error(`invalid scheduler settings:\n- ${namingSettings(message)}`);
  }
  const problems: string[] = [];
  const check = (ok: boolean, message: string) => {
    if (!ok) problems.push(message);
  };
  const intIn = (name: string, value: number, min: number, max: number) =>
    check(
      Number.isInteger(value) && value >= min && value <= max,
      `${name} must be an integer from ${min} to ${max}, got ${value}`,
    );
  intIn("workerTimeoutSeconds", s.workerTimeoutSeconds, 30, MAX_LAMBDA_TIMEOUT_SECONDS);
  check(
    s.leaseSeconds < s.workerTimeoutSeconds,
    `leaseSeconds (${s.leaseSeconds}) must be below workerTimeoutSeconds (${s.workerTimeoutSeconds}): the worker heartbeats within its own lifetime`,
  );
  intIn("workerBatchSize", s.workerBatchSize, 1, 10);
  const { high, normal, low } = s.workerConcurrency;
  for (const [key, value] of [
    ["workerConcurrencyHigh", high],
    ["workerConcurrencyNormal", normal],
    ["workerConcurrencyLow", low],
  ] as const) {
    intIn(key, value, 2, MAX_WORKER_CONCURRENCY);
  }
  check(
    high >= normal && normal >= low,
    `workerConcurrencyHigh, workerConcurrencyNormal and workerConcurrencyLow must not increase as priority falls (high >= normal >= low), got ${high}, ${normal}, ${low}`,
  );
  check(
    Number.isFinite(s.lowPriorityShare) && s.lowPriorityShare >= 0 && s.lowPriorityShare <= 0.5,
    `lowPriorityShare must be a number from 0 to 0.5, got ${s.lowPriorityShare}`,
  );
  check(
    workerEventSourceConcurrency(s).low <= MAX_WORKER_CONCURRENCY,
    `lowPriorityShare asks for more than ${MAX_WORKER_CONCURRENCY} concurrent low-priority workers`,
  );
  intIn("maxReceiveCount", s.maxReceiveCount, MIN_RECEIVE_COUNT, 1000);
  intIn("apiRateLimit", s.apiRateLimit, 1, 10_000);
  intIn("apiBurstLimit", s.apiBurstLimit, 1, 5_000);
  intIn("lagAlarmMs", s.lagAlarmMs, 100, 3_600_000);
  // A run's message waits out its SQS delay (up to a claim's reach) and stays in flight while the
  // run runs (up to the worker timeout): a healthy stage has messages that old, and a threshold
  // below both would keep the queue-age alarm firing.
  const queueAgeFloor = CLAIM_REACH_SECONDS + s.workerTimeoutSeconds;
  const queueAge = s.queueAgeAlarmSeconds;
  check(
    Number.isInteger(queueAge) && queueAge >= queueAgeFloor && queueAge <= MAX_QUEUE_AGE_SECONDS,
    `queueAgeAlarmSeconds must be an integer from ${queueAgeFloor} to ${MAX_QUEUE_AGE_SECONDS}, got ${queueAge}: a run's message waits out its SQS delay (up to a claim's reach, ${CLAIM_REACH_SECONDS} s) and stays in flight while the run runs (up to workerTimeoutSeconds, ${s.workerTimeoutSeconds} s), so a healthy stage has messages that old; the default is ${queueAgeFloor + 300}`,
  );
  check(
    RETENTION_CHOICES.has(s.logRetentionDays),
    `logRetentionDays must be one CloudWatch Logs accepts (${[...RETENTION_CHOICES].join(", ")}), got ${s.logRetentionDays}`,
  );
  // An e-mail subscription takes one address: anything else would fail the deploy at the
  // subscription, and roll it back, rather than the synth. More addresses subscribe to the topic.
  check(
    s.alarmEmail === undefined || EMAIL_ADDRESS.test(s.alarmEmail),
    `alarmEmail must be one e-mail address, got "${shownVisibly(s.alarmEmail ?? "")}" (name@domain.example: no "mailto:", a dot in the domain, no invisible character): for more than one, subscribe them to the AlarmTopicArn output, or give alarmTopicArn`,
  );
  check(
    !(s.alarmEmail && s.alarmTopicArn),
    "give alarmEmail or alarmTopicArn, not both: an existing topic is subscribed to by its owner",
  );
  check(
    s.alarmTopicArn === undefined ||
      /^arn:aws[a-z-]*:sns:[a-z0-9-]+:\d{12}:.+$/.test(s.alarmTopicArn),
    `alarmTopicArn is not an SNS topic ARN: ${s.alarmTopicArn}`,
  );
  if (s.auth.kind === "jwt") {
    check(s.auth.issuer.startsWith("https://"), "jwtIssuer must be an https:// URL");
    check(s.auth.audience.length > 0, "jwtAudience needs at least one audience");
    check(
      /^[\x21-\x7E]{1,256}$/.test(s.auth.consoleClientId),
      "consoleClientId must be a client id (visible ASCII, at most 256 characters)",
    );
    // Left out, consoleScope is made of jwtScopes: what is wrong with it is theirs to say.
    const consoleScopeGiven = s.auth.consoleScope !== defaultConsoleScope(s.auth.scopes);
    check(
      !consoleScopeGiven || OAUTH_SCOPES.test(s.auth.consoleScope),
      "consoleScope must be space-separated OAuth scopes",
    );
    const scopesWrong = s.auth.scopes.length === 0 ? null : scopesRefusal(s.auth.scopes.join(" "));
    check(scopesWrong === null, `jwtScopes ${scopesWrong}`);
    // The console calls the API routes with its own access token: without one of the scopes there,
    // API Gateway would refuse every call of every user signed in to it.
    const consoleScopes = s.auth.consoleScope.split(" ");
    check(
      s.auth.scopes.length === 0 || s.auth.scopes.some((scope) => consoleScopes.includes(scope)),
      `consoleScope "${s.auth.consoleScope}" carries none of jwtScopes "${s.auth.scopes.join(" ")}", so API Gateway would refuse the console's every call: add one to consoleScope, or leave consoleScope out (its default is openid and the jwtScopes)`,
    );
  }
  check(
    s.metricsNamespace.length > 0 && s.metricsNamespace.length <= 255,
    "metricsNamespace must be 1 to 255 characters",
  );
  // CloudWatch drops metrics put in its own services' namespaces: every alarm on an engine metric
  // (DeadRuns, SchedulingLagP99, ReaperBehind, DueEntriesSetAside) would never fire.
  check(
    !s.metricsNamespace.startsWith("AWS/"),
    `metricsNamespace must not start with "AWS/", which CloudWatch keeps for AWS services, got "${s.metricsNamespace}"`,
  );
  // CloudWatch's characters for a namespace, less the space; none of them ends the quoted name in
  // the dashboard's SEARCH expression, where a quote or a brace would.
  check(
    METRICS_NAMESPACE.test(s.metricsNamespace),
    `metricsNamespace must be letters, digits and . - _ / # : (not starting with ":"), got "${s.metricsNamespace}"`,
  );
  for (const tenant of s.adminTenants) {
    if (tenant.includes(",")) {
      // The API function reads ADMIN_TENANTS split at its commas (api.ts joins them with one).
      problems.push(
        `adminTenants: "${tenant}" holds a comma, and ADMIN_TENANTS is comma-separated: it would make each part an admin tenant, not this one`,
      );
    } else if (!isValidTenantId(tenant)) {
      problems.push(
        `adminTenants: "${tenant}" is not a tenant id (${TENANT_ID_CHARS}), so no caller would ever be this admin`,
      );
    }
  }
  if (problems.length === 0) refuseApiEnvironmentPastLimit(s, problems);
  if (problems.length > 0)
    throw new Error(`invalid scheduler settings:\n- ${problems.join("\n- ")}`);
}

/**
 * The API function's environment holds settings of any length (adminTenants, jwtIssuer,
 * consoleClientId, consoleScope, metricsNamespace); past Lambda's 4 KB the deploy fails creating
 * the function, naming none of them. Counted as the stack sets it, every variable of the function,
 * the table names and queue URLs at the longest they can be (DEPLOY_TIME_VARIABLES).
 */
function refuseApiEnvironmentPastLimit(s: SchedulerSettings, problems: string[]): void {
  const bytes = environmentBytes(apiFunctionEnvironment(s));
  if (bytes <= LAMBDA_ENVIRONMENT_LIMIT_BYTES) return;
  const lengths: Record<string, number> = {
    adminTenants: Buffer.byteLength(s.adminTenants.join(",")),
    ...(s.auth.kind === "jwt"
      ? {
          jwtIssuer: Buffer.byteLength(s.auth.issuer),
          consoleClientId: Buffer.byteLength(s.auth.consoleClientId),
          [s.auth.consoleScope === defaultConsoleScope(s.auth.scopes) && s.auth.scopes.length > 0
            ? "consoleScope (not given: openid and the jwtScopes)"
            : "consoleScope"]: Buffer.byteLength(s.auth.consoleScope),
        }
      : {}),
    metricsNamespace: Buffer.byteLength(s.metricsNamespace),
  };
  const given = Object.entries(lengths)
    .filter(([, length]) => length > 0)
    .map(([key, length]) => `${key} ${length}`);
  problems.push(
    `adminTenants, jwtIssuer, consoleClientId, consoleScope (or the jwtScopes it is made of) and metricsNamespace make the API function's environment up to ${bytes} bytes, past Lambda's limit of ${LAMBDA_ENVIRONMENT_LIMIT_BYTES} (the deploy would fail creating the function): ${given.join(", ")} bytes here; shorten them by ${bytes - LAMBDA_ENVIRONMENT_LIMIT_BYTES} bytes, such as fewer admin tenants (docs/deploy.md, "Settings")`,
  );
}

/**
 * Refuses an alarmTopicArn outside the stack's region or partition, once the region is known at
 * synth (the stack's env). CloudWatch publishes an alarm's notification to a topic of the alarm's
 * own region only, so the deploy would fail at the first alarm and roll back. An env-agnostic
 * stack (the app's own, region a token) has no region to compare until deploy: docs/deploy.md.
 */
export function refuseAlarmTopicElsewhere(s: SchedulerSettings, region: string): void {
  if (s.alarmTopicArn === undefined) return;
  const [, partition, , topicRegion] = s.alarmTopicArn.split(":");
  // A region CDK does not know has no partition to compare; its region still must match.
  const stackPartition = RegionInfo.get(region).partition;
  if (topicRegion === region && (stackPartition === undefined || partition === stackPartition))
    return;
  throw new Error(
    `invalid scheduler settings:\n- alarmTopicArn must name a topic in the stack's region (${region}) and partition (${stackPartition ?? "unknown"}), got ${s.alarmTopicArn}: CloudWatch sends an alarm's notification only to a topic of the alarm's region, so the deploy would fail at the first alarm`,
  );
}

/**
 * An integer setting outside what a deployment takes is refused (so is one that is no integer);
 * below `min`, saying why when `whyBelow` says anything.
 */
function refuseOutsideDeployedRange(
  key: ContextKey,
  value: number | undefined,
  [min, max]: readonly [number, number],
  whyBelow: string,
): void {
  if (value === undefined || (Number.isInteger(value) && value >= min && value <= max)) return;
  const why = value < min && whyBelow !== "" ? `: ${whyBelow}` : "";
  throw new Error(
    `invalid scheduler settings:\n- ${key} must be an integer from ${min} to ${max}, got ${value}${why}`,
  );
}

/** The setting (context key) each of the handlers' variables carries. */
const SETTING_OF_VARIABLE: Readonly<Record<string, ContextKey>> = {
  [ENV.shardCount]: "shardCount",
  [ENV.maxShardCount]: "maxShardCount",
  [ENV.lookaheadSeconds]: "lookaheadSeconds",
  [ENV.leaseSeconds]: "leaseSeconds",
  [ENV.misfireGraceSeconds]: "misfireGraceSeconds",
  [ENV.retentionDays]: "retentionDays",
  [ENV.deadLetterRetentionDays]: "deadLetterRetentionDays",
  [ENV.minIntervalMs]: "minIntervalMs",
  [ENV.workerTimeoutSeconds]: "workerTimeoutSeconds",
  [ENV.maxReceiveCount]: "maxReceiveCount",
  [ENV.quotaActiveJobs]: "quotaActiveJobs",
  [ENV.quotaRunsPerMinute]: "quotaRunsPerMinute",
  [ENV.quotaConcurrentRuns]: "quotaConcurrentRuns",
  [ENV.quotaRequestsPerSecond]: "quotaRequestsPerSecond",
  [ENV.quotaMaxPriority]: "quotaMaxPriority",
  [ENV.oneOffClaimWrites]: "oneOffClaimWrites",
};

/** A refusal by `loadSettings`, which names the handlers' variable, as one naming the setting. */
function namingSettings(message: string): string {
  const variable = Object.keys(SETTING_OF_VARIABLE).find((name) => message.startsWith(`${name} `));
  return variable === undefined
    ? message
    : `${SETTING_OF_VARIABLE[variable]}${message.slice(variable.length)}`;
}

function definedOnly<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>;
}

/**
 * Each work queue's event source maximum concurrency. Each queue has its own pollers, so high's
 * backlog never takes low's invocations; low's maximum is raised, when needed, to
 * `lowPriorityShare` of the three together: low's runs keep that share of the pool while high is
 * saturated (the starvation guard on Lambda).
 */
export function workerEventSourceConcurrency(s: SchedulerSettings): Record<Priority, number> {
  const { high, normal, low } = s.workerConcurrency;
  const share = s.lowPriorityShare;
  const guarded = Math.ceil(((high + normal) * share) / (1 - share) - 1e-9);
  return { high, normal, low: Math.max(low, guarded) };
}

/**
 * The dispatcher's Lambda timeout: its shard lease, and never under a minute. A pass reads a
 * backlog (or scans for a new shard's) for up to half a lease; killed before that, it would record
 * nothing and keep the shard's lease until it lapsed, pass after pass.
 */
export function dispatcherTimeoutSeconds(s: SchedulerSettings): number {
  return Math.max(60, s.leaseSeconds);
}

/** The engine settings as the handlers read them (shared/config.ts `loadSettings`). */
export function engineEnvironment(s: SchedulerSettings): Record<string, string> {
  return {
    // The API checks creates, edits and requests against them; the worker, concurrent runs.
    [ENV.quotaActiveJobs]: String(s.quotas.activeJobs ?? NO_QUOTA),
    [ENV.quotaRunsPerMinute]: String(s.quotas.runsPerMinute ?? NO_QUOTA),
    [ENV.quotaConcurrentRuns]: String(s.quotas.concurrentRuns ?? NO_QUOTA),
    [ENV.quotaRequestsPerSecond]: String(s.quotas.requestsPerSecond),
    [ENV.quotaMaxPriority]: s.quotas.maxPriority,
    [ENV.shardCount]: String(s.shardCount),
    [ENV.maxShardCount]: String(s.maxShardCount),
    [ENV.lookaheadSeconds]: String(s.lookaheadSeconds),
    [ENV.leaseSeconds]: String(s.leaseSeconds),
    [ENV.misfireGraceSeconds]: String(s.misfireGraceSeconds),
    [ENV.retentionDays]: String(s.retentionDays),
    [ENV.deadLetterRetentionDays]: String(s.deadLetterRetentionDays),
    [ENV.minIntervalMs]: String(s.minIntervalMs),
    // The API refuses job timeouts the worker cannot run in full.
    [ENV.workerTimeoutSeconds]: String(s.workerTimeoutSeconds),
    // The DLQ consumer tells a poison run from deliveries that never started it.
    [ENV.maxReceiveCount]: String(s.maxReceiveCount),
    // The dispatcher's and the API's fast path claim one-offs; every function gets it alike.
    [ENV.oneOffClaimWrites]: s.oneOffClaimWrites,
  };
}

/**
 * The API function's whole environment as the stack gives it (SchedulerStack, Api,
 * SchedulerFunction), its table names and queue URLs by the most they can hold.
 */
export function apiFunctionEnvironment(
  s: SchedulerSettings,
): Record<string, string | DeployTimeValue> {
  return functionEnvironment("api", s.metricsNamespace, {
    ...DEPLOY_TIME_VARIABLES,
    ...engineEnvironment(s),
    ...apiEnvironment(s),
  });
}

/** The API function's own variables (beside the engine's), as infra/constructs/api.ts sets them. */
export function apiEnvironment(s: SchedulerSettings): Record<string, string> {
  return {
    [ENV.apiAuth]: s.auth.kind,
    // The demo types (sleep, fail) are refused with a 400 naming `type` unless enabled.
    [ENV.demoJobTypes]: String(s.demoJobTypes),
    [ENV.adminTenants]: s.adminTenants.join(","),
    // How the web console signs in: at the JWT issuer, or not at all (a browser cannot sign).
    [ENV.consoleAuth]: JSON.stringify(
      (s.auth.kind === "jwt"
        ? {
            kind: "oidc",
            issuer: s.auth.issuer,
            clientId: s.auth.consoleClientId,
            scope: s.auth.consoleScope,
          }
        : { kind: "iam" }) satisfies ConsoleAuth,
    ),
  };
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

type ContextKey = (typeof CONTEXT_KEYS)[number];

/**
 * Reads the settings from CDK context. `-c key=value` arrives as a string and
 * cdk.json as JSON, so both shapes are accepted.
 */
export function settingsFromContext(node: Node): SchedulerSettings {
  refuseMisspeltSettings(Object.keys(node.getAllContext()));
  refuseEmptySettings(node);
  const raw = (key: ContextKey): unknown => node.tryGetContext(key);
  const text = (key: ContextKey): string | undefined => {
    const value = raw(key);
    if (value === undefined || value === null) return undefined;
    if (typeof value !== "string") throw new Error(`context ${key} must be a string`);
    return value;
  };
  // Text as decimal digits only: Number() would deploy `-c shardCount=0x10` as 16 shards and keep
  // `-c retentionDays=1e1` 10 days. A JSON number (cdk.json) is taken as it is; its range is checked
  // with every other setting's.
  const int = (key: ContextKey): number | undefined => {
    const value = raw(key);
    if (value === undefined || value === null) return undefined;
    const n =
      typeof value === "number"
        ? value
        : typeof value === "string"
          ? decimalDigitsValue(value)
          : undefined;
    if (n === undefined || !Number.isInteger(n)) {
      throw new Error(
        `context ${key} must be an integer written in decimal digits (no sign, no 0x, no exponent), got "${String(value)}"`,
      );
    }
    return n;
  };
  // A counted quota: a whole number, or "none" for no limit.
  const capOf = (key: ContextKey): number | null | undefined =>
    raw(key) === NO_QUOTA ? null : int(key);
  const bool = (key: ContextKey): boolean | undefined => {
    const value = raw(key);
    if (value === undefined || value === null) return undefined;
    if (value === true || value === "true") return true;
    if (value === false || value === "false") return false;
    throw new Error(`context ${key} must be true or false, got "${String(value)}"`);
  };
  const num = (key: ContextKey): number | undefined => {
    const value = raw(key);
    if (value === undefined || value === null) return undefined;
    const n =
      typeof value === "number"
        ? value
        : typeof value === "string"
          ? decimalNumberValue(value)
          : undefined;
    if (n === undefined || !Number.isFinite(n)) {
      throw new Error(
        `context ${key} must be a number written in decimal digits, such as 0.25 (no sign, no 0x, no exponent), got "${String(value)}"`,
      );
    }
    return n;
  };
  const issuer = text("jwtIssuer");
  const audience = (text("jwtAudience") ?? "")
    .split(",")
    .map((a) => a.trim())
    .filter((a) => a.length > 0);
  if ((issuer === undefined) !== (audience.length === 0)) {
    throw new Error("jwtIssuer and jwtAudience go together: set both for a JWT authorizer");
  }
  // Read only beside jwtIssuer: without it the stage authorizes by IAM and its console signs in at
  // no issuer, so taking them unsaid would leave the operator thinking they were in force.
  const jwtSettings = (["consoleClientId", "consoleScope", "jwtScopes"] as const).filter(
    (key) => raw(key) !== undefined && raw(key) !== null,
  );
  if (issuer === undefined && jwtSettings.length > 0) {
    throw new Error(
      `invalid scheduler settings:\n- ${jwtSettings.join(", ")} ${jwtSettings.length === 1 ? "applies" : "apply"} only with jwtIssuer and jwtAudience (the JWT authorizer checks scopes and the console signs in at its issuer; IAM authorization has neither)`,
    );
  }
  // Split at each space, so that two spaces or one at an end leave an empty scope to refuse.
  const scopes = text("jwtScopes")?.split(" ") ?? [];
  const logRetention = int("logRetentionDays");
  return resolveSettings({
    stage: text("stage"),
    shardCount: int("shardCount"),
    maxShardCount: int("maxShardCount"),
    lookaheadSeconds: int("lookaheadSeconds"),
    leaseSeconds: int("leaseSeconds"),
    misfireGraceSeconds: int("misfireGraceSeconds"),
    retentionDays: int("retentionDays"),
    deadLetterRetentionDays: int("deadLetterRetentionDays"),
    minIntervalMs: int("minIntervalMs"),
    logRetentionDays: logRetention === undefined ? undefined : (logRetention as RetentionDays),
    alarmEmail: text("alarmEmail"),
    alarmTopicArn: text("alarmTopicArn"),
    auth:
      issuer === undefined
        ? undefined
        : {
            kind: "jwt",
            issuer,
            audience,
            consoleClientId: text("consoleClientId") ?? audience[0] ?? "",
            // The console's token must carry one of the scopes for the API routes to take it.
            consoleScope: text("consoleScope") ?? defaultConsoleScope(scopes),
            scopes,
          },
    tracing: bool("tracing"),
    metricsNamespace: text("metricsNamespace"),
    workerTimeoutSeconds: int("workerTimeoutSeconds"),
    workerBatchSize: int("workerBatchSize"),
    workerConcurrency: {
      high: int("workerConcurrencyHigh"),
      normal: int("workerConcurrencyNormal"),
      low: int("workerConcurrencyLow"),
    },
    lowPriorityShare: num("lowPriorityShare"),
    maxReceiveCount: int("maxReceiveCount"),
    apiRateLimit: int("apiRateLimit"),
    apiBurstLimit: int("apiBurstLimit"),
    lagAlarmMs: int("lagAlarmMs"),
    queueAgeAlarmSeconds: int("queueAgeAlarmSeconds"),
    demoJobTypes: bool("demoJobTypes"),
    quotas: {
      activeJobs: capOf("quotaActiveJobs"),
      runsPerMinute: capOf("quotaRunsPerMinute"),
      concurrentRuns: capOf("quotaConcurrentRuns"),
      requestsPerSecond: int("quotaRequestsPerSecond"),
      maxPriority: priorityOf(text("quotaMaxPriority")),
    },
    adminTenants: (text("adminTenants") ?? "")
      .split(",")
      .map((t) => t.trim())
      .filter((t) => t !== ""),
    oneOffClaimWrites: claimWritesOf(text("oneOffClaimWrites")),
    tableCapacity: {
      mode: text("tableCapacity"),
      minUnits: int("tableMinUnits"),
      maxReadUnits: int("tableMaxReadUnits"),
      maxWriteUnits: int("tableMaxWriteUnits"),
      targetUtilizationPercent: int("tableTargetUtilization"),
    },
  });
}

/**
 * `-c stage=$STAGE` with the variable unset reaches the app as "": taken as "not given", it would
 * deploy the default (stage dev, no quota, 8 shards) without a word. Every key is checked, also
 * those read only beside another (consoleClientId without jwtIssuer).
 */
function refuseEmptySettings(node: Node): void {
  const empty = CONTEXT_KEYS.find((key) => {
    const value: unknown = node.tryGetContext(key);
    return typeof value === "string" && value.trim() === "";
  });
  if (empty === undefined) return;
  throw new Error(
    `context ${empty} is empty (an unset shell variable?): give it a value, or leave out -c ${empty} for its default`,
  );
}

/**
 * A misspelt setting would otherwise be left out without a word: `-c shardcount=16` deploys 8
 * shards, `-c alarmEmails=…` subscribes nobody. A key near a setting (the same but for case, one
 * the start of the other, or two letters apart) that is none stops the synth; any other key is
 * the operator's own (CDK context is shared with their tooling) and passes.
 */
function refuseMisspeltSettings(contextKeys: readonly string[]): void {
  const known: readonly string[] = CONTEXT_KEYS;
  const misspelt = contextKeys.flatMap((key) => {
    if (known.includes(key)) return [];
    const near = known.find((setting) => isNear(key.toLowerCase(), setting.toLowerCase()));
    return near === undefined ? [] : [`${key} (did you mean ${near}?)`];
  });
  if (misspelt.length === 0) return;
  throw new Error(
    `context ${misspelt.join(", ")}: no such setting (the settings are listed in docs/deploy.md, "Settings")`,
  );
}

function isNear(key: string, setting: string): boolean {
  if (key.length < 4) return false;
  return setting.startsWith(key) || key.startsWith(setting) || editDistance(key, setting) <= 2;
}

/** Levenshtein distance: the fewest letters inserted, deleted or replaced to turn one into the other. */
function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      const replaced = (previous[j - 1] ?? 0) + (a[i - 1] === b[j - 1] ? 0 : 1);
      current.push(Math.min(replaced, (previous[j] ?? 0) + 1, (current[j - 1] ?? 0) + 1));
    }
    previous = current;
  }
  return previous[b.length] ?? 0;
}

function claimWritesOf(value: string | undefined): OneOffClaimWrites | undefined {
  if (value === undefined || value === "transaction" || value === "plain") return value;
  throw new Error(
    `context oneOffClaimWrites must be transaction or plain, got "${value}": plain only once no earlier version runs (docs/deploy.md, "Upgrade and rollback")`,
  );
}

function priorityOf(value: string | undefined): Priority | undefined {
  if (value === undefined) return undefined;
  if (value === "high" || value === "normal" || value === "low") return value;
  throw new Error(`context quotaMaxPriority must be high, normal or low, got "${value}"`);
}
