import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sleep } from "../../shared/clock.js";
import type { JobContext } from "../../shared/execution/job-contract.js";
import { LeaseLapsedError } from "../../shared/execution/lease-watch.js";
import { processRun } from "../../shared/execution/worker.js";
import { createJob } from "../../shared/jobs/index.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { runOf } from "../support/held-runs.js";

/**
 * A heartbeat whose every write succeeds, one of them slowly: the message's visibility extension
 * (best effort) answering after 4.5 s, within one attempt's request timeout on AWS (5 s). At the
 * shortest lease setting (6 s, a beat every 2 s) the run's next lease write waits behind it.
 */
const LEASE_MS = 6000;
const SLOW_VISIBILITY_MS = 4500;

/**
 * One fixture for both cases, which run one after the other (the frozen worker blocks the event
 * loop, which would stall the other's beats): each reads its own job's run, and the frozen case's
 * shorter lease is its engine's setting (the queue's own visibility, 6 s, is not waited on: its
 * message is processed as received).
 */
let f: EngineFixture;
beforeAll(async () => {
  f = await createEngineFixture({ settings: { leaseMs: LEASE_MS } });
});
afterAll(() => f.destroy());

describe("a heartbeat whose visibility extension is slow but succeeds", () => {
  it("does not stop a healthy run, nor leave it to run again", async () => {
    let slow = false;
    f.engine.sqs.middlewareStack.add(
      (next, context) => async (args) => {
        if (slow && context.commandName === "ChangeMessageVisibilityCommand")
          await sleep(SLOW_VISIBILITY_MS);
        return next(args);
      },
      { step: "initialize", name: "slowVisibility" },
    );
    let signal: AbortSignal | undefined;
    let calls = 0;
    const worker = f.workerDeps("worker-a", {
      slowish: async (ctx: JobContext) => {
        calls++;
        signal = ctx.signal;
        slow = true;
        // Ten seconds of work: past the lease its first beat wrote (at most 2 s in, so ending by
        // 8 s), which a next lease write waiting behind the slow answer (4.5 s on, then a beat's
        // 2 s) would have let lapse.
        await sleep(10_000, ctx.signal).catch(() => undefined);
      },
    });
    try {
      const { job } = await createJob(
        f.engine,
        testJob({
          type: "slowish",
          schedule: { runAt: new Date().toISOString() },
          timeoutSeconds: 60,
        }),
      );
      const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
      const disposition = await processRun(worker, received);
      expect(calls).toBe(1);
      // Every write of every beat succeeded: the run's own lease was extended each beat.
      expect(signal?.reason).toBeUndefined();
      expect(disposition).toBe("ack");
      expect(await runOf(f, job.jobId)).toMatchObject({ status: "SUCCEEDED" });
    } finally {
      slow = false;
      f.engine.sqs.middlewareStack.remove("slowVisibility");
    }
  }, 60_000);
});

describe("a worker frozen past its lease (its event loop blocked)", () => {
  it("writes nothing more to the run once it wakes past the lease it last wrote", async () => {
    const engine = { ...f.engine, settings: { ...f.engine.settings, leaseMs: 3000 } };
    let signal: AbortSignal | undefined;
    const frozenWorker = f.workerDeps("worker-a", {
      frozen: async (ctx: JobContext) => {
        signal = ctx.signal;
        await sleep(100);
        // The process is paused 3.5 s, past its 3 s lease (a long GC pause, a stopped container).
        const until = Date.now() + 3500;
        while (Date.now() < until) {
          // blocked
        }
        await sleep(3000, ctx.signal).catch(() => undefined);
      },
    });
    const worker = { ...frozenWorker, engine };
    const { job } = await createJob(
      engine,
      testJob({
        type: "frozen",
        schedule: { runAt: new Date().toISOString() },
        timeoutSeconds: 60,
      }),
    );
    const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    const disposition = await processRun(worker, received);
    expect(disposition).toBe("ack");
    const reason: unknown = signal?.reason;
    expect(reason).toBeInstanceOf(LeaseLapsedError);
    const lapsedAt = reason instanceof LeaseLapsedError ? reason.context.leaseUntil : "";
    // The run keeps the lease this worker last wrote before it stopped, not one written as it woke:
    // here none, its start held unwritten (a one-off's first delivery), so it is QUEUED still, for
    // the reaper to send again at its deadline.
    expect(lapsedAt).not.toBe("");
    expect(await runOf(f, job.jobId)).toMatchObject({ status: "QUEUED", leaseUntil: null });
  }, 60_000);
});
