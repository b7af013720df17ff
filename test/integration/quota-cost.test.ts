import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Engine } from "../../shared/engine.js";
import { createJob } from "../../shared/jobs/index.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { createTestClients } from "../support/namespace.js";

interface Sent {
  readonly command: string;
  readonly touchesQuota: boolean;
}

/** An engine like `base` whose DynamoDB requests are recorded, each with whether it names a QUOTA# item. */
function countingEngine(base: Engine) {
  const clients = createTestClients();
  const sent: Sent[] = [];
  clients.doc.middlewareStack.add(
    (next, context) => async (args) => {
      sent.push({
        command: context.commandName ?? "",
        touchesQuota: JSON.stringify(args.input).includes("QUOTA#"),
      });
      return next(args);
    },
    { step: "initialize", name: "countDynamoRequests" },
  );
  return { engine: { ...base, doc: clients.doc }, sent, destroy: () => clients.destroy() };
}

const byCommand = (sent: readonly Sent[]) =>
  Object.fromEntries(
    [...new Set(sent.map((s) => s.command))].map((c) => [
      c,
      sent.filter((s) => s.command === c).length,
    ]),
  );

describe("quotas that cannot bind cost nothing", () => {
  let f: EngineFixture;
  let counting: ReturnType<typeof countingEngine>;
  beforeAll(async () => {
    // The deployment's defaults: activeJobs, runsPerMinute and concurrentRuns without a limit.
    f = await createEngineFixture();
    counting = countingEngine(f.engine);
  });
  afterAll(async () => {
    counting.destroy();
    await f.destroy();
  });

  it("a create and a run's start and finish of an uncapped tenant read and write no QUOTA# item", async () => {
    // The process's first request for the tenant reads its override (one GetItem per 10 s), no more.
    await createJob(counting.engine, testJob({ tenantId: "uncapped" }));
    const warmUp = counting.sent.splice(0).filter((s) => s.touchesQuota);
    expect(warmUp).toEqual([{ command: "GetItemCommand", touchesQuota: true }]);

    const created = await createJob(
      counting.engine,
      testJob({ tenantId: "uncapped", schedule: { runAt: new Date().toISOString() } }),
    );
    const createSent = counting.sent.splice(0);
    expect(createSent.filter((s) => s.touchesQuota)).toEqual([]);

    const received = await f.nextDelivery(f.engine.queues.normal, created.job.jobId);
    const deps = { ...f.workerDeps("counting"), engine: counting.engine };
    expect(await f.process(deps, received)).toBe("ack");
    const runSent = counting.sent.splice(0);
    const runs = (await f.runs()).filter((r) => r.jobId === created.job.jobId);
    expect(runs.map((r) => r.status)).toEqual(["SUCCEEDED"]);
    expect(runSent.filter((s) => s.touchesQuota)).toEqual([]);

    console.info(
      `DynamoDB requests: create ${createSent.length} ${JSON.stringify(byCommand(createSent))}, run start+finish ${runSent.length} ${JSON.stringify(byCommand(runSent))}`,
    );
  }, 60_000);
});
