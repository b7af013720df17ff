import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JobError } from "../../shared/execution/job-contract.js";
import { createJob } from "../../shared/jobs/index.js";
import { MAX_STORED_TEXT_BYTES } from "../../shared/storage/stored-text.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";

/** Larger than a DynamoDB item may be (400 KB). */
const HUGE = 500_000;

describe("a handler error larger than a DynamoDB item", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  it("is stored cut to a few KiB, and the run is recorded once: FAILED with its retry, or DEAD", async () => {
    for (const retryable of [true, false]) {
      let calls = 0;
      const handlers = {
        huge: async () => {
          calls++;
          throw new JobError(`${"e".repeat(HUGE)} end`, { retryable });
        },
      };
      const { job } = await createJob(
        f.engine,
        testJob({ type: "huge", schedule: { runAt: new Date().toISOString() } }),
      );
      const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
      expect(await f.process(f.workerDeps("w", handlers), received)).toBe("ack");
      expect(calls).toBe(1);
      const runs = (await f.runs())
        .filter((r) => r.jobId === job.jobId)
        .sort((a, b) => a.attempt - b.attempt);
      const [first, next] = runs;
      expect(first?.status).toBe(retryable ? "FAILED" : "DEAD");
      expect(Buffer.byteLength(first?.error ?? "", "utf8")).toBeLessThanOrEqual(
        MAX_STORED_TEXT_BYTES,
      );
      expect(first?.error).toMatch(/^e+ … \[cut: 500004 bytes in all\]$/);
      if (retryable) expect(next).toMatchObject({ status: "QUEUED", attempt: 2 });
      else expect(next).toBeUndefined();
    }
  }, 30_000);
});
