import { randomBytes } from "node:crypto";
import {
  CreateTableCommand,
  type CreateTableCommandInput,
  DeleteTableCommand,
  DescribeTableCommand,
  type DynamoDBClient,
  ResourceNotFoundException,
  UpdateTimeToLiveCommand,
} from "@aws-sdk/client-dynamodb";
import {
  CreateQueueCommand,
  DeleteQueueCommand,
  GetQueueAttributesCommand,
  type QueueAttributeName,
  QueueDoesNotExist,
  type SQSClient,
} from "@aws-sdk/client-sqs";
import { type DynamoDBDocumentClient, ScanCommand } from "@aws-sdk/lib-dynamodb";
import { inject } from "vitest";
import { type AwsClients, createAwsClients } from "../../shared/aws.js";
import { sleep } from "../../shared/clock.js";

export interface TestNamespace {
  /** The unique prefix, e.g. `t3f9a1c02`. */
  id: string;
  /** `name("jobs")` → `t3f9a1c02-jobs`: valid as a table and as a queue name. */
  name(suffix: string): string;
}

/**
 * Test files share one DynamoDB Local and one fauxqs, so every table and
 * queue a file creates carries its own random prefix.
 */
export function testNamespace(prefix = "t"): TestNamespace {
  const id = `${prefix.replace(/[^A-Za-z0-9_]/g, "")}${randomBytes(4).toString("hex")}`;
  return { id, name: (suffix) => `${id}-${suffix}` };
}

export interface TestClients extends AwsClients {
  /** Closes the keep-alive sockets so the worker can exit. */
  destroy(): void;
}

/** Clients for the endpoints the global setup provided. */
export function createTestClients(options: { maxSockets?: number } = {}): TestClients {
  const dynamoSide = createAwsClients({ ...options, endpoint: inject("dynamoEndpoint") });
  const sqsSide = createAwsClients({ ...options, endpoint: inject("sqsEndpoint") });
  // Each endpoint gets its own createAwsClients call; the unused halves are dropped at once.
  dynamoSide.sqs.destroy();
  sqsSide.dynamo.destroy();
  return {
    dynamo: dynamoSide.dynamo,
    doc: dynamoSide.doc,
    sqs: sqsSide.sqs,
    destroy() {
      dynamoSide.dynamo.destroy();
      sqsSide.sqs.destroy();
    },
  };
}

export interface TestQueue {
  url: string;
  arn: string;
}

export async function createQueue(
  sqs: SQSClient,
  name: string,
  attributes: Partial<Record<QueueAttributeName, string>> = {},
): Promise<TestQueue> {
  const created = await sqs.send(
    new CreateQueueCommand({ QueueName: name, Attributes: attributes }),
  );
  const url = created.QueueUrl;
  if (url === undefined) throw new Error(`CreateQueue ${name} returned no QueueUrl`);
  // The ARN is what a RedrivePolicy names, so callers need it for DLQs.
  const described = await sqs.send(
    new GetQueueAttributesCommand({ QueueUrl: url, AttributeNames: ["QueueArn"] }),
  );
  const arn = described.Attributes?.QueueArn;
  if (arn === undefined) throw new Error(`queue ${name} has no QueueArn`);
  return { url, arn };
}

export async function deleteQueue(sqs: SQSClient, url: string): Promise<void> {
  try {
    await sqs.send(new DeleteQueueCommand({ QueueUrl: url }));
  } catch (error) {
    // Cleanup must not fail a suite that already deleted its queue.
    if (!(error instanceof QueueDoesNotExist)) throw error;
  }
}

export interface CreateTableOptions {
  /** Replaces `definition.TableName`, so shared definitions can be namespaced. */
  tableName?: string;
  /** Enables TTL on this attribute once the table is active. */
  timeToLiveAttribute?: string;
  timeoutMs?: number;
}

/** Creates a table and waits until it and all its indexes are ACTIVE. Returns its name. */
export async function createTable(
  dynamo: DynamoDBClient,
  definition: CreateTableCommandInput,
  options: CreateTableOptions = {},
): Promise<string> {
  const tableName = options.tableName ?? definition.TableName;
  if (tableName === undefined) throw new Error("createTable needs a TableName");
  const billing =
    definition.BillingMode === undefined && definition.ProvisionedThroughput === undefined
      ? { BillingMode: "PAY_PER_REQUEST" as const }
      : {};
  await dynamo.send(new CreateTableCommand({ ...billing, ...definition, TableName: tableName }));
  await waitForActive(dynamo, tableName, options.timeoutMs ?? 60_000);
  if (options.timeToLiveAttribute !== undefined) {
    await dynamo.send(
      new UpdateTimeToLiveCommand({
        TableName: tableName,
        TimeToLiveSpecification: { AttributeName: options.timeToLiveAttribute, Enabled: true },
      }),
    );
  }
  return tableName;
}

async function waitForActive(
  dynamo: DynamoDBClient,
  tableName: string,
  timeoutMs: number,
): Promise<void> {
  // The SDK waiter ignores index status and backs off from 20 s; DynamoDB
  // Local is ACTIVE at once, real DynamoDB within seconds.
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const { Table } = await dynamo.send(new DescribeTableCommand({ TableName: tableName }));
    const indexes = Table?.GlobalSecondaryIndexes ?? [];
    if (Table?.TableStatus === "ACTIVE" && indexes.every((i) => i.IndexStatus === "ACTIVE")) return;
    if (Date.now() > deadline) throw new Error(`table ${tableName} not ACTIVE in ${timeoutMs} ms`);
    await sleep(250);
  }
}

export async function deleteTable(dynamo: DynamoDBClient, tableName: string): Promise<void> {
  try {
    await dynamo.send(new DeleteTableCommand({ TableName: tableName }));
  } catch (error) {
    if (!(error instanceof ResourceNotFoundException)) throw error;
  }
}

/** Every item of a table, read strongly consistent page by page: tests' view of what is stored. */
export async function scanTable(
  doc: DynamoDBDocumentClient,
  table: string,
): Promise<Record<string, unknown>[]> {
  const items: Record<string, unknown>[] = [];
  let startKey: Record<string, unknown> | undefined;
  do {
    const page = await doc.send(
      new ScanCommand({ TableName: table, ExclusiveStartKey: startKey, ConsistentRead: true }),
    );
    items.push(...(page.Items ?? []));
    startKey = page.LastEvaluatedKey;
  } while (startKey);
  return items;
}

/**
 * Items with each quota usage item's `changes` left out: a reservation and its give-back each
 * raise it (a recount's guard, shared/storage/seen-usage.ts), so a write refused after its
 * reservation leaves the counters as they were but not that count.
 */
export const withoutUsageChanges = (
  items: readonly Record<string, unknown>[],
): Record<string, unknown>[] =>
  items.map((item) => {
    if (item.sk !== "USAGE") return item;
    const { changes: _changes, ...counters } = item;
    return counters;
  });
