import { RetentionDays } from "aws-cdk-lib/aws-logs";
import { RegionInfo } from "aws-cdk-lib/region-info";
import { isValidTenantId, TENANT_ID_CHARS } from "../shared/api/auth.js";
import { defaultConsoleScope, OAUTH_SCOPES, scopesRefusal } from "../shared/api/oauth-scopes.js";
import {
  CLAIM_REACH_SECONDS,
  ENV,
  loadSettings,
  MAX_CONCURRENT_RUNS_QUOTA,
  MAX_LOOKAHEAD_SECONDS,
  MAX_MISFIRE_GRACE_SECONDS,
  NO_QUOTA,
  QUOTA_MAXIMUM,
} from "../shared/config.js";
import { environmentBytes, LAMBDA_ENVIRONMENT_LIMIT_BYTES } from "./lambda-environment.js";
import {
  apiFunctionEnvironment,
  engineEnvironment,
  workerEventSourceConcurrency,
} from "./settings-derived.js";
import {
  type ContextKey,
  MAX_API_BURST_LIMIT,
  MAX_LAMBDA_TIMEOUT_SECONDS,
  MAX_WORKER_CONCURRENCY,
  type SchedulerSettings,
} from "./settings-shape.js";

const RETENTION_CHOICES = new Set<number>(
  Object.values(RetentionDays).filter((v): v is number => typeof v === "number"),
);

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

export function validateSettings(s: SchedulerSettings): void {
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
  intIn("apiBurstLimit", s.apiBurstLimit, 1, MAX_API_BURST_LIMIT);
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
export function refuseOutsideDeployedRange(
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
