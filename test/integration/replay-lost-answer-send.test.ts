import { describe, expect, it } from "vitest";
import { replayDeadLetter } from "../../shared/jobs/index.js";
import { createEngineFixture, jobWithDeadRun } from "../support/engine-fixture.js";
import { withLostAnswers } from "../support/faults.js";

const TENANT = "tenant-a";

/**
 * A keyed replay whose transaction applied with its answer lost, and whose read back of the dead
 * run then failed too (throttled), is a 5xx; its client sends it again with the key (docs/api.md,
 * "Retrying requests") and is answered the replay's run. The first request died before its send,
 * so the repeat sends the run's message while it is QUEUED and unstarted, as a keyed trigger's
 * repeat does: otherwise it waits for the reaper, a lease past its due time.
 */
describe("a keyed replay whose write applied and whose read back failed, sent again with its key", () => {
  it("has its run's message sent by the repeat", async ({ onTestFinished }) => {
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
    expect(repeat.earlier).toBe(true);
    expect(repeat.run.status).toBe("QUEUED");
    const { high, normal, low } = f.engine.queues;
    const depths = await Promise.all([high, normal, low].map((url) => f.queueDepth(url)));
    const messages = depths.reduce((sum, d) => sum + d.visible + d.delayed + d.inFlight, 0);
    expect(messages).toBe(1);
  }, 60_000);
});
