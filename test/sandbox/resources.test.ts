import { randomUUID } from "node:crypto";
import { access, readFile, rm, stat, utimes } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { DescribeTableCommand, DescribeTimeToLiveCommand } from "@aws-sdk/client-dynamodb";
import { GetQueueAttributesCommand } from "@aws-sdk/client-sqs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { planCacheFile, stackResourcePlan } from "../../infra/sandbox/plan-cache.js";
import {
  type ProvisionedResources,
  planFromTemplate,
  provision,
  type Template,
} from "../../infra/sandbox/resources.js";
import { synthesizeTemplate } from "../../infra/sandbox/template.js";
import { PRIORITIES } from "../../shared/model.js";
import {
  createTestClients,
  deleteQueue,
  deleteTable,
  testNamespace,
} from "../support/namespace.js";

const sortBy = <T>(items: readonly T[] | undefined, key: (item: T) => string) =>
  [...(items ?? [])].sort((a, b) => key(a).localeCompare(key(b)));

describe("the sandbox's tables and queues", () => {
  const clients = createTestClients();
  const ns = testNamespace("sbx");
  let template: Template;
  let created: ProvisionedResources;

  beforeAll(async () => {
    template = synthesizeTemplate();
    created = await provision(clients, planFromTemplate(template), ns.id);
  }, 60_000);
  afterAll(async () => {
    await Promise.all([
      deleteTable(clients.dynamo, created.tables.jobs),
      deleteTable(clients.dynamo, created.tables.runs),
      deleteTable(clients.dynamo, created.tables.webhookSecrets),
      ...[...Object.values(created.queues), ...created.deadLetterQueues].map((url) =>
        deleteQueue(clients.sqs, url),
      ),
    ]);
    clients.destroy();
  });

  const resourcesOfType = (type: string) =>
    Object.entries(template.Resources).filter(([, r]) => r.Type === type);

  it("are the template's: keys, attributes, indexes and TTL of every table", async () => {
    const templateTables = resourcesOfType("AWS::DynamoDB::Table");
    expect(templateTables).toHaveLength(3);
    const logicalIdPart = {
      jobs: "JobsTable",
      runs: "RunsTable",
      webhookSecrets: "WebhookSecrets",
    };
    for (const [table, name] of Object.entries(created.tables)) {
      const { Table } = await clients.dynamo.send(new DescribeTableCommand({ TableName: name }));
      const part = logicalIdPart[table as keyof typeof logicalIdPart];
      const declared = templateTables.find(([id]) => id.includes(part))?.[1].Properties as
        | Record<string, unknown>
        | undefined;
      expect(declared).toBeDefined();
      expect(Table?.KeySchema).toEqual(declared?.KeySchema);
      expect(sortBy(Table?.AttributeDefinitions, (a) => a.AttributeName ?? "")).toEqual(
        sortBy(
          declared?.AttributeDefinitions as { AttributeName: string }[],
          (a) => a.AttributeName,
        ),
      );
      const indexes = (Table?.GlobalSecondaryIndexes ?? []).map((i) => ({
        IndexName: i.IndexName,
        KeySchema: i.KeySchema,
        Projection: i.Projection,
      }));
      expect(sortBy(indexes, (i) => i.IndexName ?? "")).toEqual(
        sortBy(declared?.GlobalSecondaryIndexes as { IndexName: string }[], (i) => i.IndexName),
      );
      const ttl = await clients.dynamo.send(new DescribeTimeToLiveCommand({ TableName: name }));
      const declaredTtl = declared?.TimeToLiveSpecification as
        | { AttributeName: string }
        | undefined;
      expect(ttl.TimeToLiveDescription?.AttributeName).toBe(declaredTtl?.AttributeName);
    }
  });

  it("are the template's: each work queue's visibility, retention and redrive to its own DLQ", async () => {
    const templateQueues = Object.fromEntries(resourcesOfType("AWS::SQS::Queue"));
    for (const priority of PRIORITIES) {
      const { Attributes = {} } = await clients.sqs.send(
        new GetQueueAttributesCommand({
          QueueUrl: created.queues[priority],
          AttributeNames: ["All"],
        }),
      );
      const declared = Object.entries(templateQueues).find(([id]) =>
        id.startsWith(`QueuesWork${priority}`),
      )?.[1].Properties as Record<string, unknown> | undefined;
      expect(Attributes.VisibilityTimeout).toBe(String(declared?.VisibilityTimeout));
      expect(Attributes.MessageRetentionPeriod).toBe(String(declared?.MessageRetentionPeriod));
      const redrive = JSON.parse(Attributes.RedrivePolicy ?? "{}") as {
        deadLetterTargetArn: string;
        maxReceiveCount: number;
      };
      const declaredRedrive = declared?.RedrivePolicy as {
        maxReceiveCount: number;
        deadLetterTargetArn: { "Fn::GetAtt": [string] };
      };
      expect(Number(redrive.maxReceiveCount)).toBe(declaredRedrive.maxReceiveCount);
      // The DLQ it names is the sandbox's copy of the template's DLQ for this priority.
      expect(declaredRedrive.deadLetterTargetArn["Fn::GetAtt"][0]).toMatch(
        new RegExp(`^QueuesDeadLetters${priority}`),
      );
      const dlqArns = await Promise.all(
        created.deadLetterQueues.map(async (url) => {
          const got = await clients.sqs.send(
            new GetQueueAttributesCommand({ QueueUrl: url, AttributeNames: ["QueueArn"] }),
          );
          return got.Attributes?.QueueArn;
        }),
      );
      expect(dlqArns).toContain(redrive.deadLetterTargetArn);
    }
    expect(created.deadLetterQueues).toHaveLength(3);
  });

  it("are what a sandbox starts from, synthesized or kept in the cache under the sources' hash", async () => {
    const synthesized = planFromTemplate(template);
    expect(await stackResourcePlan()).toEqual(synthesized);
    const file = await planCacheFile();
    expect(file).toMatch(/node_modules\/\.cache\/scheduler-sandbox\/plan-[0-9a-f]{32}\.json$/);
    expect(JSON.parse(await readFile(String(file), "utf8"))).toEqual(synthesized);
    expect(await stackResourcePlan()).toEqual(synthesized);
  });

  it("are not kept when a source changed after the process loaded its modules: that plan is of the older sources", async () => {
    // A context of its own gives this test a key of its own (the synth reads CDK_CONTEXT_JSON too).
    const context = process.env.CDK_CONTEXT_JSON;
    process.env.CDK_CONTEXT_JSON = JSON.stringify({ planCacheProbe: randomUUID() });
    // Loaded at the process's start (the sandbox imports it), then saved again, as an editor or a
    // checkout does: its content stays as it is, so the key is the sources' on disk.
    const source = fileURLToPath(new URL("../../shared/storage/tables.ts", import.meta.url));
    const { atime, mtime } = await stat(source);
    const file = String(await planCacheFile());
    try {
      const loadedAt = Date.now();
      await utimes(source, atime, new Date(loadedAt + 1));
      const synthesized = planFromTemplate(template);
      expect(await stackResourcePlan(loadedAt)).toEqual(synthesized);
      await expect(access(file)).rejects.toThrow();
      // A process that loaded its modules after the change keeps the plan.
      expect(await stackResourcePlan(loadedAt + 2)).toEqual(synthesized);
      expect(JSON.parse(await readFile(file, "utf8"))).toEqual(synthesized);
    } finally {
      if (context === undefined) delete process.env.CDK_CONTEXT_JSON;
      else process.env.CDK_CONTEXT_JSON = context;
      await utimes(source, atime, mtime);
      await rm(file, { force: true });
    }
  }, 120_000);
});
