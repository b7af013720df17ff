import { afterAll, beforeAll, describe, expect, it, type TestContext } from "vitest";
import { REAPER_SETTLE_MS, reap } from "../../shared/dispatch/reaper.js";
import { handleCrashedRun } from "../../shared/execution/dead-letter-queue.js";
import { processRun } from "../../shared/execution/worker.js";
import type { Run } from "../../shared/model.js";
import { METRICS } from "../../shared/observability.js";
import { countedOneOffDueNow } from "../support/counted-runs.js";
import { deliverEach } from "../support/deliver-each.js";
import { createEngineFixture, type EngineFixture } from "../support/engine-fixture.js";
import { runOf } from "../support/held-runs.js";
import { throttled, withJobReadHook } from "../support/job-reads-hook.js";
import { redriven } from "../support/redriven.js";

/**
 * A run whose last delivery gave its start back (a storage failure before its
 * handler) reaches the redrive DLQ QUEUED; the consumer leaves it, and the reaper, past the
 * give-back's deadline, sends it again: it is not stranded without a message.
 */
const LEASE_MS = 3000;

/**
 * One fixture for the file's cases (one after another, each its own job): its work messages go to
 * the DLQ on their third receive.
 */
let f: EngineFixture;
beforeAll(async () => {
  f = await createEngineFixture({ settings: { leaseMs: LEASE_MS }, maxReceiveCount: 2 });
});
afterAll(() => f.destroy());

/**
 * A counted one-off due now whose job's reads are throttled while `failing.on` is set;
 * `deliverFailing` delivers its message twice, each delivery failing on a read of the job (the
 * second after writing its start and then giving it back), each message shown again at once.
 */
async function oneOffWithJobReadsThrottled(onTestFinished: TestContext["onTestFinished"]) {
  const failing = { on: true };
  const engine = withJobReadHook(f, onTestFinished, () => {
    if (failing.on) throw throttled();
  });
  const { job, worker, calls } = await countedOneOffDueNow(f);
  const failingWorker = { ...worker, engine };
  const deliverFailing = () =>
    deliverEach(f, job.jobId, 2, async (delivery) => {
      await expect(processRun(failingWorker, delivery)).rejects.toThrow("throughput");
    });
  return { failing, job, worker, calls, deliverFailing };
}

/**
 * A reaper pass past the give-back's deadline (a lease after it) and its settle line, by the pass's
 * clock (nothing else happens in between that waiting for it would show): the runs it sent again.
 */
async function resentPastGiveBack(given: Run): Promise<number> {
  const deadline = Date.parse(given.dueAt) + LEASE_MS;
  return (await reap(f.engine, { now: new Date(deadline + REAPER_SETTLE_MS + 100) })).resent;
}

describe("a run given back by the last delivery of its message", () => {
  it("is left QUEUED by the redrive DLQ consumer and sent again by the reaper, then runs once", async ({
    onTestFinished,
  }) => {
    const { failing, job, worker, calls, deliverFailing } =
      await oneOffWithJobReadsThrottled(onTestFinished);
    await deliverFailing();
    failing.on = false;
    const inDlq = await redriven(f, job.jobId, LEASE_MS + 10_000);
    await handleCrashedRun(f.engine, inDlq.message, inDlq.receiveCount);
    const given = await runOf(f, job.jobId);
    expect(given.status).toBe("QUEUED");
    // Past the give-back's deadline (a lease after it), the reaper sends the run again.
    expect(await resentPastGiveBack(given)).toBe(1);
    const again = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    expect(await f.process(worker, again)).toBe("ack");
    expect(calls.count).toBe(1);
    expect((await runOf(f, job.jobId)).status).toBe("SUCCEEDED");
  }, 40_000);
});

describe("a run whose every delivery fails on storage before its handler, round after round", () => {
  it("counts each give-back and stays QUEUED, never DEAD, then runs once when storage answers", async ({
    onTestFinished,
  }) => {
    const { failing, job, worker, calls, deliverFailing } =
      await oneOffWithJobReadsThrottled(onTestFinished);
    // A second round is the first after a re-send by the reaper.
    const givenBackBefore = f.metrics.sum(METRICS.startsGivenBack);
    const rounds = 2;
    for (let round = 1; round <= rounds; round++) {
      // The message's first delivery fails on its read of the run with its job, before any start;
      // its second writes its start, fails on its read of the job and gives the start back.
      await deliverFailing();
      expect(f.metrics.sum(METRICS.startsGivenBack) - givenBackBefore).toBe(round);
      const inDlq = await redriven(f, job.jobId, LEASE_MS + 10_000);
      await handleCrashedRun(f.engine, inDlq.message, inDlq.receiveCount);
      const given = await runOf(f, job.jobId);
      expect(given).toMatchObject({
        status: "QUEUED",
        reason: "released: its delivery failed on storage before running it",
      });
      expect(given.crashedRunning ?? false).toBe(false);
      expect(await resentPastGiveBack(given)).toBe(1);
    }
    expect(calls.count).toBe(0);
    failing.on = false;
    const again = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    expect(await f.process(worker, again)).toBe("ack");
    expect(calls.count).toBe(1);
    expect((await runOf(f, job.jobId)).status).toBe("SUCCEEDED");
    expect(f.metrics.sum(METRICS.startsGivenBack) - givenBackBefore).toBe(rounds);
  }, 90_000);
});
