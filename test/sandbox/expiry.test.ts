import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { GetCommand, PutCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { stackResourcePlan } from "../../infra/sandbox/plan-cache.js";
import type { ResourcePlan } from "../../infra/sandbox/resources.js";
import { type Sandbox, startSandbox } from "../../infra/sandbox/sandbox.js";
import { testNamespace } from "../support/namespace.js";
import { waitFor } from "../support/wait.js";

/**
 * DynamoDB Local never expires items: the sandbox's own sweep deletes what DynamoDB's TTL would,
 * at start and every ten minutes. Items written while it was stopped are gone after a restart.
 */
describe("sandbox expiry sweep", () => {
  let plan: ResourcePlan;
  let dataDir: string;
  let sandbox: Sandbox | null = null;
  // The test run's emulators keep the tables across the restart; the prefix keeps them this file's.
  const prefix = testNamespace("expiry").id;

  beforeAll(async () => {
    plan = await stackResourcePlan();
    dataDir = await mkdtemp(join(tmpdir(), "scheduler-expiry-"));
  }, 60_000);
  afterAll(async () => {
    await sandbox?.stop();
    await rm(dataDir, { recursive: true, force: true });
  });

  const start = () =>
    startSandbox({
      port: 0,
      dataDir,
      tickSeconds: null,
      workers: 1,
      dynamoEndpoint: inject("dynamoEndpoint"),
      sqsEndpoint: inject("sqsEndpoint"),
      prefix,
      env: { SCHEDULER_API_KEYS: "k=t" },
      plan,
      print: () => undefined,
    });

  it("deletes the items whose expiresAt has passed from both tables, and keeps the rest", async () => {
    sandbox = await start();
    const { engine } = sandbox;
    const nowSeconds = Math.floor(Date.now() / 1000);
    const items = {
      expiredJob: { table: engine.tables.jobs, key: { pk: "JOB#expired", sk: "JOB" } },
      liveJob: { table: engine.tables.jobs, key: { pk: "JOB#live", sk: "JOB" } },
      expiredRun: { table: engine.tables.runs, key: { pk: "JOB#expired", sk: "RUN#a#0001" } },
      liveRun: { table: engine.tables.runs, key: { pk: "JOB#live", sk: "RUN#a#0001" } },
    };
    for (const [name, { table, key }] of Object.entries(items)) {
      const expiresAt = name.startsWith("expired") ? nowSeconds - 60 : nowSeconds + 86_400;
      await engine.doc.send(new PutCommand({ TableName: table, Item: { ...key, expiresAt } }));
    }
    await sandbox.stop();
    sandbox = await start();
    const engineAfter = sandbox.engine;
    const exists = async ({ table, key }: { table: string; key: Record<string, string> }) =>
      (
        await engineAfter.doc.send(
          new GetCommand({ TableName: table, Key: key, ConsistentRead: true }),
        )
      ).Item !== undefined;
    await waitFor(
      "the expired items to be swept",
      async () => !(await exists(items.expiredJob)) && !(await exists(items.expiredRun)),
      30_000,
    );
    expect(await exists(items.liveJob)).toBe(true);
    expect(await exists(items.liveRun)).toBe(true);
  }, 180_000);
});
