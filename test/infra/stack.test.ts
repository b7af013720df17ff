import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Match } from "aws-cdk-lib/assertions";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { handlerEntry, type SchedulerFunction } from "../../infra/constructs/scheduler-function.js";
import { type Component, SERVICE_NAMES } from "../../infra/lambda-environment.js";
import { CONTEXT_KEYS } from "../../infra/settings.js";
import { ENV } from "../../shared/config.js";
import { PRIORITIES } from "../../shared/model.js";
import { METRICS, TENANT_LOG_EVENTS } from "../../shared/observability.js";
import {
  JOBS_TTL_ATTRIBUTE,
  jobsTableDefinition,
  RUNS_TTL_ATTRIBUTE,
  runsTableDefinition,
  webhookSecretsTableDefinition,
} from "../../shared/storage/tables.js";
import {
  environmentReadBy,
  filesOfHandlerMentioning,
  powertoolsServiceOf,
} from "./support/handler-source.js";
import { type Bindings, resolveValue } from "./support/iam-evaluator.js";
import { COMPONENTS, functionsOf, grantsOfRole, roleOfComponent } from "./support/iam-policy.js";
import { REPO_ROOT } from "./support/repo-root.js";
import {
  type CfnResourceJson,
  logicalIdOf,
  propertiesOf,
  resourceOf,
  resourcesOfType,
  type Synthesized,
  synthesizeUnbundled,
  synthesizeVariants,
} from "./support/synth.js";
import {
  asArray,
  isObject,
  type Json,
  type JsonObject,
  referencedId,
} from "./support/template-json.js";

let prod: Synthesized;
let dev: Synthesized;
let dispose = () => {};

beforeAll(() => {
  // Templates and constructs only: synth-offline reads the bundles `cdk synth` writes.
  const synthesized = synthesizeVariants({
    prod: { stage: "prod", shardCount: "16", lookaheadSeconds: "240" },
    dev: { stage: "dev" },
  });
  ({ prod, dev } = synthesized.variants);
  dispose = synthesized.dispose;
});

afterAll(() => dispose());

/** Sorted by one field, with only the given fields kept: order and extra keys are not the point. */
function normalized(list: readonly unknown[], sortKey: string, fields: readonly string[]) {
  return list
    .map((item) =>
      Object.fromEntries(
        fields.flatMap((field) => {
          const value = isObject(item) ? item[field] : undefined;
          return value === undefined ? [] : [[field, value]];
        }),
      ),
    )
    .sort((a, b) => String(a[sortKey]).localeCompare(String(b[sortKey])));
}

function environmentOf(synth: Synthesized, component: Component): Record<string, Json> {
  const fn = functionsOf(synth).find(([c]) => c === component)?.[1];
  if (!fn) throw new Error(`no function ${component}`);
  const env = propertiesOf(synth, fn.fn).Environment;
  const variables = isObject(env) ? env.Variables : undefined;
  return isObject(variables) ? variables : {};
}

describe("storage", () => {
  const cases = [
    ["jobs", jobsTableDefinition("jobs")],
    ["runs", runsTableDefinition("runs")],
    ["webhookSecrets", webhookSecretsTableDefinition("webhook-secrets")],
  ] as const;

  it.each(cases)(
    "the %s table has the keys, attributes and indexes of shared/storage/tables.ts",
    (name, definition) => {
      const table = propertiesOf(prod, prod.stack.storage[name].table);
      expect(table.KeySchema).toEqual(definition.KeySchema);
      const attributeFields = ["AttributeName", "AttributeType"];
      expect(
        normalized(asArray(table.AttributeDefinitions), "AttributeName", attributeFields),
      ).toEqual(
        normalized(definition.AttributeDefinitions ?? [], "AttributeName", attributeFields),
      );
      const indexFields = ["IndexName", "KeySchema", "Projection"];
      expect(normalized(asArray(table.GlobalSecondaryIndexes), "IndexName", indexFields)).toEqual(
        normalized(definition.GlobalSecondaryIndexes ?? [], "IndexName", indexFields),
      );
      expect(asArray(table.GlobalSecondaryIndexes)).toHaveLength(
        definition.GlobalSecondaryIndexes?.length ?? 0,
      );
      expect(table.BillingMode).toBe(definition.BillingMode);
      expect(table.PointInTimeRecoverySpecification).toEqual({ PointInTimeRecoveryEnabled: true });
    },
  );

  it("expires runs, and ended jobs and idempotency records, by their TTL attribute", () => {
    expect(propertiesOf(prod, prod.stack.storage.runs.table).TimeToLiveSpecification).toEqual({
      AttributeName: RUNS_TTL_ATTRIBUTE,
      Enabled: true,
    });
    expect(propertiesOf(prod, prod.stack.storage.jobs.table).TimeToLiveSpecification).toEqual({
      AttributeName: JOBS_TTL_ATTRIBUTE,
      Enabled: true,
    });
  });

  it("protects the tables outside dev and lets dev tear them down", () => {
    for (const name of ["jobs", "runs", "webhookSecrets"] as const) {
      const retained = resourceOf(prod, prod.stack.storage[name].table);
      expect(retained.Properties?.DeletionProtectionEnabled).toBe(true);
      expect(retained.DeletionPolicy).toBe("Retain");
      const disposable = resourceOf(dev, dev.stack.storage[name].table);
      expect(disposable.Properties?.DeletionProtectionEnabled).toBe(false);
      expect(disposable.DeletionPolicy).toBe("Delete");
    }
    expect(resourceOf(prod, prod.stack.storage.webhookSecretsKey).DeletionPolicy).toBe("Retain");
    expect(resourceOf(dev, dev.stack.storage.webhookSecretsKey).DeletionPolicy).toBe("Delete");
  });

  it("refuses cdk destroy of a stage other than dev (termination protection); dev tears down", () => {
    // Deleting the stack would keep the tables and the key (Retain) but orphan them: a deploy
    // after it creates new, empty ones, and every accepted job is left behind in the old ones.
    const protection = (synth: Synthesized) =>
      synth.app.synth().getStackByName(synth.stack.stackName).terminationProtection;
    expect(prod.stack.stackName).toBe("Scheduler-prod");
    expect(protection(prod)).toBe(true);
    expect(protection(dev)).toBe(false);
  });

  it("keeps every stateful resource's logical id, so no redeploy replaces one with an empty one", () => {
    // A changed logical id (a construct renamed or moved) makes CloudFormation create a new,
    // empty resource and orphan the old one (Retain): every job, run, secret and the key that
    // decrypts them would be left behind by a deploy. Change these only with a migration.
    const { stack } = prod;
    const stateful = {
      StorageJobsTable47C44CDA: stack.storage.jobs.table,
      StorageRunsTableF5CFB6AB: stack.storage.runs.table,
      StorageWebhookSecretsTable0CBC7ABF: stack.storage.webhookSecrets.table,
      StorageWebhookSecretsKeyE9B3A008: stack.storage.webhookSecretsKey,
    };
    for (const [id, construct] of Object.entries(stateful)) {
      expect(logicalIdOf(stack, construct)).toBe(id);
      // Replaced all the same (a key schema changed), the old one stays, data and all.
      expect(resourceOf(prod, construct).UpdateReplacePolicy, id).toBe("Retain");
    }
    const tablesAndKeys = Object.entries(prod.resources).filter(([, resource]) =>
      ["AWS::DynamoDB::Table", "AWS::DynamoDB::GlobalTable", "AWS::KMS::Key"].includes(
        String(resource.Type),
      ),
    );
    expect(tablesAndKeys.map(([id]) => id).sort()).toEqual(Object.keys(stateful).sort());
  });

  it("bills the jobs and runs tables as tableCapacity says, auto scaling each table and index when provisioned", () => {
    const { synth, dispose: disposeProvisioned } = synthesizeUnbundled({
      stage: "prod",
      tableCapacity: "provisioned",
      tableMinUnits: "3",
      tableMaxReadUnits: "300",
      tableMaxWriteUnits: "900",
      tableTargetUtilization: "60",
    });
    try {
      const { storage } = synth.stack;
      const floor = { ReadCapacityUnits: 3, WriteCapacityUnits: 3 };
      const expected: [string, number, number][] = [];
      for (const name of ["jobs", "runs"] as const) {
        const table = propertiesOf(synth, storage[name].table);
        // CloudFormation's default, which CDK leaves out.
        expect(table.BillingMode ?? "PROVISIONED", name).toBe("PROVISIONED");
        expect(table.ProvisionedThroughput, name).toEqual(floor);
        const indexes = asArray(table.GlobalSecondaryIndexes);
        expect(indexes.map((i) => (isObject(i) ? i.ProvisionedThroughput : null))).toEqual(
          storage[name].indexNames.map(() => floor),
        );
        const tableName = `table/${logicalIdOf(synth.stack, storage[name].table)}`;
        for (const target of [
          tableName,
          ...storage[name].indexNames.map((i) => `${tableName}/index/${i}`),
        ]) {
          expected.push([`${target} read`, 3, 300], [`${target} write`, 3, 900]);
        }
      }
      // Each scalable target: the table's or index's logical id in its ResourceId, the dimension, the range.
      const targets = resourcesOfType(synth, "AWS::ApplicationAutoScaling::ScalableTarget").map(
        ([, r]) => {
          const p = r.Properties ?? {};
          const joined = JSON.stringify(p.ResourceId);
          const id = Object.entries(synth.resources).find(
            ([logicalId, res]) =>
              res.Type === "AWS::DynamoDB::Table" && joined.includes(`"${logicalId}"`),
          )?.[0];
          const index = /\/index\/([^"]+)"/.exec(joined)?.[1];
          const dimension = String(p.ScalableDimension).includes("Read") ? "read" : "write";
          const target = `table/${id}${index ? `/index/${index}` : ""}`;
          return [`${target} ${dimension}`, p.MinCapacity, p.MaxCapacity];
        },
      );
      expect(targets.sort()).toEqual(expected.sort());
      const policies = resourcesOfType(synth, "AWS::ApplicationAutoScaling::ScalingPolicy");
      expect(policies).toHaveLength(expected.length);
      for (const [id, policy] of policies) {
        const config = policy.Properties?.TargetTrackingScalingPolicyConfiguration;
        expect(isObject(config) ? config.TargetValue : null, id).toBe(60);
      }
      // A few reads a minute: on demand is cheaper than any floor.
      expect(propertiesOf(synth, storage.webhookSecrets.table).BillingMode).toBe("PAY_PER_REQUEST");
    } finally {
      disposeProvisioned();
    }
    // On demand by default: no units, nothing scaled.
    expect(propertiesOf(prod, prod.stack.storage.runs.table).ProvisionedThroughput).toBeUndefined();
    expect(resourcesOfType(prod, "AWS::ApplicationAutoScaling::ScalableTarget")).toEqual([]);
  }, 60_000);

  it("encrypts the webhook secrets table with its own rotating KMS key", () => {
    const { stack } = prod;
    const table = propertiesOf(prod, stack.storage.webhookSecrets.table);
    expect(table.SSESpecification).toEqual({
      SSEEnabled: true,
      SSEType: "KMS",
      KMSMasterKeyId: {
        "Fn::GetAtt": [logicalIdOf(stack, stack.storage.webhookSecretsKey), "Arn"],
      },
    });
    expect(propertiesOf(prod, stack.storage.webhookSecretsKey).EnableKeyRotation).toBe(true);
  });
});

describe("a setting changed on a live stage", () => {
  // Every setting but the stage (another stage is another stack), each away from its default,
  // alarmEmail and alarmTopicArn in turn (they exclude each other).
  const changed = {
    shardCount: "16",
    maxShardCount: "32",
    lookaheadSeconds: "120",
    leaseSeconds: "30",
    misfireGraceSeconds: "120",
    retentionDays: "7",
    deadLetterRetentionDays: "60",
    minIntervalMs: "60000",
    logRetentionDays: "90",
    jwtIssuer: "https://issuer.example.com/",
    jwtAudience: "scheduler-api",
    consoleClientId: "scheduler-console",
    consoleScope: "openid profile scheduler/api",
    jwtScopes: "scheduler/api scheduler/admin",
    tracing: "true",
    metricsNamespace: "Acme/Scheduler",
    workerTimeoutSeconds: "600",
    workerBatchSize: "5",
    workerConcurrencyHigh: "100",
    workerConcurrencyNormal: "40",
    workerConcurrencyLow: "10",
    lowPriorityShare: "0.2",
    maxReceiveCount: "8",
    apiRateLimit: "50",
    apiBurstLimit: "100",
    lagAlarmMs: "10000",
    queueAgeAlarmSeconds: "4000",
    demoJobTypes: "true",
    quotaActiveJobs: "500",
    quotaRunsPerMinute: "600",
    quotaConcurrentRuns: "20",
    quotaRequestsPerSecond: "50",
    quotaMaxPriority: "normal",
    adminTenants: "ops",
    oneOffClaimWrites: "plain",
    tableCapacity: "provisioned",
    tableMinUnits: "2",
    tableMaxReadUnits: "200",
    tableMaxWriteUnits: "400",
    tableTargetUtilization: "50",
  };
  const variants = [
    { ...changed, alarmEmail: "oncall@example.com" },
    { ...changed, alarmTopicArn: "arn:aws:sns:eu-west-1:123456789012:ops-alarms" },
  ];
  const STATEFUL = [
    "AWS::DynamoDB::Table",
    "AWS::KMS::Key",
    "AWS::SQS::Queue",
    "AWS::Logs::LogGroup",
  ];
  /**
   * What CloudFormation replaces a resource for (AWS's "Update requires: Replacement"), which for
   * these is a new, empty table or key, a queue without its messages, or a log group without
   * its logs.
   */
  const REPLACING: Readonly<Record<string, readonly string[]>> = {
    "AWS::DynamoDB::Table": ["TableName", "KeySchema", "LocalSecondaryIndexes"],
    "AWS::KMS::Key": ["KeySpec", "KeyUsage", "MultiRegion", "Origin", "XksKeyId"],
    "AWS::SQS::Queue": ["QueueName", "FifoQueue"],
    "AWS::Logs::LogGroup": ["LogGroupName", "LogGroupClass"],
  };
  /** A resource without what tableCapacity sets on a table and its indexes. */
  const withoutBilling = (resource: CfnResourceJson | undefined) => {
    if (resource?.Type !== "AWS::DynamoDB::Table") return resource;
    const { BillingMode, ProvisionedThroughput, GlobalSecondaryIndexes, ...rest } =
      resource.Properties ?? {};
    const indexes = asArray(GlobalSecondaryIndexes).map((index) => {
      if (!isObject(index)) return index;
      const { ProvisionedThroughput: _units, ...keys } = index;
      return keys;
    });
    return { ...resource, Properties: { ...rest, GlobalSecondaryIndexes: indexes } };
  };
  const statefulOf = (synth: Synthesized) =>
    Object.fromEntries(
      Object.entries(synth.resources).filter(([, r]) => STATEFUL.includes(r.Type)),
    );

  it("covers every setting but the stage", () => {
    const covered = new Set(variants.flatMap((variant) => Object.keys(variant)));
    expect(CONTEXT_KEYS.filter((key) => key !== "stage" && !covered.has(key))).toEqual([]);
  });

  it("replaces no table, key, queue or log group, and keeps what CloudFormation would replace one for", () => {
    const { synth: before, dispose: disposeBefore } = synthesizeUnbundled({ stage: "prod" });
    try {
      const kept = statefulOf(before);
      // The key schemas as deployed: a change here replaces the table, data left behind.
      const keys = (id: string) => kept[id]?.Properties?.KeySchema;
      expect(keys("StorageJobsTable47C44CDA")).toEqual([
        { AttributeName: "pk", KeyType: "HASH" },
        { AttributeName: "sk", KeyType: "RANGE" },
      ]);
      expect(keys("StorageRunsTableF5CFB6AB")).toEqual([
        { AttributeName: "pk", KeyType: "HASH" },
        { AttributeName: "sk", KeyType: "RANGE" },
      ]);
      expect(keys("StorageWebhookSecretsTable0CBC7ABF")).toEqual([
        { AttributeName: "pk", KeyType: "HASH" },
      ]);
      for (const [id, resource] of Object.entries(kept)) {
        for (const property of REPLACING[resource.Type] ?? []) {
          // Names left to CloudFormation; standard queues, keys and log groups; no local indexes.
          if (property !== "KeySchema")
            expect(resource.Properties?.[property], `${id}.${property}`).toBeUndefined();
        }
      }
      for (const context of variants) {
        const { synth: after, dispose: disposeAfter } = synthesizeUnbundled({
          stage: "prod",
          ...context,
        });
        try {
          const now = statefulOf(after);
          expect(Object.keys(now).sort()).toEqual(Object.keys(kept).sort());
          for (const [id, resource] of Object.entries(now)) {
            const old = kept[id];
            expect(
              [resource.Type, resource.DeletionPolicy, resource.UpdateReplacePolicy],
              id,
            ).toEqual([old?.Type, old?.DeletionPolicy, old?.UpdateReplacePolicy]);
            for (const property of REPLACING[resource.Type] ?? []) {
              expect(resource.Properties?.[property], `${id}.${property}`).toEqual(
                old?.Properties?.[property],
              );
            }
          }
          // The tables and the key are not touched at all, but for how the tables are billed
          // (tableCapacity), an update in place.
          for (const [id, resource] of Object.entries(now)) {
            if (["AWS::DynamoDB::Table", "AWS::KMS::Key"].includes(resource.Type))
              expect(withoutBilling(resource), id).toEqual(withoutBilling(kept[id]));
          }
        } finally {
          disposeAfter();
        }
      }
    } finally {
      disposeBefore();
    }
  }, 120_000);
});

describe("queues", () => {
  it.each(PRIORITIES)(
    "the %s work queue redrives to its own DLQ, encrypted, TLS only",
    (priority) => {
      const { stack } = prod;
      const queue = propertiesOf(prod, stack.queues.work[priority]);
      expect(queue.RedrivePolicy).toEqual({
        deadLetterTargetArn: {
          "Fn::GetAtt": [logicalIdOf(stack, stack.queues.deadLetters[priority]), "Arn"],
        },
        maxReceiveCount: 5,
      });
      expect(queue.SqsManagedSseEnabled).toBe(true);
      expect(propertiesOf(prod, stack.queues.deadLetters[priority]).SqsManagedSseEnabled).toBe(
        true,
      );
      prod.template.hasResourceProperties("AWS::SQS::QueuePolicy", {
        Queues: [{ Ref: logicalIdOf(stack, stack.queues.work[priority]) }],
        PolicyDocument: {
          Statement: Match.arrayWith([
            Match.objectLike({
              Effect: "Deny",
              Condition: { Bool: { "aws:SecureTransport": "false" } },
            }),
          ]),
        },
      });
    },
  );

  it("keeps each work queue's visibility at least the worker's timeout (AWS refuses the event source otherwise)", () => {
    const timeout = Number(propertiesOf(prod, prod.stack.worker.worker.fn).Timeout);
    expect(timeout).toBeLessThanOrEqual(900);
    for (const priority of PRIORITIES) {
      const visibility = Number(
        propertiesOf(prod, prod.stack.queues.work[priority]).VisibilityTimeout,
      );
      expect(visibility).toBeGreaterThanOrEqual(timeout);
    }
    const dlqTimeout = Number(propertiesOf(prod, prod.stack.worker.deadLetterConsumer.fn).Timeout);
    for (const dlq of prod.stack.queues.allDeadLetters) {
      expect(Number(propertiesOf(prod, dlq).VisibilityTimeout)).toBeGreaterThanOrEqual(dlqTimeout);
    }
  });
});

describe("dispatch", () => {
  it("runs the tick on rate(1 minute), with a DLQ for undeliverable events", () => {
    const { stack } = prod;
    const rule = propertiesOf(prod, stack.dispatch.rule);
    expect(rule.ScheduleExpression).toBe("rate(1 minute)");
    expect(rule.State).toBe("ENABLED");
    const targets = asArray(rule.Targets);
    expect(targets).toHaveLength(1);
    const target = targets[0];
    if (!isObject(target)) throw new Error("rule target");
    expect(referencedId(target.Arn)).toBe(logicalIdOf(stack, stack.dispatch.tick.fn));
    expect(target.DeadLetterConfig).toEqual({
      Arn: { "Fn::GetAtt": [logicalIdOf(stack, stack.queues.asyncFailures), "Arn"] },
    });
  });

  /**
   * The async-failures queue takes two kinds of message: Lambda's on-failure records (the tick's
   * and the dispatcher's invocations), whose body holds the error, and the tick rule's events
   * EventBridge could not deliver, whose error EventBridge puts in message attributes (ERROR_CODE,
   * ERROR_MESSAGE, RETRY_ATTEMPTS), which `receive-message` leaves out unless asked for by
   * --message-attribute-names. The command docs/deploy.md gives for reading them asks for both,
   * and leaves them visible (--visibility-timeout 0): the queue's alarm counts visible messages,
   * and a read that hid them for the queue's 30 s would let it go to OK and back, notifying twice.
   */
  it("docs/deploy.md reads the async-failures queue with the error EventBridge puts in message attributes, its messages left visible", () => {
    const { stack } = prod;
    const asyncFailures = { "Fn::GetAtt": [logicalIdOf(stack, stack.queues.asyncFailures), "Arn"] };
    const targets = asArray(propertiesOf(prod, stack.dispatch.rule).Targets);
    expect(targets.map((t) => (isObject(t) ? t.DeadLetterConfig : undefined))).toEqual([
      { Arn: asyncFailures },
    ]);
    const deploy = readFileSync(join(REPO_ROOT, "docs", "deploy.md"), "utf8");
    const reads = [...deploy.matchAll(/`(aws sqs receive-message [^`]*)`/g)].map((m) => m[1]);
    expect(reads.length).toBeGreaterThan(0);
    for (const command of reads) {
      expect(command).toContain("--message-attribute-names All");
      expect(command).toContain("--visibility-timeout 0");
    }
  });

  it.each(["60", "300", "600"])(
    "gives a dispatcher pass its whole shard lease (leaseSeconds=%s): a backlog or first-pass scan may take half of it",
    (leaseSeconds) => {
      // A pass killed by its Lambda timeout records nothing and holds its shard's lease until it
      // lapses; one killed before its half-lease backlog budget ran out would do so every pass.
      const { synth, dispose: disposeVariant } = synthesizeUnbundled({ leaseSeconds });
      try {
        const timeout = Number(propertiesOf(synth, synth.stack.dispatch.dispatcher.fn).Timeout);
        expect(timeout).toBeGreaterThanOrEqual(Number(leaseSeconds));
        expect(timeout).toBeGreaterThanOrEqual(60);
      } finally {
        disposeVariant();
      }
    },
  );

  it("invokes the dispatcher asynchronously with a retry and an on-failure destination", () => {
    const { stack } = prod;
    prod.template.hasResourceProperties("AWS::Lambda::EventInvokeConfig", {
      FunctionName: { Ref: logicalIdOf(stack, stack.dispatch.dispatcher.fn) },
      MaximumRetryAttempts: 1,
      DestinationConfig: {
        OnFailure: {
          Destination: { "Fn::GetAtt": [logicalIdOf(stack, stack.queues.asyncFailures), "Arn"] },
        },
      },
    });
    expect(environmentOf(prod, "tick")[ENV.dispatcherFunction]).toEqual({
      Ref: logicalIdOf(stack, stack.dispatch.dispatcher.fn),
    });
  });

  /**
   * docs/deploy.md's restore stops the stage by disabling the tick's rule, then waits before the
   * copy: an event the rule emitted before may still come (EventBridge's retries, then Lambda's
   * async queue), the tick it starts invokes the dispatcher, whose event waits in that queue too
   * (and is retried), so a pass can start minutes after the rule is off, however short the
   * workers' timeout. The wait the procedure states covers that, then the pass's own timeout.
   */
  it("docs/deploy.md's restore waits out a dispatcher pass started after the tick's rule is off", () => {
    const { stack } = prod;
    const eventAgeOf = (fn: SchedulerFunction["fn"]) => {
      const configs = resourcesOfType(prod, "AWS::Lambda::EventInvokeConfig").filter(
        ([, config]) => referencedId(config.Properties?.FunctionName) === logicalIdOf(stack, fn),
      );
      expect(configs).toHaveLength(1);
      return Number(configs[0]?.[1].Properties?.MaximumEventAgeInSeconds);
    };
    const [target] = asArray(propertiesOf(prod, stack.dispatch.rule).Targets);
    const ruleEventAge = isObject(target) ? target.RetryPolicy : undefined;
    const ruleAgeSeconds = Number(
      isObject(ruleEventAge) ? ruleEventAge.MaximumEventAgeInSeconds : NaN,
    );
    const tickTimeout = Number(propertiesOf(prod, stack.dispatch.tick.fn).Timeout);
    const latestPassStartSeconds =
      ruleAgeSeconds +
      eventAgeOf(stack.dispatch.tick.fn) +
      tickTimeout +
      eventAgeOf(stack.dispatch.dispatcher.fn);
    expect(latestPassStartSeconds).toBeGreaterThan(0);
    const deploy = readFileSync(join(REPO_ROOT, "docs", "deploy.md"), "utf8");
    const section = deploy.split(/^### Restoring from a backup$/m)[1]?.split(/^###? /m)[0] ?? "";
    const stated = /at least (\d+) minutes and the dispatcher's timeout/.exec(
      section.replace(/\s+/g, " "),
    );
    expect(Number(stated?.[1]) * 60).toBeGreaterThanOrEqual(latestPassStartSeconds);
  });
});

describe("async targets", () => {
  it("tells the worker the API's URL, where async targets heartbeat and complete their runs", () => {
    const url = JSON.stringify(environmentOf(prod, "worker")[ENV.apiUrl]);
    expect(url).toContain(logicalIdOf(prod.stack, prod.stack.api.httpApi));
    expect(url).toContain("execute-api");
  });
});

describe("worker event sources", () => {
  function mappingsOf(synth: Synthesized, fnId: string) {
    return resourcesOfType(synth, "AWS::Lambda::EventSourceMapping")
      .map(([, r]) => r.Properties ?? {})
      .filter((p) => referencedId(p.FunctionName) === fnId);
  }

  it("has one per priority with ReportBatchItemFailures and more concurrency for higher priority", () => {
    const { stack } = prod;
    const mappings = mappingsOf(prod, logicalIdOf(stack, stack.worker.worker.fn));
    expect(mappings).toHaveLength(3);
    const concurrency: number[] = [];
    for (const priority of PRIORITIES) {
      const queueId = logicalIdOf(stack, stack.queues.work[priority]);
      const mapping = mappings.find((m) => referencedId(m.EventSourceArn) === queueId);
      expect(mapping, priority).toBeDefined();
      expect(mapping?.FunctionResponseTypes).toEqual(["ReportBatchItemFailures"]);
      expect(mapping?.BatchSize).toBe(10);
      const scaling = mapping?.ScalingConfig;
      concurrency.push(Number(isObject(scaling) ? scaling.MaximumConcurrency : Number.NaN));
    }
    const [high, normal, low] = concurrency;
    expect(high).toBeGreaterThan(normal ?? Number.NaN);
    expect(normal).toBeGreaterThan(low ?? Number.NaN);
    expect(low).toBeGreaterThanOrEqual(2);
    // The starvation guard: low keeps its share of the pool while high and normal are saturated.
    expect((low ?? 0) / ((high ?? 0) + (normal ?? 0) + (low ?? 0))).toBeGreaterThanOrEqual(
      prod.stack.settings.lowPriorityShare,
    );
  });

  it("feeds every DLQ to the DLQ consumer, also with partial batch responses", () => {
    const { stack } = prod;
    const mappings = mappingsOf(prod, logicalIdOf(stack, stack.worker.deadLetterConsumer.fn));
    expect(mappings.map((m) => referencedId(m.EventSourceArn)).sort()).toEqual(
      stack.queues.allDeadLetters.map((q) => logicalIdOf(stack, q)).sort(),
    );
    for (const mapping of mappings) {
      expect(mapping.FunctionResponseTypes).toEqual(["ReportBatchItemFailures"]);
    }
  });
});

describe("functions", () => {
  it.each(COMPONENTS)(
    "%s runs on nodejs22.x arm64 as an ESM bundle with a source map",
    (component) => {
      const fn = functionsOf(prod).find(([c]) => c === component)?.[1];
      if (!fn) throw new Error(component);
      const resource = resourceOf(prod, fn.fn);
      expect(resource.Properties?.Runtime).toBe("nodejs22.x");
      expect(resource.Properties?.Architectures).toEqual(["arm64"]);
      expect(resource.Properties?.Handler).toBe("index.handler");
      expect(resource.Properties?.LoggingConfig).toEqual({
        LogGroup: { Ref: logicalIdOf(prod.stack, fn.logGroup) },
      });
      expect(propertiesOf(prod, fn.logGroup).RetentionInDays).toBe(30);
      // Its code, an ESM bundle with a source map: synth-offline reads each function's bundle.
    },
  );

  it("logs each function to a group CloudFormation names, and docs/deploy.md finds it there, not at /aws/lambda/<function>", () => {
    for (const [component, fn] of functionsOf(prod)) {
      const logGroup = propertiesOf(prod, fn.logGroup);
      expect(logGroup.LogGroupName, component).toBeUndefined();
      expect(propertiesOf(prod, fn.fn).LoggingConfig, component).toEqual({
        LogGroup: { Ref: logicalIdOf(prod.stack, fn.logGroup) },
      });
    }
    const deploy = readFileSync(join(REPO_ROOT, "docs", "deploy.md"), "utf8");
    expect(deploy).not.toMatch(/aws logs tail \/aws\/lambda\//);
    expect(deploy).toContain("LoggingConfig.LogGroup");
  });

  it.each(COMPONENTS)("%s has every environment variable its handler's code reads", (component) => {
    const env = environmentOf(prod, component);
    const read = environmentReadBy(handlerEntry(component));
    // Set by the Lambda runtime, or only used to point the SDK at emulators.
    const providedByLambda = (name: string) => name.startsWith("AWS_");
    const missing = [...read.keys()].filter((name) => !providedByLambda(name) && !(name in env));
    expect(missing.map((name) => `${name} (read in ${read.get(name)?.join(", ")})`)).toEqual([]);
    // And nothing set that no code reads: a misspelt name would pass the check above.
    const readByLibraries = ["POWERTOOLS_SERVICE_NAME", "NODE_OPTIONS"];
    expect(Object.keys(env).filter((n) => !read.has(n) && !readByLibraries.includes(n))).toEqual(
      [],
    );
  });

  it("passes the settings from context to every engine function", () => {
    for (const component of COMPONENTS) {
      const env = environmentOf(prod, component);
      expect(env[ENV.shardCount], component).toBe("16");
      expect(env[ENV.maxShardCount], component).toBe("16");
      expect(env[ENV.lookaheadSeconds], component).toBe("240");
      expect(env[ENV.leaseSeconds], component).toBe("60");
      expect(env.POWERTOOLS_METRICS_NAMESPACE, component).toBe("Scheduler/prod");
      expect(env[ENV.queueHigh], component).toEqual({
        Ref: logicalIdOf(prod.stack, prod.stack.queues.work.high),
      });
    }
    expect(environmentOf(dev, "worker")[ENV.shardCount]).toBe("8");
  });

  it.each(COMPONENTS)(
    "%s publishes metrics under the service name the alarms expect",
    (component) => {
      expect(powertoolsServiceOf(handlerEntry(component))).toBe(SERVICE_NAMES[component]);
      expect(environmentOf(prod, component).POWERTOOLS_SERVICE_NAME).toBe(SERVICE_NAMES[component]);
    },
  );
});

/**
 * What each role may do is checked against what its handler really calls in
 * iam-conformance.test.ts; these are the rules every grant follows.
 */
describe("IAM", () => {
  /** Unbound: references read as `<unbound GetAtt Id.Arn>`, so only a literal `*` is a wildcard. */
  const unbound: Bindings = { partition: "aws", region: "r", account: "a", resources: new Map() };
  const grantsOf = (component: Component) =>
    grantsOfRole(prod, roleOfComponent(prod, component), unbound);

  it("grants no wildcard action and no wildcard resource, and no managed policies", () => {
    for (const component of COMPONENTS) {
      for (const grant of grantsOf(component)) {
        for (const action of grant.actions) expect(action, component).not.toContain("*");
        for (const resource of grant.resources) expect(resource, component).not.toContain("*");
      }
    }
    for (const [, role] of resourcesOfType(prod, "AWS::IAM::Role")) {
      expect(role.Properties?.ManagedPolicyArns).toBeUndefined();
      expect(role.Properties?.Policies).toBeUndefined();
    }
  });

  it("keeps the dispatcher off message visibility and the API off invoking functions", () => {
    const actions = (c: Component) => grantsOf(c).flatMap((grant) => grant.actions);
    expect(actions("dispatcher")).not.toContain("sqs:ChangeMessageVisibility");
    expect(actions("api")).not.toContain("lambda:InvokeFunction");
    // The webhook signing secrets: only the API (which hands them to their tenant) and the worker.
    const { stack } = prod;
    const secretIds = [stack.storage.webhookSecrets.table, stack.storage.webhookSecretsKey].map(
      (construct) => logicalIdOf(stack, construct),
    );
    for (const component of ["tick", "dispatcher", "dlq"] as const) {
      const resources = grantsOf(component).flatMap((grant) => grant.resources);
      expect(
        resources.filter((r) => secretIds.some((id) => r.includes(id))),
        component,
      ).toEqual([]);
    }
    for (const component of ["api", "worker"] as const) {
      const resources = grantsOf(component).flatMap((grant) => grant.resources);
      for (const id of secretIds)
        expect(
          resources.some((r) => r.includes(id)),
          component,
        ).toBe(true);
    }
    expect(actions("dlq")).not.toContain("sqs:SendMessage");
  });

  it("lets the API and the worker use the webhook secrets key only through DynamoDB, in the partition deployed to", () => {
    // kms:ViaService names the service's endpoint host, whose suffix is the partition's (China's
    // amazonaws.com.cn): a literal amazonaws.com there matches no call, and the key is refused.
    const { stack } = prod;
    const keyId = logicalIdOf(stack, stack.storage.webhookSecretsKey);
    const viaServiceIn = (component: Component, partition: string, region: string) =>
      grantsOfRole(prod, roleOfComponent(prod, component), { ...unbound, partition, region })
        .filter((grant) => grant.resources.some((resource) => resource.includes(keyId)))
        .map((grant) => {
          const condition = isObject(grant.condition) ? grant.condition.StringEquals : undefined;
          const via = isObject(condition) ? condition["kms:ViaService"] : undefined;
          expect(JSON.stringify(via), component).toContain('{"Ref":"AWS::URLSuffix"}');
          return resolveValue(via, { ...unbound, partition, region });
        });
    for (const component of ["api", "worker"] as const) {
      expect(viaServiceIn(component, "aws", "eu-west-1"), component).toEqual([
        "dynamodb.eu-west-1.amazonaws.com",
      ]);
      expect(viaServiceIn(component, "aws-cn", "cn-north-1"), component).toEqual([
        "dynamodb.cn-north-1.amazonaws.com.cn",
      ]);
    }
  });
});

describe("API", () => {
  it("authorizes every API route with IAM by default, throttles and access-logs the stage", () => {
    const routes = resourcesOfType(prod, "AWS::ApiGatewayV2::Route");
    expect(routes.length).toBeGreaterThan(0);
    const open: string[] = [];
    const authorized: string[] = [];
    for (const [, route] of routes) {
      // Scopes only with jwtScopes, which needs the JWT authorizer.
      expect(route.Properties?.AuthorizationScopes).toBeUndefined();
      if (route.Properties?.AuthorizationType === "NONE")
        open.push(String(route.Properties.RouteKey));
      else {
        expect(route.Properties?.AuthorizationType).toBe("AWS_IAM");
        authorized.push(String(route.Properties?.RouteKey));
      }
    }
    // API Gateway throttles each route apart (the stage's default route settings are a bucket per
    // route): every authenticated call shares the one `$default` route's rate, and no public route
    // can spend it. docs/deploy.md (`apiRateLimit`) says so.
    expect(authorized).toEqual(["$default"]);
    // Only the console's page and bundle, the API reference, the OpenAPI document and the health
    // check, which hold no data, and an async target's run routes, which authenticate by the run
    // token in the function.
    expect(open.sort()).toEqual([
      "GET /console",
      "GET /console/{proxy+}",
      "GET /docs",
      "GET /health",
      "GET /openapi.json",
      "HEAD /console",
      "HEAD /console/{proxy+}",
      "HEAD /docs",
      "HEAD /health",
      "HEAD /openapi.json",
      "POST /runs/{runId}/complete",
      "POST /runs/{runId}/heartbeat",
    ]);
    const stage = propertiesOf(prod, prod.stack.api.stage);
    expect(stage.StageName).toBe("$default");
    expect(stage.DefaultRouteSettings).toEqual({
      ThrottlingBurstLimit: 200,
      ThrottlingRateLimit: 100,
    });
    // No route has limits of its own: each takes the default settings as its own bucket.
    expect(stage.RouteSettings).toBeUndefined();
    expect(
      isObject(stage.AccessLogSettings) && stage.AccessLogSettings.DestinationArn,
    ).toBeTruthy();
  });

  it("answers GET and HEAD on every public path without credentials, as the local server does", () => {
    const routes = new Map(
      resourcesOfType(prod, "AWS::ApiGatewayV2::Route").map(([, route]) => [
        String(route.Properties?.RouteKey),
        route.Properties ?? {},
      ]),
    );
    const apiFunctionId = logicalIdOf(prod.stack, prod.stack.api.handler.fn);
    /** The function a route's integration invokes (Target is `integrations/<integration id>`). */
    const functionOf = (route: Record<string, Json> | undefined) => {
      const join = isObject(route?.Target) ? asArray(route.Target["Fn::Join"]) : [];
      const integrationId = asArray(join[1])
        .map(referencedId)
        .find((id) => id !== null);
      const integration = integrationId ? prod.resources[integrationId] : undefined;
      expect(integration?.Type).toBe("AWS::ApiGatewayV2::Integration");
      return referencedId(integration?.Properties?.IntegrationUri);
    };
    const publicPaths = ["/console", "/console/{proxy+}", "/docs", "/health", "/openapi.json"];
    for (const key of publicPaths.flatMap((path) => [`GET ${path}`, `HEAD ${path}`])) {
      const route = routes.get(key);
      expect(route?.AuthorizationType, key).toBe("NONE");
      expect(route?.AuthorizerId, key).toBeUndefined();
      expect(functionOf(route), key).toBe(apiFunctionId);
    }
    // Every other request still meets the authorizer, on the API function too.
    const fallback = routes.get("$default");
    expect(fallback?.AuthorizationType).toBe("AWS_IAM");
    expect(functionOf(fallback)).toBe(apiFunctionId);
  });
});

describe("observability", () => {
  function alarms(synth: Synthesized) {
    return resourcesOfType(synth, "AWS::CloudWatch::Alarm").map(([, r]) => r.Properties ?? {});
  }
  /** Every metric an alarm reads, directly or through a math expression. */
  function alarmMetrics(alarm: Record<string, Json>): Record<string, Json>[] {
    const stats = asArray(alarm.Metrics).flatMap((m) =>
      isObject(m) && isObject(m.MetricStat) && isObject(m.MetricStat.Metric)
        ? [m.MetricStat.Metric]
        : [],
    );
    return alarm.MetricName ? [alarm] : stats;
  }
  const dimension = (metric: Record<string, Json>, name: string) =>
    asArray(metric.Dimensions).find((d) => isObject(d) && d.Name === name);

  it("alarms on every DLQ and on the async-failures queue", () => {
    const { stack } = prod;
    for (const queue of [...stack.queues.allDeadLetters, stack.queues.asyncFailures]) {
      const queueName = { "Fn::GetAtt": [logicalIdOf(stack, queue), "QueueName"] };
      const watching = alarms(prod).filter((alarm) =>
        alarmMetrics(alarm).some(
          (m) =>
            m.Namespace === "AWS/SQS" &&
            JSON.stringify(dimension(m, "QueueName")) ===
              JSON.stringify({ Name: "QueueName", Value: queueName }),
        ),
      );
      expect(watching.length, queue.node.path).toBeGreaterThan(0);
    }
  });

  /**
   * A DLQ alarm's state minute by minute for a DLQ whose per-minute SQS metrics are as given,
   * its math expression (FILL(id, 0) terms added) evaluated as CloudWatch does over one period.
   */
  function dlqAlarmStates(alarm: Record<string, Json>, minutes: Record<string, number>[]) {
    const metricNames = new Map<string, string>();
    let expression = "";
    for (const m of asArray(alarm.Metrics)) {
      if (!isObject(m)) continue;
      if (typeof m.Expression === "string") expression = m.Expression;
      else if (isObject(m.MetricStat) && isObject(m.MetricStat.Metric)) {
        metricNames.set(String(m.Id), String(m.MetricStat.Metric.MetricName));
      }
    }
    expect(alarm.ComparisonOperator).toBe("GreaterThanOrEqualToThreshold");
    expect(alarm.EvaluationPeriods).toBe(1);
    return minutes.map((values) => {
      const terms = expression.split("+").map((term) => {
        const id = /^\s*FILL\((\w+), 0\)\s*$/.exec(term)?.[1];
        const name = metricNames.get(id ?? "");
        if (name === undefined) throw new Error(`not a FILL(id, 0) term: ${term}`);
        return values[name] ?? 0;
      });
      const value = terms.reduce((sum, v) => sum + v, 0);
      return value >= Number(alarm.Threshold) ? "ALARM" : "OK";
    });
  }

  it("keeps a DLQ alarm in ALARM while the DLQ consumer keeps failing on a message, and lets it go to OK once one is handled", () => {
    const visibility = Number(
      propertiesOf(prod, prod.stack.queues.deadLetters.high).VisibilityTimeout,
    );
    expect(visibility % 60).toBe(0);
    const comesBackEvery = visibility / 60;
    // The consumer receives the message within seconds of its being visible, fails it, and it
    // stays in flight a visibility timeout (3 minutes), then again, for as long as it fails.
    const failing = Array.from({ length: 4 * comesBackEvery }, (_, minute) => ({
      NumberOfMessagesReceived: minute % comesBackEvery === 0 ? 1 : 0,
      ApproximateNumberOfMessagesVisible: 0,
      ApproximateNumberOfMessagesNotVisible: 1,
    }));
    // Handled at once: received and deleted in the first minute, nothing after.
    const handled = [
      {
        NumberOfMessagesReceived: 1,
        ApproximateNumberOfMessagesVisible: 0,
        ApproximateNumberOfMessagesNotVisible: 1,
      },
      ...Array.from({ length: 3 }, () => ({
        NumberOfMessagesReceived: 0,
        ApproximateNumberOfMessagesVisible: 0,
        ApproximateNumberOfMessagesNotVisible: 0,
      })),
    ];
    const byId = new Map(prod.stack.observability.alarms.map((a) => [a.node.id, a]));
    for (const priority of PRIORITIES) {
      const construct = byId.get(`DeadLetterQueue-${priority}`);
      if (construct === undefined) throw new Error(`no DeadLetterQueue-${priority} alarm`);
      const alarm = propertiesOf(prod, construct);
      // Notified at each change of state: a flapping alarm e-mails ALARM and OK every 3 minutes.
      expect(dlqAlarmStates(alarm, failing), priority).toEqual(failing.map(() => "ALARM"));
      expect(dlqAlarmStates(alarm, handled), priority).toEqual(["ALARM", "OK", "OK", "OK"]);
    }
  });

  it("alarms on dead runs, set-aside due entries, p99 scheduling lag, dispatcher and worker errors, and queue age", () => {
    const all = alarms(prod);
    const engine = (name: string) =>
      all.filter((a) =>
        alarmMetrics(a).some((m) => m.MetricName === name && m.Namespace === "Scheduler/prod"),
      );
    const dead = engine(METRICS.runOutcome);
    expect(dead).toHaveLength(1);
    const deadMetrics = alarmMetrics(dead[0] ?? {});
    expect(deadMetrics.map((m) => dimension(m, "service"))).toEqual([
      { Name: "service", Value: SERVICE_NAMES.worker },
      { Name: "service", Value: SERVICE_NAMES.dlq },
      { Name: "service", Value: SERVICE_NAMES.api },
    ]);
    expect(deadMetrics.every((m) => JSON.stringify(dimension(m, "status")).includes("DEAD"))).toBe(
      true,
    );
    const setAside = engine(METRICS.dueEntryFailures).flatMap(alarmMetrics);
    expect(setAside.map((m) => [dimension(m, "service"), dimension(m, "handling")])).toEqual([
      [
        { Name: "service", Value: SERVICE_NAMES.dispatcher },
        { Name: "handling", Value: "set-aside" },
      ],
      [
        { Name: "service", Value: SERVICE_NAMES.dispatcher },
        { Name: "handling", Value: "refiled" },
      ],
    ]);
    const lag = engine(METRICS.schedulingLagMs);
    expect(lag.map((a) => [a.ExtendedStatistic, a.Threshold])).toEqual([["p99", 5000]]);
    const errorsOf = (fn: SchedulerFunction) =>
      all.filter((a) =>
        alarmMetrics(a).some(
          (m) =>
            m.MetricName === "Errors" &&
            JSON.stringify(dimension(m, "FunctionName")).includes(logicalIdOf(prod.stack, fn.fn)),
        ),
      );
    expect(errorsOf(prod.stack.dispatch.dispatcher)).toHaveLength(1);
    expect(errorsOf(prod.stack.worker.worker)).toHaveLength(1);
    const age = all.filter((a) => a.MetricName === "ApproximateAgeOfOldestMessage");
    expect(age).toHaveLength(3);
  });

  it("alarms on the dead runs of every function that records run outcomes (an async target's completion ends runs in the API)", () => {
    const recorders = COMPONENTS.filter(
      (component) =>
        filesOfHandlerMentioning(handlerEntry(component), "METRICS.runOutcome").length > 0,
    );
    // The worker ends runs, the DLQ consumer marks crashed ones DEAD, and the API records what
    // an async target reports (retries exhausted or not retryable: DEAD) and its timeouts.
    expect(recorders.sort()).toEqual(["api", "dlq", "worker"]);
    const [dead, ...more] = alarms(prod).filter((a) =>
      alarmMetrics(a).some((m) => m.MetricName === METRICS.runOutcome),
    );
    expect(more).toEqual([]);
    const watched = alarmMetrics(dead ?? {})
      .filter((m) => JSON.stringify(dimension(m, "status")).includes("DEAD"))
      .map((m) => JSON.stringify(dimension(m, "service")));
    expect(watched.sort()).toEqual(
      recorders
        .map((component) => JSON.stringify({ Name: "service", Value: SERVICE_NAMES[component] }))
        .sort(),
    );
  });

  it("alarms on the scheduling lag of every function that records it: the worker, where runs start, async ones included", () => {
    const recorders = COMPONENTS.filter(
      (component) =>
        filesOfHandlerMentioning(handlerEntry(component), "METRICS.schedulingLagMs").length > 0,
    );
    // An async run ends in the API, maybe hours after it started: its lag is recorded by the
    // worker that started it and handed it over, so that one metric holds every run's.
    expect(recorders).toEqual(["worker"]);
    const [lag, ...more] = alarms(prod).filter((a) =>
      alarmMetrics(a).some((m) => m.MetricName === METRICS.schedulingLagMs),
    );
    expect(more).toEqual([]);
    expect(alarmMetrics(lag ?? {}).map((m) => dimension(m, "service"))).toEqual(
      recorders.map((component) => ({ Name: "service", Value: SERVICE_NAMES[component] })),
    );
  });

  /** The alarms on one of the tick's metrics: what each reads, and when it fires. */
  const tickAlarmsOn = (metricName: string) =>
    alarms(prod)
      .filter((a) => a.MetricName === metricName)
      .map((a) => [
        a.Namespace,
        dimension(a, "service"),
        a.Statistic,
        a.Period,
        a.Threshold,
        a.ComparisonOperator,
        `${a.DatapointsToAlarm} of ${a.EvaluationPeriods}`,
        a.TreatMissingData,
      ]);
  // A lost run's re-send 5 minutes late either way. A shard's reads are left unread past ⌈S ÷ K⌉ − 1
  // ticks only when a tick reaches under a sixth of the shards, or when one shard holds more than
  // the passes deal with, or its reads fail or its first read outlasts the tick's time each time.
  // A tick that does not run sends neither: TickNotRunning.
  it.each([
    [
      "the reaper's reading stands minutes behind (a lost run re-sent that much late)",
      METRICS.reaperBehindMs,
      "3 of 5",
    ],
    [
      "a shard goes unread by the reaper for minutes (its lost runs re-sent that much late, or never)",
      METRICS.reaperLongestUnreadMs,
      "2 of 2",
    ],
  ])("alarms when %s", (_, metricName, datapoints) => {
    expect(tickAlarmsOn(metricName)).toEqual([
      [
        "Scheduler/prod",
        { Name: "service", Value: SERVICE_NAMES.tick },
        "Maximum",
        60,
        300_000,
        "GreaterThanThreshold",
        datapoints,
        "notBreaching",
      ],
    ]);
  });

  it("alarms on a lost fence: a worker's run taken over by another start, a dispatcher's shard lease by another pass", () => {
    // Each is something gone wrong that no other alarm sees: a run ran twice at once (its worker
    // stalled past its lease), or a pass outran its shard's lease.
    const recorders = COMPONENTS.filter(
      (component) =>
        filesOfHandlerMentioning(handlerEntry(component), "METRICS.fenceLost").length > 0,
    );
    expect(recorders.sort()).toEqual(["dispatcher", "worker"]);
    const [lost, ...more] = alarms(prod).filter((a) =>
      alarmMetrics(a).some((m) => m.MetricName === METRICS.fenceLost),
    );
    expect(more).toEqual([]);
    expect(
      alarmMetrics(lost ?? {})
        .map((m) =>
          JSON.stringify([m.Namespace, dimension(m, "service"), dimension(m, "component")]),
        )
        .sort(),
    ).toEqual(
      recorders
        .map((component) =>
          JSON.stringify([
            "Scheduler/prod",
            { Name: "service", Value: SERVICE_NAMES[component] },
            { Name: "component", Value: component },
          ]),
        )
        .sort(),
    );
    expect([lost?.Threshold, lost?.ComparisonOperator, lost?.TreatMissingData]).toEqual([
      1,
      "GreaterThanOrEqualToThreshold",
      "notBreaching",
    ]);
  });

  it("alarms on Lambda throttling any of the functions, in 3 of 5 minutes (the account's concurrency used up)", () => {
    // A throttled worker starts no run, so the lag alarm, which reads started runs, has nothing
    // to see; the queue-age alarm fires only past a claim's reach and a worker timeout.
    const throttles = alarms(prod).filter((a) =>
      alarmMetrics(a).some((m) => m.Namespace === "AWS/Lambda" && m.MetricName === "Throttles"),
    );
    expect(throttles).toHaveLength(1);
    const [alarm] = throttles;
    expect(
      alarmMetrics(alarm ?? {})
        .map((m) => {
          const name = dimension(m, "FunctionName");
          return isObject(name) ? referencedId(name.Value) : null;
        })
        .sort(),
    ).toEqual(
      functionsOf(prod)
        .map(([, fn]) => logicalIdOf(prod.stack, fn.fn))
        .sort(),
    );
    expect([
      alarm?.Threshold,
      alarm?.ComparisonOperator,
      alarm?.EvaluationPeriods,
      alarm?.DatapointsToAlarm,
      alarm?.TreatMissingData,
    ]).toEqual([1, "GreaterThanOrEqualToThreshold", 5, 3, "notBreaching"]);
  });

  it("alarms on the API's server errors (5xx) but its busy answers (BusyAnswers), in 3 of 5 minutes", () => {
    const apiId = { Ref: logicalIdOf(prod.stack, prod.stack.api.httpApi) };
    const serverErrors = alarms(prod).filter((a) =>
      alarmMetrics(a).some((m) => m.Namespace === "AWS/ApiGateway" && m.MetricName === "5xx"),
    );
    expect(serverErrors).toHaveLength(1);
    const [alarm] = serverErrors;
    const [gateway] = alarmMetrics(alarm ?? {}).filter((m) => m.Namespace === "AWS/ApiGateway");
    expect(dimension(gateway ?? {}, "ApiId")).toEqual({ Name: "ApiId", Value: apiId });
    // A tenant racing its own requests is answered 503 busy: API Gateway counts those as 5xx, and
    // the alarm takes away what the API counted of them.
    const busy = alarmMetrics(alarm ?? {}).find((m) => m.MetricName === METRICS.busyAnswers);
    expect(busy?.Dimensions).toEqual([{ Name: "service", Value: SERVICE_NAMES.api }]);
    const expressions = asArray(alarm?.Metrics).flatMap((m) =>
      isObject(m) && typeof m.Expression === "string" ? [m.Expression] : [],
    );
    expect(expressions).toEqual(["errors - FILL(busy, 0)"]);
    expect([
      alarm?.Threshold,
      alarm?.ComparisonOperator,
      alarm?.EvaluationPeriods,
      alarm?.DatapointsToAlarm,
      alarm?.TreatMissingData,
    ]).toEqual([1, "GreaterThanOrEqualToThreshold", 5, 3, "notBreaching"]);
  });

  it("alarms on each table's throttling, its indexes' included, in 3 of 5 minutes", () => {
    const { stack } = prod;
    const tables = [
      ["Jobs", stack.storage.jobs, jobsTableDefinition("jobs")],
      ["Runs", stack.storage.runs, runsTableDefinition("runs")],
      ["WebhookSecrets", stack.storage.webhookSecrets, webhookSecretsTableDefinition("w")],
    ] as const;
    const throttling = alarms(prod).filter((a) =>
      alarmMetrics(a).some((m) => m.Namespace === "AWS/DynamoDB"),
    );
    expect(throttling).toHaveLength(tables.length);
    const topicId = logicalIdOf(stack, stack.observability.topic);
    for (const [id, declared, definition] of tables) {
      const construct = stack.observability.alarms.find(
        (a) => a.node.id === `DynamoThrottles-${id}`,
      );
      if (construct === undefined) throw new Error(`no alarm DynamoThrottles-${id}`);
      const alarm = propertiesOf(prod, construct);
      const tableName = { Name: "TableName", Value: { Ref: logicalIdOf(stack, declared.table) } };
      // The table's reads and writes, and every index's: an index's events are not the table's.
      const indexes = (definition.GlobalSecondaryIndexes ?? []).map((index) => index.IndexName);
      expect(declared.indexNames, id).toEqual(indexes);
      const watched = alarmMetrics(alarm).map((m) =>
        JSON.stringify([
          m.Namespace,
          m.MetricName,
          dimension(m, "TableName"),
          dimension(m, "GlobalSecondaryIndexName") ?? null,
          asArray(m.Dimensions).length,
        ]),
      );
      const expected = [null, ...indexes].flatMap((index) =>
        ["ReadThrottleEvents", "WriteThrottleEvents"].map((metric) =>
          JSON.stringify([
            "AWS/DynamoDB",
            metric,
            tableName,
            index === null ? null : { Name: "GlobalSecondaryIndexName", Value: index },
            index === null ? 1 : 2,
          ]),
        ),
      );
      expect(watched.sort(), id).toEqual(expected.sort());
      // Each a per-minute sum, and the alarm reads their sum, a metric with no data (DynamoDB
      // sends none for a minute without throttling) as 0.
      const queries = asArray(alarm.Metrics).filter(isObject);
      const stats = queries.flatMap((m) =>
        isObject(m.MetricStat) ? [[m.Id, m.MetricStat.Stat, m.MetricStat.Period]] : [],
      );
      expect(
        stats.every(([, stat, period]) => stat === "Sum" && period === 60),
        id,
      ).toBe(true);
      const [expression, ...others] = queries.filter((m) => m.Expression !== undefined);
      expect(others, id).toEqual([]);
      expect(String(expression?.Expression).split(" + ").sort(), id).toEqual(
        stats.map(([metricId]) => `FILL(${String(metricId)}, 0)`).sort(),
      );
      expect(
        [
          alarm.Threshold,
          alarm.ComparisonOperator,
          alarm.EvaluationPeriods,
          alarm.DatapointsToAlarm,
          alarm.TreatMissingData,
        ],
        id,
      ).toEqual([1, "GreaterThanOrEqualToThreshold", 5, 3, "notBreaching"]);
      expect(asArray(alarm.AlarmActions).map(referencedId), id).toEqual([topicId]);
      expect(asArray(alarm.OKActions).map(referencedId), id).toEqual([topicId]);
      // The description names the table as deployed.
      expect(JSON.stringify(alarm.AlarmDescription), id).toContain(JSON.stringify(tableName.Value));
    }
  });

  it("docs/deploy.md counts the alarms and the metrics they read, and prices them", () => {
    const all = alarms(prod);
    const metrics = all.reduce((sum, alarm) => sum + alarmMetrics(alarm).length, 0);
    const deploy = readFileSync(join(REPO_ROOT, "docs", "deploy.md"), "utf8");
    // Standard-resolution alarms cost $0.10 a month per metric they read.
    const stated = /(\d+) alarms over (\d+) metrics \(~\$(\d+\.\d\d)\)/.exec(deploy);
    expect(stated?.slice(1)).toEqual([
      String(all.length),
      String(metrics),
      (metrics * 0.1).toFixed(2),
    ]);
  });

  /**
   * The operator paged at night has the alarm's name (its construct id is in it) and docs/deploy.md:
   * each alarm the stack makes has a row in its "Alarms" table saying what it means, where to look
   * and what to do, and no row names an alarm the stack no longer makes.
   */
  it("docs/deploy.md's alarm table says, for every alarm the stack makes, what it means and what to do", () => {
    const ids = prod.stack.observability.alarms.map((alarm) => alarm.node.id);
    expect(ids).toHaveLength(alarms(prod).length);
    const deploy = readFileSync(join(REPO_ROOT, "docs", "deploy.md"), "utf8");
    const section = deploy.split(/^### Alarms$/m)[1]?.split(/^###? /m)[0] ?? "";
    const rows = section
      .split("\n")
      .filter((line) => /^\| `[^`]+` +\|/.test(line))
      .map((line) => line.split("|").map((cell) => cell.trim()))
      .map(([, alarm = "", means = "", look = "", act = ""]) => ({ alarm, means, look, act }));
    // `DeadLetterQueue-<priority>` stands for the alarm of each priority.
    const matches = (cell: string, id: string) =>
      new RegExp(
        `^${cell
          .slice(1, -1)
          .split(/<[a-z]+>/)
          .map((part) => part.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"))
          .join("[A-Za-z]+")}$`,
      ).test(id);
    const undocumented = ids.filter((id) => !rows.some((row) => matches(row.alarm, id)));
    expect(undocumented).toEqual([]);
    const stale = rows.filter((row) => !ids.some((id) => matches(row.alarm, id)));
    expect(stale.map((row) => row.alarm)).toEqual([]);
    for (const row of rows) {
      expect(row.means.length, `${row.alarm}: what it means`).toBeGreaterThan(40);
      expect(row.look.length, `${row.alarm}: where to look`).toBeGreaterThan(20);
      expect(row.act.length, `${row.alarm}: what to do`).toBeGreaterThan(40);
    }
  });

  it("keeps the alarm topic's logical id: a new topic would drop its subscriptions", () => {
    // A replaced topic loses every subscription: the alarmEmail one is made again but waits for
    // its confirmation, and one an operator made by hand (the synth warning suggests it) is gone,
    // so the alarms would reach no one without a word.
    expect(logicalIdOf(prod.stack, prod.stack.observability.topic)).toBe(
      "ObservabilityAlarmTopicF724909D",
    );
    expect(resourcesOfType(prod, "AWS::SNS::Topic").map(([id]) => id)).toEqual([
      "ObservabilityAlarmTopicF724909D",
    ]);
  });

  it("sends every alarm to the topic, and the e-mail or given topic when configured", () => {
    const topicId = logicalIdOf(prod.stack, prod.stack.observability.topic);
    for (const alarm of alarms(prod)) {
      expect(asArray(alarm.AlarmActions).map(referencedId)).toEqual([topicId]);
    }
  });

  it("lets CloudWatch publish this stack's alarms to the topic it creates, and nothing else in", () => {
    // A topic policy replaces SNS's default one, which let the account (and so its alarms)
    // publish; the topic's own (enforceSSL's Deny) would leave the alarms no Allow: each one's
    // notification fails ("not authorized to perform: SNS:Publish"), seen only in alarm history.
    const topicId = logicalIdOf(prod.stack, prod.stack.observability.topic);
    const bindings: Bindings = {
      partition: "aws",
      region: "eu-west-1",
      account: "123456789012",
      resources: new Map([
        [topicId, { ref: "arn:aws:sns:eu-west-1:123456789012:alarms", attributes: {} }],
      ]),
    };
    const statements = resourcesOfType(prod, "AWS::SNS::TopicPolicy")
      .filter(([, policy]) =>
        asArray(policy.Properties?.Topics).map(referencedId).includes(topicId),
      )
      .flatMap(([, policy]) => {
        const document = policy.Properties?.PolicyDocument;
        return asArray(isObject(document) ? document.Statement : undefined).filter(isObject);
      });
    const alarmArn = "arn:aws:cloudwatch:eu-west-1:123456789012:alarm:Scheduler-prod-DeadRuns";
    const otherAccountAlarm = "arn:aws:cloudwatch:eu-west-1:999999999999:alarm:x";
    const allowsPublish = (sourceArn: string) =>
      statements.some((statement) => {
        const principal = isObject(statement.Principal) ? statement.Principal.Service : undefined;
        const condition = isObject(statement.Condition) ? statement.Condition : {};
        const arnLike = isObject(condition.ArnLike)
          ? condition.ArnLike["aws:SourceArn"]
          : undefined;
        return (
          statement.Effect === "Allow" &&
          asArray(principal).includes("cloudwatch.amazonaws.com") &&
          asArray(statement.Action).includes("sns:Publish") &&
          asArray(statement.Resource).some(
            (r) => resolveValue(r, bindings) === "arn:aws:sns:eu-west-1:123456789012:alarms",
          ) &&
          Object.keys(condition).every((operator) => operator === "ArnLike") &&
          arnLike !== undefined &&
          new RegExp(
            `^${resolveValue(arnLike, bindings).replace(/[.]/g, "\\.").replace(/\*/g, ".*")}$`,
          ).test(sourceArn)
        );
      });
    expect(allowsPublish(alarmArn)).toBe(true);
    expect(allowsPublish(otherAccountAlarm)).toBe(false);
  });

  it("draws the dashboard from the engine's metrics", () => {
    const [[, dashboard] = ["", undefined]] = resourcesOfType(prod, "AWS::CloudWatch::Dashboard");
    const body = JSON.stringify(dashboard?.Properties?.DashboardBody);
    for (const name of [
      METRICS.schedulingLagMs,
      METRICS.runOutcome,
      METRICS.reaperResends,
      METRICS.leaseTakeovers,
      METRICS.startsGivenBack,
      "ApproximateNumberOfMessagesVisible",
      "ApproximateAgeOfOldestMessage",
      "ReadThrottleEvents",
      "WriteThrottleEvents",
      "GlobalSecondaryIndexName",
    ]) {
      expect(body, name).toContain(name);
    }
    // The lease takeovers' SEARCH names the namespace quoted, as CloudWatch asks of a name with
    // characters other than letters and digits (a metricsNamespace may hold - _ . # :).
    expect(body).toMatch(/SEARCH\('\{\\*"Scheduler\/prod\\*",service,shard\}/);
  });

  it("counts runs, lag, late starts and throttles per tenant with Contributor Insights rules over the worker's, the DLQ consumer's and the API's logs", () => {
    const { stack } = prod;
    /** A rule body as written: its Fn::Join parts, a reference standing in as `<LogicalId>`. */
    const bodyOf = (rule: Record<string, Json>) => {
      const body = rule.RuleBody;
      if (typeof body === "string") return JSON.parse(body) as Record<string, unknown>;
      const join = isObject(body) ? body["Fn::Join"] : undefined;
      const parts = Array.isArray(join) ? asArray(join[1]) : [];
      const text = parts.map((part) =>
        typeof part === "string" ? part : `<${referencedId(part)}>`,
      );
      return JSON.parse(text.join("")) as Record<string, unknown>;
    };
    const rules = resourcesOfType(prod, "AWS::CloudWatch::InsightRule").map(
      ([, r]) => r.Properties ?? {},
    );
    const byName = new Map(rules.map((r) => [String(r.RuleName).split("-").at(-1), r]));
    expect([...byName.keys()].sort()).toEqual([
      "TenantLag",
      "TenantLateStarts",
      "TenantRuns",
      "TenantThrottles",
    ]);
    const logGroup = (fn: SchedulerFunction) => [`<${logicalIdOf(stack, fn.logGroup)}>`];
    // Runs end in the worker, in the DLQ consumer when they crashed every worker, and in the API
    // when an async target completes them.
    const worker = [
      ...logGroup(stack.worker.worker),
      ...logGroup(stack.worker.deadLetterConsumer),
      ...logGroup(stack.api.handler),
    ];
    const runFinished = { Match: "$.message", In: [TENANT_LOG_EVENTS.runFinished] };
    const expected = {
      TenantRuns: {
        LogGroupNames: worker,
        Contribution: { Keys: ["$.tenantId", "$.status"], Filters: [runFinished] },
        AggregateOn: "Count",
      },
      TenantLag: {
        LogGroupNames: worker,
        Contribution: { Keys: ["$.tenantId"], ValueOf: "$.lagMs", Filters: [runFinished] },
        AggregateOn: "Sum",
      },
      TenantLateStarts: {
        LogGroupNames: worker,
        Contribution: {
          Keys: ["$.tenantId"],
          Filters: [runFinished, { Match: "$.lagMs", GreaterThan: 5000 }],
        },
        AggregateOn: "Count",
      },
      TenantThrottles: {
        LogGroupNames: logGroup(stack.api.handler),
        Contribution: {
          Keys: ["$.tenantId", "$.code"],
          Filters: [{ Match: "$.message", In: [TENANT_LOG_EVENTS.requestThrottled] }],
        },
        AggregateOn: "Count",
      },
    };
    for (const [name, want] of Object.entries(expected)) {
      const rule = byName.get(name) ?? {};
      expect(rule.RuleState, name).toBe("ENABLED");
      expect(bodyOf(rule), name).toEqual({
        Schema: { Name: "CloudWatchLogRule", Version: 1 },
        LogFormat: "JSON",
        ...want,
      });
    }
  });

  it("README's How it works counts the functions, tables and queues the stack deploys", () => {
    const readme = readFileSync(join(REPO_ROOT, "README.md"), "utf8");
    const stated =
      /deploys API Gateway and (\w+) Lambdas over (\w+) DynamoDB tables and (\w+) SQS\s+queues/.exec(
        readme,
      );
    const words = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"];
    expect(stated?.slice(1).map((word) => words.indexOf(word))).toEqual(
      ["AWS::Lambda::Function", "AWS::DynamoDB::Table", "AWS::SQS::Queue"].map(
        (type) => resourcesOfType(prod, type).length,
      ),
    );
  });

  it("outputs the API URL, table names, queue URLs and dashboard URL", () => {
    const outputs = Object.keys(prod.template.findOutputs("*"));
    expect(outputs).toEqual(
      expect.arrayContaining([
        "ApiUrl",
        "JobsTableName",
        "RunsTableName",
        "QueueUrlHigh",
        "QueueUrlNormal",
        "QueueUrlLow",
        "DashboardUrl",
      ]),
    );
  });

  it("gives the dashboard's URL on the console of the partition it is deployed in", () => {
    // China and GovCloud have consoles of their own: the commercial one's URL signs in nowhere.
    const template: JsonObject = prod.template.toJSON();
    const outputs = isObject(template.Outputs) ? template.Outputs : {};
    const dashboardUrl = isObject(outputs.DashboardUrl) ? outputs.DashboardUrl.Value : undefined;
    const dashboardId = logicalIdOf(prod.stack, prod.stack.observability.dashboard);
    const urlIn = (partition: string, region: string) =>
      resolveValue(dashboardUrl, {
        partition,
        region,
        account: "123456789012",
        resources: new Map([[dashboardId, { ref: "Scheduler-prod", attributes: {} }]]),
        conditions: isObject(template.Conditions) ? template.Conditions : {},
      });
    const path = (region: string) =>
      `/cloudwatch/home?region=${region}#dashboards:name=Scheduler-prod`;
    expect(urlIn("aws", "eu-west-1")).toBe(
      `https://eu-west-1.console.aws.amazon.com${path("eu-west-1")}`,
    );
    expect(urlIn("aws-cn", "cn-north-1")).toBe(`https://console.amazonaws.cn${path("cn-north-1")}`);
    expect(urlIn("aws-us-gov", "us-gov-west-1")).toBe(
      `https://console.amazonaws-us-gov.com${path("us-gov-west-1")}`,
    );
  });
});

describe("a deploy over a live stage", () => {
  /** Every resource CloudFormation must have created or updated before `id`'s own update. */
  function updatedBefore(synth: Synthesized, id: string): Set<string> {
    const direct = (resourceId: string): string[] => {
      const resource = synth.resources[resourceId];
      if (!resource) return [];
      const found: string[] = [];
      const walk = (value: Json | undefined): void => {
        const referenced = referencedId(value);
        if (referenced !== null) found.push(referenced);
        else if (Array.isArray(value)) for (const item of value) walk(item);
        else if (isObject(value)) for (const item of Object.values(value)) walk(item);
      };
      walk(resource.Properties);
      const dependsOn = resource.DependsOn ?? [];
      found.push(...(typeof dependsOn === "string" ? [dependsOn] : dependsOn));
      return found.filter((other) => synth.resources[other] !== undefined);
    };
    const seen = new Set<string>();
    const pending = [id];
    for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
      for (const other of direct(next)) {
        if (!seen.has(other)) {
          seen.add(other);
          pending.push(other);
        }
      }
    }
    return seen;
  }

  it("updates the API function after the worker, the DLQ consumer, the dispatcher and the tick", () => {
    // Only the API makes what an earlier engine cannot run (an `after` job, an async target):
    // updated last, it takes them only once new code runs every run, claim and dead letter.
    for (const synth of [prod, dev]) {
      const { stack } = synth;
      const before = updatedBefore(synth, logicalIdOf(stack, stack.api.handler.fn));
      for (const engineFunction of [
        stack.worker.worker,
        stack.worker.deadLetterConsumer,
        stack.dispatch.dispatcher,
        stack.dispatch.tick,
      ]) {
        expect(before).toContain(logicalIdOf(stack, engineFunction.fn));
      }
    }
  });
});
