import { readFileSync } from "node:fs";
import { join } from "node:path";
import { App } from "aws-cdk-lib";
import { RetentionDays } from "aws-cdk-lib/aws-logs";
import { describe, expect, it } from "vitest";
import { buildSchedulerApp } from "../../infra/build-app.js";
import { SchedulerStack } from "../../infra/scheduler-stack.js";
import {
  CONTEXT_KEYS,
  engineEnvironment,
  resolveSettings,
  settingsFromContext,
  workerEventSourceConcurrency,
} from "../../infra/settings.js";
import { PROVISIONED_DEFAULTS } from "../../infra/table-capacity.js";
import { CLAIM_REACH_SECONDS, DEFAULT_SETTINGS, loadSettings } from "../../shared/config.js";
import { REPO_ROOT } from "./support/repo-root.js";

const fromContext = (context: Record<string, unknown>) =>
  settingsFromContext(new App({ context }).node);

/** The stack alone, its functions unbundled, in a region given at synth (env) or left a token. */
const stackIn = (region: string | undefined, context: Record<string, unknown>) => {
  const app = new App({ context: { ...context, "aws:cdk:bundling-stacks": [] } });
  const settings = settingsFromContext(app.node);
  return new SchedulerStack(app, "Scheduler-dev", { settings, env: { region } });
};

/**
 * The warnings building `stack` left on its constructs, each as its path and message: what synth
 * reports (CDK's warning metadata), read without a synth, which costs seconds a stack.
 */
const warningsOf = (stack: SchedulerStack) =>
  stack.node
    .findAll()
    .flatMap((construct) =>
      construct.node.metadata
        .filter((entry) => entry.type === "aws:cdk:warning")
        .map((entry) => `${construct.node.path}: ${String(entry.data)}`),
    );

describe("settings", () => {
  it("defaults to the design's values in a dev stage", () => {
    const s = resolveSettings();
    expect(s).toMatchObject({
      stage: "dev",
      shardCount: 8,
      maxShardCount: 8,
      lookaheadSeconds: 300,
      leaseSeconds: 60,
      misfireGraceSeconds: 60,
      retentionDays: 30,
      auth: { kind: "iam" },
      tracing: false,
      maxReceiveCount: 5,
      metricsNamespace: "Scheduler/dev",
      workerTimeoutSeconds: 900,
      demoJobTypes: false,
    });
    // What the handlers would derive from the environment the stack sets is the design's default,
    // but for a tenant's requests a second: half the stage's throttle, not the sandbox's 1000.
    expect(loadSettings(engineEnvironment(s))).toEqual({
      ...DEFAULT_SETTINGS,
      quotas: { ...DEFAULT_SETTINGS.quotas, requestsPerSecond: 50 },
    });
  });

  it("gives a tenant half the API stage's throttle unless quotaRequestsPerSecond says otherwise", () => {
    // Every tenant's authenticated requests share the stage's one bucket (apiRateLimit): a tenant
    // quota at or above it never engages, and one tenant could have every other one answered 429.
    const defaults = fromContext({});
    expect([defaults.apiRateLimit, defaults.quotas.requestsPerSecond]).toEqual([100, 50]);
    expect(engineEnvironment(defaults)).toMatchObject({ QUOTA_REQUESTS_PER_SECOND: "50" });
    expect(fromContext({ apiRateLimit: "1000" }).quotas.requestsPerSecond).toBe(500);
    expect(fromContext({ apiRateLimit: "1" }).quotas.requestsPerSecond).toBe(1);
    const chosen = fromContext({ apiRateLimit: "1000", quotaRequestsPerSecond: "2000" });
    expect(chosen.quotas.requestsPerSecond).toBe(2000);
  });

  it("warns at synth, and deploys all the same, when quotaRequestsPerSecond is above apiRateLimit", () => {
    const above = stackIn(undefined, { apiRateLimit: "1000", quotaRequestsPerSecond: "2000" });
    expect(warningsOf(above)).toEqual([
      expect.stringMatching(
        /^Scheduler-dev\/Api: quotaRequestsPerSecond 2000 is above apiRateLimit 1000: .*never reaches its quota.*\[ack: scheduler:quota-above-api-rate\]$/,
      ),
    ]);
    const atRate = stackIn(undefined, { apiRateLimit: "1000", quotaRequestsPerSecond: "1000" });
    expect(warningsOf(atRate)).toEqual([]);
  });

  // API Gateway's throttle is a token bucket holding apiBurstLimit requests, refilled at
  // apiRateLimit a second. `-c apiRateLimit=1000` alone deployed a burst of 200, so more than 200
  // requests arriving together were answered 429 at a fifth of the rate asked for. A burst given
  // below the rate is taken, as API Gateway takes it (its account default: 10,000 and 5,000).
  it("bursts to twice apiRateLimit (at most 5000) unless apiBurstLimit says otherwise", () => {
    const throttle = (context: Record<string, unknown>) => {
      const s = fromContext(context);
      return [s.apiRateLimit, s.apiBurstLimit];
    };
    expect(throttle({})).toEqual([100, 200]);
    expect(throttle({ apiRateLimit: "1000" })).toEqual([1000, 2000]);
    expect(throttle({ apiRateLimit: "4000" })).toEqual([4000, 5000]);
    expect(throttle({ apiRateLimit: "10000" })).toEqual([10000, 5000]);
    expect(throttle({ apiRateLimit: "300", apiBurstLimit: "200" })).toEqual([300, 200]);
    expect(throttle({ apiBurstLimit: "50" })).toEqual([100, 50]);
  });

  it("alarms on queue age only past a claim's reach (the longest SQS delay a run is sent with) plus the worker timeout", () => {
    const s = resolveSettings();
    // A per-minute job's run is sent up to 14 minutes before it is due.
    expect(s.queueAgeAlarmSeconds).toBe(CLAIM_REACH_SECONDS + s.workerTimeoutSeconds + 300);
    expect(CLAIM_REACH_SECONDS).toBeGreaterThanOrEqual(s.lookaheadSeconds);
  });

  it.each([
    [{ queueAgeAlarmSeconds: "600" }, 1740, 600],
    [{ queueAgeAlarmSeconds: "1739" }, 1740, 1739],
    [{ workerTimeoutSeconds: "300", queueAgeAlarmSeconds: "1000" }, 1140, 1000],
  ])(
    "refuses %o: a healthy stage's messages get that old (a claim's reach of delay, then the run's time in flight), so the alarm would keep firing",
    (context, floor, given) => {
      expect(() => fromContext(context)).toThrow(
        `queueAgeAlarmSeconds must be an integer from ${floor} to 1209600, got ${given}: `,
      );
    },
  );

  it("accepts queueAgeAlarmSeconds from a claim's reach plus the worker timeout up", () => {
    expect(fromContext({ queueAgeAlarmSeconds: "1740" }).queueAgeAlarmSeconds).toBe(1740);
    const shortRuns = fromContext({ workerTimeoutSeconds: "300", queueAgeAlarmSeconds: "1140" });
    expect(shortRuns.queueAgeAlarmSeconds).toBe(CLAIM_REACH_SECONDS + 300);
  });

  it("reads -c strings and cdk.json values alike", () => {
    const s = fromContext({
      stage: "prod",
      shardCount: "16",
      maxShardCount: 32,
      lookaheadSeconds: "120",
      tracing: "true",
      logRetentionDays: "90",
      jwtIssuer: "https://id.example.com",
      jwtAudience: "a, b",
      workerConcurrencyHigh: "100",
      demoJobTypes: "true",
    });
    expect(s).toMatchObject({
      stage: "prod",
      shardCount: 16,
      maxShardCount: 32,
      lookaheadSeconds: 120,
      tracing: true,
      logRetentionDays: RetentionDays.THREE_MONTHS,
      auth: {
        kind: "jwt",
        issuer: "https://id.example.com",
        audience: ["a", "b"],
        consoleClientId: "a",
        consoleScope: "openid",
      },
      workerConcurrency: { high: 100, normal: 20, low: 5 },
      demoJobTypes: true,
    });
  });

  it("raises low's event source concurrency to its share of the pool (the starvation guard)", () => {
    for (const [context, low] of [
      [{}, 8],
      [{ workerConcurrencyHigh: "100" }, 14],
      [{ workerConcurrencyLow: "20" }, 20],
      [{ lowPriorityShare: "0" }, 5],
      [{ lowPriorityShare: "0.25" }, 24],
    ] as const) {
      const concurrency = workerEventSourceConcurrency(fromContext(context));
      expect(concurrency.low, JSON.stringify(context)).toBe(low);
      const total = concurrency.high + concurrency.normal + concurrency.low;
      expect(concurrency.low / total).toBeGreaterThanOrEqual(fromContext(context).lowPriorityShare);
    }
  });

  it("reads a counted quota as a limit or none (no limit), and hands the handlers the same", () => {
    const s = fromContext({ quotaActiveJobs: "500", quotaConcurrentRuns: "none" });
    expect(s.quotas).toMatchObject({ activeJobs: 500, runsPerMinute: null, concurrentRuns: null });
    const env = engineEnvironment(s);
    expect(env).toMatchObject({
      QUOTA_ACTIVE_JOBS: "500",
      QUOTA_RUNS_PER_MINUTE: "none",
      QUOTA_CONCURRENT_RUNS: "none",
    });
    expect(loadSettings(env).quotas).toEqual(s.quotas);
    expect(() => fromContext({ quotaConcurrentRuns: "0" })).toThrow(/quotaConcurrentRuns/);
    expect(() => loadSettings({ QUOTA_ACTIVE_JOBS: "0" })).toThrow(/QUOTA_ACTIVE_JOBS/);
  });

  it("writes a one-off's claim as a transaction unless oneOffClaimWrites is plain, and refuses anything else naming it", () => {
    expect(fromContext({}).oneOffClaimWrites).toBe("transaction");
    const plain = fromContext({ oneOffClaimWrites: "plain" });
    expect(engineEnvironment(plain)).toMatchObject({ ONE_OFF_CLAIM_WRITES: "plain" });
    expect(loadSettings(engineEnvironment(plain)).oneOffClaimWrites).toBe("plain");
    expect(() => fromContext({ oneOffClaimWrites: "Plain" })).toThrow(
      /oneOffClaimWrites must be transaction or plain, got "Plain"/,
    );
    // A value that reaches the settings another way is refused at synth too, by the setting's name.
    expect(() => resolveSettings({ oneOffClaimWrites: "both" as unknown as "plain" })).toThrow(
      /^invalid scheduler settings:\n- oneOffClaimWrites must be transaction or plain, got "both"/,
    );
    expect(() => loadSettings({ ONE_OFF_CLAIM_WRITES: "yes" })).toThrow(
      /ONE_OFF_CLAIM_WRITES must be transaction or plain, got "yes"/,
    );
    expect(loadSettings({}).oneOffClaimWrites).toBe("transaction");
  });

  it("bills the tables on demand unless tableCapacity is provisioned, whose units default and are read from context", () => {
    expect(fromContext({}).tableCapacity).toEqual({ mode: "on-demand" });
    expect(fromContext({ tableCapacity: "provisioned" }).tableCapacity).toEqual({
      mode: "provisioned",
      ...PROVISIONED_DEFAULTS,
    });
    expect(
      fromContext({
        tableCapacity: "provisioned",
        tableMinUnits: "10",
        tableMaxReadUnits: "400",
        tableMaxWriteUnits: "2000",
        tableTargetUtilization: "50",
      }).tableCapacity,
    ).toEqual({
      mode: "provisioned",
      minUnits: 10,
      maxReadUnits: 400,
      maxWriteUnits: 2000,
      targetUtilizationPercent: 50,
    });
  });

  it.each([
    [
      { tableCapacity: "PROVISIONED" },
      'tableCapacity must be on-demand or provisioned, got "PROVISIONED"',
    ],
    [
      { tableMaxWriteUnits: "500", tableTargetUtilization: "60" },
      "tableMaxWriteUnits, tableTargetUtilization apply only with tableCapacity=provisioned",
    ],
    [
      { tableCapacity: "on-demand", tableMinUnits: "5" },
      "tableMinUnits applies only with tableCapacity=provisioned",
    ],
    [
      { tableCapacity: "provisioned", tableMinUnits: "0" },
      "tableMinUnits must be an integer from 1 to 40000, got 0",
    ],
    [
      { tableCapacity: "provisioned", tableMinUnits: "50", tableMaxReadUnits: "20" },
      "tableMaxReadUnits must be an integer from 50 to 40000, got 20",
    ],
    [
      { tableCapacity: "provisioned", tableMaxWriteUnits: "80000" },
      "tableMaxWriteUnits must be an integer from 5 to 40000, got 80000",
    ],
    [
      { tableCapacity: "provisioned", tableTargetUtilization: "95" },
      "tableTargetUtilization must be an integer from 20 to 90, got 95",
    ],
  ])("refuses table capacity %j, naming the setting", (context, message) => {
    expect(() => fromContext(context)).toThrow(message);
  });

  it("refuses every table capacity setting that is wrong at once", () => {
    expect(() =>
      fromContext({
        tableCapacity: "provisioned",
        tableMinUnits: "0",
        tableTargetUtilization: "10",
      }),
    ).toThrow(
      /^invalid scheduler settings:\n- tableMinUnits must be an integer from 1 to 40000, got 0\n- tableTargetUtilization must be an integer from 20 to 90, got 10$/,
    );
  });

  it("never lets maxShardCount fall below shardCount", () => {
    expect(fromContext({ shardCount: "12", maxShardCount: "4" }).maxShardCount).toBe(12);
  });

  // docs/deploy.md: "Out-of-range values stop the synth with a message naming the setting". Raised
  // to shardCount unchecked, 0 and -5 were taken without a word where 5000 was refused.
  it.each([
    ["5000", "5000"],
    ["0", "0"],
    [-5, "-5"],
  ])("refuses maxShardCount=%s, naming it and its range", (value, shown) => {
    expect(() => fromContext({ maxShardCount: value })).toThrow(
      `maxShardCount must be an integer from 1 to 1024, got ${shown}`,
    );
  });

  // Read with Number(), `-c shardCount=0x10` deployed 16 shards and `-c retentionDays=1e1` kept 10
  // days, where the refusal of a non-integer says "must be an integer".
  it.each([
    ["shardCount", "0x10"],
    ["retentionDays", "1e1"],
    ["maxShardCount", "-5"],
    ["workerBatchSize", "+5"],
    ["apiRateLimit", "100.0"],
    ["tableMinUnits", " 50"],
  ])("refuses %s=%s: an integer setting is decimal digits", (key, value) => {
    expect(() => fromContext({ [key]: value })).toThrow(
      `context ${key} must be an integer written in decimal digits`,
    );
  });

  // Read with Number(), `-c lowPriorityShare=0x0`, ` 0.2` or `2e-1` were taken as numbers their
  // writer did not write, where an integer setting is decimal digits.
  it.each(["0x0", " 0.2", "2e-1", ".2", "0.", "+0.2"])(
    "refuses lowPriorityShare=%j: a fraction is decimal digits with one point",
    (value) => {
      expect(() => fromContext({ lowPriorityShare: value })).toThrow(
        "context lowPriorityShare must be a number written in decimal digits",
      );
    },
  );

  // docs/deploy.md lists them "With jwtIssuer"; without it they were dropped without a word (the
  // stage deployed with IAM authorization), where tableMinUnits without tableCapacity=provisioned
  // is refused.
  it.each([
    [{ consoleClientId: "scheduler-console" }, "consoleClientId applies"],
    [{ consoleScope: "openid profile" }, "consoleScope applies"],
    [
      { consoleClientId: "scheduler-console", consoleScope: "openid" },
      "consoleClientId, consoleScope apply",
    ],
    [{ jwtScopes: "scheduler/api" }, "jwtScopes applies"],
  ])("refuses %o without jwtIssuer, naming what it needs", (context, named) => {
    expect(() => fromContext(context)).toThrow(`${named} only with jwtIssuer and jwtAudience`);
  });

  describe("jwtScopes", () => {
    const jwt = { jwtIssuer: "https://id.example.com", jwtAudience: "api" };
    const authOf = (context: Record<string, unknown>) => fromContext({ ...jwt, ...context }).auth;

    it("requires none by default, and the console asks for openid", () => {
      expect(authOf({})).toMatchObject({ scopes: [], consoleScope: "openid" });
    });

    it("reads space-separated scopes; the console asks for openid and them unless consoleScope says otherwise", () => {
      expect(authOf({ jwtScopes: "scheduler/api scheduler/admin" })).toMatchObject({
        scopes: ["scheduler/api", "scheduler/admin"],
        consoleScope: "openid scheduler/api scheduler/admin",
      });
      expect(
        authOf({
          jwtScopes: "scheduler/api scheduler/admin",
          consoleScope: "openid scheduler/admin",
        }),
      ).toMatchObject({ consoleScope: "openid scheduler/admin" });
      // Each scope asked for once, openid too.
      expect(authOf({ jwtScopes: "openid scheduler/api scheduler/api" })).toMatchObject({
        consoleScope: "openid scheduler/api",
      });
    });

    it("refuses a consoleScope that carries none of them, naming both: API Gateway would refuse the console's every call", () => {
      expect(() => authOf({ jwtScopes: "scheduler/api", consoleScope: "openid profile" })).toThrow(
        'consoleScope "openid profile" carries none of jwtScopes "scheduler/api", so API Gateway would refuse the console\'s every call',
      );
    });

    it("refuses more than 10 scopes: API Gateway takes at most 10 per route (not raisable), so the deploy would fail creating the $default route", () => {
      const eleven = Array.from({ length: 11 }, (_, i) => `scheduler/s${i}`).join(" ");
      expect(() => authOf({ jwtScopes: eleven })).toThrow("jwtScopes");
    });

    it("refuses malformed jwtScopes naming jwtScopes alone when consoleScope is not given: the operator wrote no consoleScope to correct", () => {
      expect(() => authOf({ jwtScopes: "scheduler/api  scheduler/admin" })).toThrow(
        "jwtScopes must be space-separated OAuth scopes",
      );
      expect(() => authOf({ jwtScopes: "scheduler/api  scheduler/admin" })).not.toThrow(
        "consoleScope must be space-separated OAuth scopes",
      );
    });

    it("names jwtScopes when the console's default scope, made of them, takes the API function's environment past 4 KB", () => {
      const long = Array.from({ length: 10 }, (_, i) => `scheduler/${i}`.padEnd(220, "x")).join(
        " ",
      );
      expect(() => authOf({ jwtScopes: long })).toThrow(/past Lambda's limit.*jwtScopes/s);
    });

    it.each(["a  b", " a", "a ", 'a "b"', "a\\b", "a\tb"])(
      "refuses %j as OAuth scopes, as consoleScope is",
      (jwtScopes) => {
        expect(() => authOf({ jwtScopes, consoleScope: "openid a" })).toThrow(
          "jwtScopes must be space-separated OAuth scopes",
        );
      },
    );
  });

  it("reads the handlers' integer variables as decimal digits too", () => {
    expect(loadSettings({ SHARD_COUNT: "16" }).shardCount).toBe(16);
    expect(() => loadSettings({ SHARD_COUNT: "0x10" })).toThrow(
      'SHARD_COUNT must be an integer from 1 to 1024, got "0x10"',
    );
    expect(() => loadSettings({ RUN_RETENTION_DAYS: "1e1" })).toThrow(
      'RUN_RETENTION_DAYS must be an integer from 1 to 3650, got "1e1"',
    );
  });

  it.each([
    [{ shardCount: "0" }, /shardCount must be an integer from 1 to 1024/],
    [{ lookaheadSeconds: "30" }, /lookaheadSeconds must be an integer from 120 to 600, got 30: /],
    [{ shardCount: "eight" }, /shardCount must be an integer/],
    [{ stage: "Prod_1" }, /stage must match/],
    [{ tracing: "yes" }, /tracing must be true or false/],
    [{ jwtIssuer: "https://id.example.com" }, /jwtIssuer and jwtAudience go together/],
    [{ jwtIssuer: "http://id.example.com", jwtAudience: "a" }, /https/],
    [
      { jwtIssuer: "https://id.example.com", jwtAudience: "a", consoleScope: 'openid "x"' },
      /consoleScope must be space-separated OAuth scopes/,
    ],
    [
      { alarmEmail: "a@example.com", alarmTopicArn: "arn:aws:sns:eu-west-1:123456789012:t" },
      /not both/,
    ],
    [{ alarmTopicArn: "ops-alarms" }, /not an SNS topic ARN/],
    [{ workerTimeoutSeconds: "901" }, /workerTimeoutSeconds must be an integer from 30 to 900/],
    [{ leaseSeconds: "120", workerTimeoutSeconds: "90" }, /leaseSeconds \(120\) must be below/],
    [{ workerConcurrencyLow: "50" }, /must not increase as priority falls/],
    [{ workerConcurrencyHigh: "1" }, /workerConcurrencyHigh must be an integer from 2/],
    [{ logRetentionDays: "10" }, /logRetentionDays must be one CloudWatch Logs accepts/],
    [{ lowPriorityShare: "0.6" }, /lowPriorityShare must be a number from 0 to 0.5/],
    [{ lowPriorityShare: "ten" }, /lowPriorityShare must be a number/],
    // CloudWatch keeps AWS/ for its own services and drops what is put there: no engine metric
    // would reach an alarm, and DeadRuns, SchedulingLagP99, ReaperBehind… would never fire.
    [{ metricsNamespace: "AWS/Scheduler" }, /metricsNamespace must not start with "AWS\/"/],
    [{ metricsNamespace: ":Scheduler" }, /metricsNamespace must be letters, digits and/],
    // A quote or a brace would end the namespace in the dashboard's SEARCH expression.
    [{ metricsNamespace: "Scheduler prod" }, /metricsNamespace must be letters, digits and/],
    [{ metricsNamespace: "Scheduler'}" }, /metricsNamespace must be letters, digits and/],
    // A tenant id the API never authenticates (auth.ts isValidTenantId): that admin is no one.
    [
      { adminTenants: "arn:aws:iam::123456789012:role/Ops Admin" },
      /adminTenants: "arn:aws:iam::123456789012:role\/Ops Admin" is not a tenant id/,
    ],
    [{ adminTenants: "ops, team#1" }, /adminTenants: "team#1" is not a tenant id/],
    [{ adminTenants: "ops, .." }, /adminTenants: "\.\." is not a tenant id/],
  ])("refuses %o", (context, message) => {
    expect(() => fromContext(context)).toThrow(message);
  });

  it.each([
    [{ shardCount: "0" }, "shardCount", "1 to 1024"],
    [{ maxShardCount: "2000" }, "maxShardCount", "1 to 1024"],
    [{ lookaheadSeconds: "900" }, "lookaheadSeconds", "120 to 600"],
    [{ leaseSeconds: "5" }, "leaseSeconds", "6 to 900"],
    [{ misfireGraceSeconds: "0" }, "misfireGraceSeconds", "10 to 86400"],
    [{ misfireGraceSeconds: "86401" }, "misfireGraceSeconds", "10 to 86400"],
    [{ retentionDays: "0" }, "retentionDays", "1 to 3650"],
    [{ deadLetterRetentionDays: "0" }, "deadLetterRetentionDays", "1 to 3650"],
    [{ minIntervalMs: "86400001" }, "minIntervalMs", "1000 to 86400000"],
    [{ maxReceiveCount: "1001" }, "maxReceiveCount", "2 to 1000"],
    [{ quotaRequestsPerSecond: "0" }, "quotaRequestsPerSecond", "1 to 1000000"],
  ])(
    "refuses %o naming the setting as the operator gave it, not the handlers' variable",
    (context, key, range) => {
      expect(() => fromContext(context)).toThrow(`${key} must be an integer from ${range}`);
    },
  );

  it.each([
    [
      { quotaActiveJobs: "0" },
      'quotaActiveJobs must be "none" or an integer from 1 to 1000000, got 0',
    ],
    [
      { quotaRunsPerMinute: "1000001" },
      'quotaRunsPerMinute must be "none" or an integer from 1 to 1000000, got 1000001',
    ],
    [
      { quotaConcurrentRuns: "0" },
      'quotaConcurrentRuns must be "none" or an integer from 1 to 1000, got 0',
    ],
    [
      { workerConcurrencyHigh: "1" },
      "workerConcurrencyHigh must be an integer from 2 to 1000, got 1",
    ],
    [
      { workerConcurrencyNormal: "1", workerConcurrencyLow: "1" },
      "workerConcurrencyNormal must be an integer from 2 to 1000, got 1",
    ],
    [
      { workerConcurrencyLow: "1001" },
      "workerConcurrencyLow must be an integer from 2 to 1000, got 1001",
    ],
    [
      { workerConcurrencyNormal: "60" },
      "workerConcurrencyHigh, workerConcurrencyNormal and workerConcurrencyLow must not increase as priority falls (high >= normal >= low), got 50, 60, 5",
    ],
  ])("refuses %o naming the context key as the operator gave it", (context, message) => {
    expect(() => fromContext(context)).toThrow(message);
  });

  it.each(["1", "0"])(
    "refuses maxReceiveCount %s when the app is built, naming the setting and why",
    (maxReceiveCount) => {
      // One delivery would be all a run gets: a worker crash, or a batch lost with its worker,
      // sends the message to the DLQ and fires the DLQ alarm.
      expect(() => buildSchedulerApp({ context: { maxReceiveCount } })).toThrow(
        /maxReceiveCount must be at least 2, got [01]: /,
      );
      expect(() => resolveSettings({ maxReceiveCount: Number(maxReceiveCount) })).toThrow(
        /maxReceiveCount must be at least 2/,
      );
    },
  );

  it.each(["119", "60"])(
    "refuses lookaheadSeconds %s when the app is built, naming the setting and why; the handlers (the sandbox, the tests) still take 60",
    (lookaheadSeconds) => {
      // A tick comes once a minute: with lookahead L, a minute's entries are claimed from up to
      // L - 60 s before it in the worst tick phase (docs/scaling.md), nothing at 60 s.
      const refusal = new RegExp(
        `lookaheadSeconds must be an integer from 120 to 600, got ${lookaheadSeconds}: .*claim window .*late`,
      );
      expect(() => buildSchedulerApp({ context: { lookaheadSeconds } })).toThrow(refusal);
      expect(() => resolveSettings({ lookaheadSeconds: Number(lookaheadSeconds) })).toThrow(
        refusal,
      );
      expect(loadSettings({ LOOKAHEAD_SECONDS: "60" }).lookaheadMs).toBe(60_000);
    },
  );

  it.each(["9", "5", "1"])(
    "refuses misfireGraceSeconds %s when the app is built, naming the setting and why; the handlers (the sandbox, the tests) still take 1",
    (misfireGraceSeconds) => {
      // An on-time run starts seconds after its planned time (the lag alarm's p99 of 5 s, clocks
      // up to 4 s apart, whole-second SQS delays): a shorter grace would skip runs that were on time.
      const refusal = new RegExp(
        `misfireGraceSeconds must be an integer from 10 to 86400, got ${misfireGraceSeconds}: .*on time`,
      );
      expect(() => buildSchedulerApp({ context: { misfireGraceSeconds } })).toThrow(refusal);
      expect(() => resolveSettings({ misfireGraceSeconds: Number(misfireGraceSeconds) })).toThrow(
        refusal,
      );
      expect(loadSettings({ MISFIRE_GRACE_SECONDS: "1" }).misfireGraceMs).toBe(1_000);
    },
  );

  it("accepts misfireGraceSeconds from 10 up", () => {
    expect(fromContext({ misfireGraceSeconds: "10" }).misfireGraceSeconds).toBe(10);
    expect(fromContext({ misfireGraceSeconds: 86_400 }).misfireGraceSeconds).toBe(86_400);
  });

  it("accepts lookaheadSeconds from 120 up", () => {
    expect(fromContext({ lookaheadSeconds: "120" }).lookaheadSeconds).toBe(120);
    expect(fromContext({ lookaheadSeconds: 600 }).lookaheadSeconds).toBe(600);
  });

  it.each(["999", "500", "1", "0"])(
    "refuses minIntervalMs %s, below the one second the design is sized for, at synth and in the handlers",
    (minIntervalMs) => {
      // A claim queues at most 50 occurrences and SQS delays are whole seconds: a job every 100 ms
      // in the sandbox ran 30 s late at the median, its runs bunched and most of them skipped.
      const refusal = new RegExp(
        `minIntervalMs must be an integer from 1000 to 86400000, got "${minIntervalMs}": .*per-second`,
      );
      expect(() => buildSchedulerApp({ context: { minIntervalMs } })).toThrow(refusal);
      expect(() => resolveSettings({ minIntervalMs: Number(minIntervalMs) })).toThrow(refusal);
      expect(() => loadSettings({ MIN_INTERVAL_MS: minIntervalMs })).toThrow(
        new RegExp(
          `^MIN_INTERVAL_MS must be an integer from 1000 to 86400000, got "${minIntervalMs}"`,
        ),
      );
    },
  );

  it("accepts minIntervalMs from one second up", () => {
    expect(fromContext({ minIntervalMs: "1000" }).minIntervalMs).toBe(1000);
    expect(loadSettings({ MIN_INTERVAL_MS: "1000" }).minIntervalMs).toBe(1000);
    expect(fromContext({ minIntervalMs: 60_000 }).minIntervalMs).toBe(60_000);
  });

  it("refuses an admin tenant holding a comma, which ADMIN_TENANTS would read as two tenants", () => {
    // The API function reads ADMIN_TENANTS split at its commas: "…role/Ops,Team" would make the
    // tenants "…role/Ops" and "Team" admins, neither of them the one named.
    expect(() =>
      resolveSettings({ adminTenants: ["arn:aws:iam::123456789012:role/Ops,Team"] }),
    ).toThrow(/adminTenants: "arn:aws:iam::123456789012:role\/Ops,Team" holds a comma/);
  });

  it("accepts the namespaces and admin tenants CloudWatch and the API take", () => {
    const s = fromContext({
      metricsNamespace: "Acme/Scheduler-prod_1.#:x",
      adminTenants: "arn:aws:iam::123456789012:role/Ops, sub:client-1",
    });
    expect(s.metricsNamespace).toBe("Acme/Scheduler-prod_1.#:x");
    expect(s.adminTenants).toEqual(["arn:aws:iam::123456789012:role/Ops", "sub:client-1"]);
  });

  // An e-mail subscription takes one address; anything else failed the deploy at the subscription,
  // which CloudFormation rolled back, after the synth had taken it.
  it.each(["oncall", "a@example.com,b@example.com", "a@example.com b@example.com"])(
    "refuses alarmEmail %s, which is not one e-mail address, at synth",
    (alarmEmail) => {
      expect(() => fromContext({ alarmEmail })).toThrow(
        `alarmEmail must be one e-mail address, got "${alarmEmail}"`,
      );
    },
  );

  // Each passed the synth, and SNS refused the subscription at deploy (a link pasted with its
  // scheme, a domain with no dot, an address copied from a chat with a zero-width space after it).
  it.each([
    ["mailto:a@b.c", "mailto:a@b.c"],
    ["a@b", "a@b"],
    ["a@b.c\u200B", "a@b.c\\u{200b}"],
    ["oncall@example.com\u200B", "oncall@example.com\\u{200b}"],
    ["a.@example.com", "a.@example.com"],
    ["a..b@example.com", "a..b@example.com"],
    ["a@-example.com", "a@-example.com"],
    ["a@example..com", "a@example..com"],
    ["a@example.com.", "a@example.com."],
    ["\u00A0a@example.com", "\\u{a0}a@example.com"],
  ])("refuses alarmEmail %j, naming alarmEmail and showing what it got", (alarmEmail, shown) => {
    expect(() => fromContext({ alarmEmail })).toThrow(
      `alarmEmail must be one e-mail address, got "${shown}"`,
    );
  });

  it("accepts an alarmEmail address", () => {
    for (const address of [
      "oncall@example.com",
      "ops+scheduler.prod@mail.example.co.uk",
      "On.Call@Example.COM",
      "jörg.müller@bücher.example",
      "ops@xn--bcher-kva.example",
      "o'brien_ops-1@a-b.example.io",
    ]) {
      expect(fromContext({ alarmEmail: address }).alarmEmail).toBe(address);
    }
  });

  // CloudWatch publishes an alarm's notification only to a topic in the alarm's own region (and
  // so partition): the deploy failed at the first alarm, after the synth had taken the topic.
  it.each([
    ["eu-west-1", "arn:aws:sns:us-east-1:123456789012:ops-alarms"],
    ["eu-west-1", "arn:aws-cn:sns:eu-west-1:123456789012:ops-alarms"],
    ["cn-north-1", "arn:aws:sns:cn-north-1:123456789012:ops-alarms"],
  ])("refuses in a stack of region %s the alarmTopicArn %s, naming it", (region, alarmTopicArn) => {
    expect(() => stackIn(region, { alarmTopicArn })).toThrow(
      `alarmTopicArn must name a topic in the stack's region (${region}) and partition`,
    );
  });

  it("accepts an alarmTopicArn in the stack's region, and any region while it is a token", () => {
    const here = "arn:aws-cn:sns:cn-north-1:123456789012:ops-alarms";
    expect(stackIn("cn-north-1", { alarmTopicArn: here }).observability.topic.topicArn).toBe(here);
    const elsewhere = "arn:aws:sns:us-east-1:123456789012:ops-alarms";
    expect(stackIn(undefined, { alarmTopicArn: elsewhere }).observability.topic.topicArn).toBe(
      elsewhere,
    );
  });

  it("accepts maxReceiveCount 2, the fewest deliveries that survive one crash", () => {
    expect(fromContext({ maxReceiveCount: "2" }).maxReceiveCount).toBe(2);
  });

  it.each([
    [{ shardcount: "16" }, /context shardcount \(did you mean shardCount\?\): no such setting/],
    [{ alarmEmails: "a@example.com" }, /alarmEmails \(did you mean alarmEmail\?\)/],
    [{ workerTimeout: "300" }, /workerTimeout \(did you mean workerTimeoutSeconds\?\)/],
    [{ shardCuont: "16" }, /shardCuont \(did you mean shardCount\?\)/],
  ])("refuses %o, a misspelt setting, rather than leave it out unsaid", (context, message) => {
    expect(() => fromContext(context)).toThrow(message);
  });

  it("accepts CDK's own context (feature flags, lookups, CLI keys) and the operator's own keys beside the settings", () => {
    expect(
      fromContext({
        "@aws-cdk/core:enablePartitionLiterals": true,
        "aws:cdk:bundling-stacks": [],
        "availability-zones:account=123456789012:region=eu-west-1": ["eu-west-1a"],
        "cli-telemetry": false,
        "acknowledged-issue-numbers": [1],
        stage: "prod",
        region: "eu-west-1",
        shardCount: "16",
      }).shardCount,
    ).toBe(16);
  });

  it("documents every context key it reads in docs/deploy.md", () => {
    const doc = readFileSync(join(REPO_ROOT, "docs", "deploy.md"), "utf8");
    expect(CONTEXT_KEYS.filter((key) => !doc.includes(`\`${key}\``))).toEqual([]);
  });
});
