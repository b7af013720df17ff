import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createJob } from "../../shared/jobs/index.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { byCommand, countingEngine } from "../support/request-count.js";

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
    expect(warmUp.map((s) => s.command)).toEqual(["GetItemCommand"]);

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
