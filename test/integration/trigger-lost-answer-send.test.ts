import { describe, expect, it } from "vitest";
import { createJob } from "../../shared/jobs/index.js";
import { triggerJobWithKey } from "../../shared/jobs/trigger.js";
import { createEngineFixture, testJob } from "../support/engine-fixture.js";
import { withLostAnswers } from "../support/faults.js";

/**
 * A keyed trigger whose transaction applied with every answer lost is a 500; its client sends it
 * again with the key (docs/api.md, "Retrying requests") and is answered the run (200). Nothing
 * sends that run's message: the first request failed before its send, and the repeat takes the
 * run for an earlier request's, already sent. The run waits for the reaper, a lease past its due
 * time, though the trigger is "one extra run now". A replay in the same case sends its run
 * (`replayDeadLetter`: "this request's own write, applied with its answer lost, whose run nobody
 * else sends").
 */
describe("a keyed trigger whose write applied with its answers lost, sent again with its key", () => {
  it("has its run's message sent by the repeat", async ({ onTestFinished }) => {
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
    expect(repeat.created).toBe(false);
    expect(repeat.run.status).toBe("QUEUED");
    const { high, normal, low } = f.engine.queues;
    const depths = await Promise.all([high, normal, low].map((url) => f.queueDepth(url)));
    const messages = depths.reduce((sum, d) => sum + d.visible + d.delayed + d.inFlight, 0);
    expect(messages).toBe(1);
  }, 60_000);
});
