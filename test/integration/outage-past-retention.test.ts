import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { MAX_RESEND_INTERVAL_MS, reap } from "../../shared/dispatch/reaper.js";
import { createJob } from "../../shared/jobs/index.js";
import { sweepExpired } from "../../shared/storage/expiry-sweep.js";
import { getJob } from "../../shared/storage/run-reads.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";

const DAY_MS = 24 * 3_600_000;
/** An operator who keeps one day of history (`-c retentionDays=1`, the lowest allowed). */
const RETENTION_DAYS = 1;

/** The engine's clock runs `offsetMs` ahead of the machine's: the test moves it on. */
let offsetMs = 0;
const clock = () => new Date(Date.now() + offsetMs);

let f: EngineFixture;
beforeEach(async () => {
  offsetMs = 0;
  f = await createEngineFixture({ settings: { retentionDays: RETENTION_DAYS }, clock });
});
afterEach(() => f.destroy());

/**
 * The workers are down (their event sources disabled, a broken deploy) for longer than the run
 * history's retention while the tick runs on: the runs they would have run wait QUEUED, and the
 * reaper re-sends each every 15 minutes. DynamoDB's TTL (the expiry sweep here) must not delete a
 * run that has not ended: its job would never run it and its history would say nothing.
 */
describe("a worker outage longer than the retention", () => {
  it("a one-off queued before it still runs once the workers are back, and its job completes", async () => {
    const runAt = new Date(Math.ceil((clock().getTime() + 1000) / 1000) * 1000);
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { runAt: runAt.toISOString() } }),
    );
    // The tick's reaper, a pass every few minutes (each a tick that found the run due again),
    // for a day and a half.
    const outageEnd = runAt.getTime() + 1.5 * RETENTION_DAYS * DAY_MS;
    while (clock().getTime() < outageEnd) {
      offsetMs += MAX_RESEND_INTERVAL_MS + 60_000;
      await reap(f.engine);
      // DynamoDB's TTL deletes what has expired, at any time (on AWS within days of it).
      await sweepExpired(f.engine, clock());
    }

    // The workers are back: the first copy in the queue runs the one-off (fire_once: late, it is
    // the most recent occurrence).
    const delivery = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    await f.process(f.workerDeps("w"), delivery);
    const runs = (await f.runs()).filter((r) => r.jobId === job.jobId);
    expect(runs.map((r) => r.status)).toEqual(["SUCCEEDED"]);
    expect((await getJob(f.engine, job.jobId))?.status).toBe("COMPLETED");
  }, 120_000);
});
