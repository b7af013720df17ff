import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sleep } from "../../shared/clock.js";
import { resend } from "../../shared/execution/run-outcome.js";
import { createJob, triggerJob } from "../../shared/jobs/index.js";
import { runMessageOf } from "../../shared/storage/items.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";

/**
 * The fixture's waits for one run's delivery receive its job's other messages too: each receive
 * counts towards the redrive (five, then the DLQ), so a wait must not receive the same message
 * again and again while its own has not come.
 */
describe("waiting for one run's delivery while other runs of its job are queued", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  it("leaves the job's other messages deliverable, none moved to the DLQ", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({ type: "noop", schedule: { cron: "0 0 1 1 *", timezone: "UTC" } }),
    );
    const first = await triggerJob(f.engine, job.tenantId, job.jobId);
    const second = await triggerJob(f.engine, job.tenantId, job.jobId);
    const retry = { ...first, attempt: 2 };

    // The retry's message comes two seconds after the wait for it starts.
    const waited = f.nextDeliveryOfRun(retry);
    await sleep(2_000);
    await resend(f.engine, runMessageOf(retry), f.engine.clock());
    expect((await waited).message.attempt).toBe(2);

    expect(await f.queueDepth(f.dlqUrl)).toEqual({ visible: 0, delayed: 0, inFlight: 0 });
    expect((await f.nextDeliveryOfRun(first)).message.scheduledFor).toBe(first.scheduledFor);
    expect((await f.nextDeliveryOfRun(second)).message.scheduledFor).toBe(second.scheduledFor);
  }, 60_000);
});
