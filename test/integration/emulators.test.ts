// Canary for the DynamoDB and SQS behaviour the engine relies on, run against
// DynamoDB Local and fauxqs (or whatever AWS_ENDPOINT_URL names: LocalStack). If
// an upgrade changes any of this, the engine suites would fail in confusing
// ways; this file says which primitive broke.
import {
  ConditionalCheckFailedException,
  DescribeTimeToLiveCommand,
  DynamoDBServiceException,
  TransactionCanceledException,
} from "@aws-sdk/client-dynamodb";
import {
  ChangeMessageVisibilityCommand,
  DeleteMessageBatchCommand,
  GetQueueAttributesCommand,
  type Message,
  ReceiveMessageCommand,
  SendMessageBatchCommand,
  SendMessageCommand,
  type SQSClient,
} from "@aws-sdk/client-sqs";
import {
  DeleteCommand,
  GetCommand,
  PutCommand,
  QueryCommand,
  TransactWriteCommand,
  UpdateCommand,
} from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { sleep } from "../../shared/clock.js";
import {
  createQueue,
  createTable,
  createTestClients,
  deleteQueue,
  deleteTable,
  testNamespace,
} from "../support/namespace.js";
import { rejection } from "../support/rejection.js";

const ns = testNamespace("emu");
const clients = createTestClients();
const { dynamo, doc, sqs } = clients;
const queues: string[] = [];

afterAll(async () => {
  await Promise.all(queues.map((url) => deleteQueue(sqs, url)));
  clients.destroy();
});

describe("DynamoDB", () => {
  const table = ns.name("items");

  beforeAll(async () => {
    await createTable(
      dynamo,
      {
        TableName: table,
        AttributeDefinitions: [
          { AttributeName: "pk", AttributeType: "S" },
          { AttributeName: "sk", AttributeType: "S" },
          { AttributeName: "gpk", AttributeType: "S" },
          { AttributeName: "gsk", AttributeType: "S" },
        ],
        KeySchema: [
          { AttributeName: "pk", KeyType: "HASH" },
          { AttributeName: "sk", KeyType: "RANGE" },
        ],
        GlobalSecondaryIndexes: [
          {
            IndexName: "sparse",
            KeySchema: [
              { AttributeName: "gpk", KeyType: "HASH" },
              { AttributeName: "gsk", KeyType: "RANGE" },
            ],
            Projection: { ProjectionType: "ALL" },
          },
        ],
      },
      { timeToLiveAttribute: "expiresAt" },
    );
  });

  afterAll(async () => {
    await deleteTable(dynamo, table);
  });

  test("a failed ConditionExpression is a ConditionalCheckFailedException carrying the old item", async () => {
    const key = { pk: "COND", sk: "A" };
    await doc.send(new PutCommand({ TableName: table, Item: { ...key, fence: 1 } }));

    const error = await rejection(
      doc.send(
        new UpdateCommand({
          TableName: table,
          Key: key,
          UpdateExpression: "SET fence = :next",
          ConditionExpression: "fence = :expected",
          ExpressionAttributeValues: { ":next": 3, ":expected": 2 },
          ReturnValuesOnConditionCheckFailure: "ALL_OLD",
        }),
      ),
      ConditionalCheckFailedException,
    );

    // The Document client does not unmarshall items on errors: they stay AttributeValues.
    expect(error.Item).toEqual({
      pk: { S: "COND" },
      sk: { S: "A" },
      fence: { N: "1" },
    });
    const stored = await doc.send(new GetCommand({ TableName: table, Key: key }));
    expect(stored.Item).toEqual({ ...key, fence: 1 });
  });

  test("a cancelled transaction reports a reason per item and writes nothing", async () => {
    await doc.send(new PutCommand({ TableName: table, Item: { pk: "TX", sk: "LEASE", fence: 5 } }));

    const error = await rejection(
      doc.send(
        new TransactWriteCommand({
          TransactItems: [
            { Put: { TableName: table, Item: { pk: "TX", sk: "RUN#1", status: "QUEUED" } } },
            {
              Update: {
                TableName: table,
                Key: { pk: "TX", sk: "LEASE" },
                UpdateExpression: "SET fence = fence + :one",
                ConditionExpression: "fence = :stale",
                ExpressionAttributeValues: { ":one": 1, ":stale": 4 },
                ReturnValuesOnConditionCheckFailure: "ALL_OLD",
              },
            },
          ],
        }),
      ),
      TransactionCanceledException,
    );

    expect(error.CancellationReasons).toEqual([
      { Code: "None" },
      {
        Code: "ConditionalCheckFailed",
        Message: "The conditional request failed",
        Item: { pk: { S: "TX" }, sk: { S: "LEASE" }, fence: { N: "5" } },
      },
    ]);
    const run = await doc.send(
      new GetCommand({ TableName: table, Key: { pk: "TX", sk: "RUN#1" } }),
    );
    expect(run.Item).toBeUndefined();
  });

  test("a strongly consistent Query pages through every item in sort order", async () => {
    const sks = Array.from({ length: 25 }, (_, i) => `DUE#${String(i).padStart(3, "0")}`);
    await Promise.all(
      sks.map((sk) => doc.send(new PutCommand({ TableName: table, Item: { pk: "PAGE", sk } }))),
    );

    const pages: string[][] = [];
    let startKey: Record<string, unknown> | undefined;
    do {
      const page = await doc.send(
        new QueryCommand({
          TableName: table,
          KeyConditionExpression: "pk = :pk",
          ExpressionAttributeValues: { ":pk": "PAGE" },
          ConsistentRead: true,
          Limit: 10,
          ExclusiveStartKey: startKey,
        }),
      );
      pages.push((page.Items ?? []).map((item) => String(item.sk)));
      startKey = page.LastEvaluatedKey;
    } while (startKey !== undefined);

    expect(pages.map((page) => page.length)).toEqual([10, 10, 5]);
    expect(pages.flat()).toEqual(sks);
  });

  test("a sparse GSI holds only items that carry its key, and drops them when it is removed", async () => {
    await Promise.all([
      doc.send(
        new PutCommand({
          TableName: table,
          Item: { pk: "RUN#1", sk: "R", gpk: "INFLIGHT#0", gsk: "2030-01-01T00:00:00.000Z" },
        }),
      ),
      doc.send(
        new PutCommand({
          TableName: table,
          Item: { pk: "RUN#2", sk: "R", gpk: "INFLIGHT#0", gsk: "2030-01-01T00:00:01.000Z" },
        }),
      ),
      doc.send(new PutCommand({ TableName: table, Item: { pk: "RUN#3", sk: "R", done: true } })),
    ]);
    await doc.send(
      new UpdateCommand({
        TableName: table,
        Key: { pk: "RUN#2", sk: "R" },
        UpdateExpression: "REMOVE gpk, gsk",
      }),
    );

    const inflight = await doc.send(
      new QueryCommand({
        TableName: table,
        IndexName: "sparse",
        KeyConditionExpression: "gpk = :shard",
        ExpressionAttributeValues: { ":shard": "INFLIGHT#0" },
      }),
    );
    expect(inflight.Items?.map((item) => item.pk)).toEqual(["RUN#1"]);

    // AWS rejects strongly consistent reads on a GSI; code that works locally must not rely on them.
    const consistent = await rejection(
      doc.send(
        new QueryCommand({
          TableName: table,
          IndexName: "sparse",
          KeyConditionExpression: "gpk = :shard",
          ExpressionAttributeValues: { ":shard": "INFLIGHT#0" },
          ConsistentRead: true,
        }),
      ),
      DynamoDBServiceException,
    );
    expect(consistent.name).toBe("ValidationException");
    await doc.send(new DeleteCommand({ TableName: table, Key: { pk: "RUN#1", sk: "R" } }));
  });

  test("TTL can be enabled on an attribute", async () => {
    const ttl = await dynamo.send(new DescribeTimeToLiveCommand({ TableName: table }));
    expect(ttl.TimeToLiveDescription).toEqual({
      AttributeName: "expiresAt",
      TimeToLiveStatus: "ENABLED",
    });
  });
});

// The SQS cases wait on real clocks, so they run side by side.
describe.concurrent("SQS", () => {
  async function queue(suffix: string, attributes: Record<string, string> = {}) {
    const created = await createQueue(sqs, ns.name(suffix), attributes);
    queues.push(created.url);
    return created;
  }

  async function receive(
    client: SQSClient,
    url: string,
    options: { wait?: number; max?: number; visibility?: number } = {},
  ): Promise<Message[]> {
    const result = await client.send(
      new ReceiveMessageCommand({
        QueueUrl: url,
        WaitTimeSeconds: options.wait ?? 0,
        MaxNumberOfMessages: options.max ?? 10,
        VisibilityTimeout: options.visibility,
        MessageSystemAttributeNames: ["All"],
        MessageAttributeNames: ["All"],
      }),
    );
    return result.Messages ?? [];
  }

  async function makeVisibleNow(url: string, message: Message) {
    await sqs.send(
      new ChangeMessageVisibilityCommand({
        QueueUrl: url,
        ReceiptHandle: message.ReceiptHandle,
        VisibilityTimeout: 0,
      }),
    );
  }

  const seconds = (since: number) => (performance.now() - since) / 1000;

  test("DelaySeconds on SendMessage and SendMessageBatch hides a message until its delay ends", async () => {
    const { url } = await queue("delay");
    const sentAt = performance.now();
    await sqs.send(
      new SendMessageCommand({ QueueUrl: url, MessageBody: "single", DelaySeconds: 2 }),
    );
    const batch = await sqs.send(
      new SendMessageBatchCommand({
        QueueUrl: url,
        Entries: [
          { Id: "now", MessageBody: "now", DelaySeconds: 0 },
          { Id: "later", MessageBody: "later", DelaySeconds: 2 },
        ],
      }),
    );
    expect(batch.Failed ?? []).toEqual([]);

    const early = await receive(sqs, url, { wait: 1 });
    expect(early.map((m) => m.Body)).toEqual(["now"]);
    expect(await receive(sqs, url)).toEqual([]);

    // A long poll must wake up when the delay ends, not only when a new message is sent.
    const bodies: string[] = [];
    while (bodies.length < 2 && seconds(sentAt) < 5) {
      for (const m of await receive(sqs, url, { wait: 3 })) bodies.push(m.Body ?? "");
    }
    const visibleAfter = seconds(sentAt);
    expect(bodies.sort()).toEqual(["later", "single"]);
    expect(visibleAfter).toBeGreaterThanOrEqual(1.9);
    expect(visibleAfter).toBeLessThan(3);
  });

  test("ChangeMessageVisibility shortens and extends a received message's invisibility", async () => {
    const shorten = await queue("shorten", { VisibilityTimeout: "30" });
    const extend = await queue("extend", { VisibilityTimeout: "1" });
    await sqs.send(new SendMessageCommand({ QueueUrl: shorten.url, MessageBody: "short" }));
    await sqs.send(new SendMessageCommand({ QueueUrl: extend.url, MessageBody: "long" }));
    const [short] = await receive(sqs, shorten.url, { wait: 1 });
    const [long] = await receive(sqs, extend.url, { wait: 1 });
    const receivedAt = performance.now();
    expect(short?.Body).toBe("short");
    expect(long?.Body).toBe("long");
    await Promise.all([
      sqs.send(
        new ChangeMessageVisibilityCommand({
          QueueUrl: shorten.url,
          ReceiptHandle: short?.ReceiptHandle,
          VisibilityTimeout: 1,
        }),
      ),
      sqs.send(
        new ChangeMessageVisibilityCommand({
          QueueUrl: extend.url,
          ReceiptHandle: long?.ReceiptHandle,
          VisibilityTimeout: 3,
        }),
      ),
    ]);

    // Past the extended queue's 1 s default, but inside its new 3 s.
    await sleep(1_600);
    expect(await receive(sqs, extend.url)).toEqual([]);
    const back = await receive(sqs, shorten.url, { wait: 1 });
    expect(back.map((m) => m.Body)).toEqual(["short"]);
    expect(seconds(receivedAt)).toBeLessThan(5);

    const again = await receive(sqs, extend.url, { wait: 3 });
    expect(again.map((m) => m.Body)).toEqual(["long"]);
    expect(seconds(receivedAt)).toBeGreaterThanOrEqual(2.9);
  });

  test("ApproximateReceiveCount counts receives, and redrive moves a message to the DLQ after maxReceiveCount", async () => {
    const dlq = await queue("dlq");
    const work = await queue("work", {
      VisibilityTimeout: "30",
      RedrivePolicy: JSON.stringify({ deadLetterTargetArn: dlq.arn, maxReceiveCount: 2 }),
    });
    const sent = await sqs.send(
      new SendMessageCommand({
        QueueUrl: work.url,
        MessageBody: '{"runId":"r1"}',
        MessageAttributes: { attempt: { DataType: "Number", StringValue: "1" } },
      }),
    );

    const counts: string[] = [];
    for (let i = 0; i < 2; i++) {
      const [message] = await receive(sqs, work.url, { wait: 1 });
      expect(message?.MessageId).toBe(sent.MessageId);
      counts.push(message?.Attributes?.ApproximateReceiveCount ?? "");
      if (message !== undefined) await makeVisibleNow(work.url, message);
    }
    expect(counts).toEqual(["1", "2"]);

    // The third receive finds the count exhausted: the message goes to the DLQ instead.
    expect(await receive(sqs, work.url, { wait: 1 })).toEqual([]);
    const [dead] = await receive(sqs, dlq.url, { wait: 1 });
    expect(dead?.MessageId).toBe(sent.MessageId);
    expect(dead?.Body).toBe('{"runId":"r1"}');
    expect(dead?.MessageAttributes?.attempt?.StringValue).toBe("1");
    // AWS also sets DeadLetterQueueSourceArn here; fauxqs 1.9.2 does not, so the DLQ
    // consumer must find its run from the body, not from that attribute.
  });

  test("DeleteMessageBatch deletes every received message", async () => {
    const { url } = await queue("batchdelete");
    await sqs.send(
      new SendMessageBatchCommand({
        QueueUrl: url,
        Entries: ["a", "b", "c"].map((id) => ({ Id: id, MessageBody: id })),
      }),
    );
    const received: Message[] = [];
    while (received.length < 3) received.push(...(await receive(sqs, url, { wait: 1 })));

    // fauxqs 1.9.2 reports malformed receipt handles as deleted (AWS: ReceiptHandleIsInvalid),
    // so only well-formed handles are exercised here.
    const deleted = await sqs.send(
      new DeleteMessageBatchCommand({
        QueueUrl: url,
        Entries: received.map((m, i) => ({ Id: `m${i}`, ReceiptHandle: m.ReceiptHandle })),
      }),
    );
    expect(deleted.Successful?.map((entry) => entry.Id).sort()).toEqual(["m0", "m1", "m2"]);
    expect(deleted.Failed ?? []).toEqual([]);

    const counts = await sqs.send(
      new GetQueueAttributesCommand({
        QueueUrl: url,
        AttributeNames: ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
      }),
    );
    expect(counts.Attributes).toEqual({
      ApproximateNumberOfMessages: "0",
      ApproximateNumberOfMessagesNotVisible: "0",
    });
  });

  test("MessageAttributes of every data type round-trip", async () => {
    const { url } = await queue("attributes");
    const binary = Uint8Array.from([0, 1, 2, 254, 255]);
    await sqs.send(
      new SendMessageCommand({
        QueueUrl: url,
        MessageBody: "body",
        MessageAttributes: {
          jobId: { DataType: "String", StringValue: "01JOB" },
          attempt: { DataType: "Number", StringValue: "3" },
          fence: { DataType: "Number.int", StringValue: "42" },
          blob: { DataType: "Binary", BinaryValue: binary },
        },
      }),
    );

    const [message] = await receive(sqs, url, { wait: 1 });
    expect(message?.MessageAttributes).toEqual({
      jobId: { DataType: "String", StringValue: "01JOB" },
      attempt: { DataType: "Number", StringValue: "3" },
      fence: { DataType: "Number.int", StringValue: "42" },
      blob: { DataType: "Binary", BinaryValue: binary },
    });
    expect(message?.MD5OfMessageAttributes).toMatch(/^[0-9a-f]{32}$/);
  });
});
