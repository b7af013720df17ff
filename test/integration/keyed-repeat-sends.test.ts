import { describe, expect, it } from "vitest";
import { createJob, replayDeadLetter } from "../../shared/jobs/index.js";
import { triggerJobWithKey } from "../../shared/jobs/trigger.js";
import {
  createEngineFixture,
  type EngineFixture,
  jobWithDeadRun,
  testJob,
} from "../support/engine-fixture.js";
import { withLostAnswers } from "../support/faults.js";

const TENANT = "tenant-a";

/** Messages in the work queues, visible, delayed or taken. */
async function messagesQueued(f: EngineFixture): Promise<number> {
  const { high, normal, low } = f.engine.queues;
  const depths = await Promise.all([high, normal, low].map((url) => f.queueDepth(url)));
  return depths.reduce((sum, d) => sum + d.visible + d.delayed + d.inFlight, 0);
}

/**
 * A keyed trigger or replay whose write applied and whose request then died before its send is a
 * 5xx; its client sends it again with the key (docs/api.md, "Retrying requests") and is answered
 * the run. The repeat sends that run's message while it is QUEUED and unstarted: otherwise it waits
 * for the reaper, a lease past its due time, though a trigger or replay is one run now.
 */
describe("a keyed request whose write applied, sent again with its key after a 5xx", () => {
  it("a trigger, its answers lost: the repeat sends the run's message", async ({
    onTestFinished,
  }) => {
    const f = await createEngineFixture();
    onTestFinished(() => f.destroy());
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { runAt: new Date(Date.now() + 3_600_000).toISOString() } }),
    );
    const lossy = withLostAnswers(f.engine, {
      operation: "TransactWriteItems",
      times: Number.MAX_SAFE_INTEGER,
      match: (input) => JSON.stringify(input).includes("TRIGGER#"),
    });
    onTestFinished(() => lossy.destroy());
    await expect(triggerJobWithKey(lossy.engine, job.tenantId, job.jobId, "k-1")).rejects.toThrow();
    expect(lossy.injected.count).toBeGreaterThan(0);

    const repeat = await triggerJobWithKey(f.engine, job.tenantId, job.jobId, "k-1");
    expect([repeat.created, repeat.run.status]).toEqual([false, "QUEUED"]);
    expect(await messagesQueued(f)).toBe(1);
  }, 60_000);

  it("a replay, its answer lost and its read back throttled: the repeat sends the run's message", async ({
    onTestFinished,
  }) => {
    const f = await createEngineFixture();
    onTestFinished(() => f.destroy());
    const { dead } = await jobWithDeadRun(f, { schedule: { every: "PT1H" } });
    await f.purge();
    let readsFail = false;
    const lossy = withLostAnswers(f.engine, {
      operation: "TransactWriteItems",
      times: Number.MAX_SAFE_INTEGER,
      match: (input) => JSON.stringify(input).includes("replayedBy"),
      meanwhile: async () => {
        readsFail = true;
      },
    });
    onTestFinished(() => lossy.destroy());
    lossy.engine.doc.middlewareStack.add(
      (next, context) => async (args) => {
        if (readsFail && context.commandName === "GetItemCommand")
          throw Object.assign(new Error("Rate of requests exceeds the allowed throughput"), {
            name: "ThrottlingException",
            $metadata: { httpStatusCode: 400 },
          });
        return next(args);
      },
      { step: "initialize", name: "failReadsBack" },
    );
    await expect(replayDeadLetter(lossy.engine, TENANT, dead.runId, "k-1")).rejects.toThrow();
    expect(lossy.injected.count).toBeGreaterThan(0);

    const repeat = await replayDeadLetter(f.engine, TENANT, dead.runId, "k-1");
    expect([repeat.earlier, repeat.run.status]).toEqual([true, "QUEUED"]);
    expect(await messagesQueued(f)).toBe(1);
  }, 60_000);
});
