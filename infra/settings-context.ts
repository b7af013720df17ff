import type { RetentionDays } from "aws-cdk-lib/aws-logs";
import type { Node } from "constructs";
import { defaultConsoleScope } from "../shared/api/oauth-scopes.js";
import { NO_QUOTA, type OneOffClaimWrites } from "../shared/config.js";
import { decimalDigitsValue, decimalNumberValue } from "../shared/decimal-digits.js";
import type { Priority } from "../shared/model.js";
import { resolveSettings } from "./settings-resolve.js";
import { CONTEXT_KEYS, type ContextKey, type SchedulerSettings } from "./settings-shape.js";

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
  const numeric = (
    key: ContextKey,
    parse: (text: string) => number | undefined,
    taken: (n: number) => boolean,
    what: string,
  ): number | undefined => {
    const value = raw(key);
    if (value === undefined || value === null) return undefined;
    const n =
      typeof value === "number" ? value : typeof value === "string" ? parse(value) : undefined;
    if (n === undefined || !taken(n)) {
      throw new Error(`context ${key} must be ${what}, got "${String(value)}"`);
    }
    return n;
  };
  const int = (key: ContextKey) =>
    numeric(
      key,
      decimalDigitsValue,
      Number.isInteger,
      "an integer written in decimal digits (no sign, no 0x, no exponent)",
    );
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
  const num = (key: ContextKey) =>
    numeric(
      key,
      decimalNumberValue,
      Number.isFinite,
      "a number written in decimal digits, such as 0.25 (no sign, no 0x, no exponent)",
    );
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
