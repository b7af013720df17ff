import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DescribeTableCommand } from "@aws-sdk/client-dynamodb";
import { GetQueueAttributesCommand } from "@aws-sdk/client-sqs";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { stackResourcePlan } from "../../infra/sandbox/plan-cache.js";
import { type Sandbox, startSandbox } from "../../infra/sandbox/sandbox.js";
import { listRuns } from "../../shared/jobs/queries.js";
import { createTestClients, testNamespace } from "../support/namespace.js";
import { type Receiver, startReceiver } from "../support/receiver.js";
import { waitFor } from "../support/wait.js";

const KEY = "private-targets-key";

describe("sandbox with ALLOW_PRIVATE_TARGETS=false", () => {
  let dataDir = "";
  let sandbox: Sandbox | null = null;
  let receiver: Receiver | null = null;
  const lines: string[] = [];

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), "scheduler-private-targets-"));
    receiver = await startReceiver({ secret: "unused" });
    sandbox = await startSandbox({
      port: 0,
      dataDir,
      tickSeconds: 1,
      workers: 2,
      // The test run's emulators, under a prefix of its own: it starts none.
      dynamoEndpoint: inject("dynamoEndpoint"),
      sqsEndpoint: inject("sqsEndpoint"),
      prefix: testNamespace("private").id,
      env: {
        SCHEDULER_API_KEYS: `${KEY}=tenant-p`,
        ALLOW_PRIVATE_TARGETS: "false",
      },
      plan: await stackResourcePlan(),
      print: (line) => lines.push(line),
    });
  }, 90_000);
  afterAll(async () => {
    await sandbox?.stop();
    await receiver?.close();
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  it("takes the endpoints given: its tables and queues are on the test run's emulators, and it starts no DynamoDB Local", async () => {
    if (!sandbox) throw new Error("not started");
    const { tables, queues } = sandbox.engine;
    const clients = createTestClients();
    try {
      const table = await clients.dynamo.send(new DescribeTableCommand({ TableName: tables.jobs }));
      expect(table.Table?.TableName).toBe(tables.jobs);
      const queue = await clients.sqs.send(
        new GetQueueAttributesCommand({ QueueUrl: queues.high, AttributeNames: ["QueueArn"] }),
      );
      expect(queue.Attributes?.QueueArn).toMatch(/-high$/);
    } finally {
      clients.destroy();
    }
    expect(existsSync(join(dataDir, "dynamodb"))).toBe(false);
  });

  it("refuses a loopback webhook as a deployed worker does: the run is DEAD at once, the receiver sees nothing", async () => {
    if (!sandbox || !receiver) throw new Error("not started");
    const port = new URL(receiver.url).port;
    const response = await fetch(`${sandbox.url}/jobs`, {
      method: "POST",
      headers: { Authorization: `Bearer ${KEY}`, "Content-Type": "application/json" },
      body: JSON.stringify({
        type: "http",
        schedule: { runAt: new Date().toISOString() },
        target: { url: `http://[::ffff:127.0.0.1]:${port}/hook` },
        payload: { hello: "loopback" },
      }),
    });
    expect(response.status).toBe(201);
    const { id } = (await response.json()) as { id: string };
    const engine = sandbox.engine;
    const runs = await waitFor(
      "the refused run to be DEAD",
      async () => {
        const page = await listRuns(engine, id, { limit: 10 });
        return page.items.some((r) => r.status === "DEAD") && page.items;
      },
      30_000,
    );
    expect(runs.map((r) => r.status)).toEqual(["DEAD"]);
    expect(runs[0]?.error).toMatch(/\[::ffff:7f00:1\] is loopback; refused/);
    expect(receiver.deliveries).toEqual([]);
  }, 60_000);
});
