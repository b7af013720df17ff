import { afterAll, beforeAll, describe, expect, it, type TestContext } from "vitest";
import { sleep } from "../../shared/clock.js";
import { REAPER_SETTLE_MS, reap } from "../../shared/dispatch/reaper.js";
import { handleCrashedRun } from "../../shared/execution/dead-letter-queue.js";
import type { JobContext, JobHandler } from "../../shared/execution/job-contract.js";
import { LeaseLapsedError } from "../../shared/execution/lease-watch.js";
import { processRun } from "../../shared/execution/worker.js";
import { cancelRun, createJob, pauseJob, resumeJob, triggerJob } from "../../shared/jobs/index.js";
import type { Run } from "../../shared/model.js";
import { METRICS } from "../../shared/observability.js";
import type { OverlapPolicy } from "../../shared/policies.js";
import { setVisibility } from "../../shared/queue/work-queue.js";
import { getJob, getRun } from "../../shared/storage/run-reads.js";
import { startRun } from "../../shared/storage/run-start.js";
import { readQuotaPartition, writeQuotaOverride } from "../../shared/storage/tenant-quotas.js";
import { countedOneOffDueNow } from "../support/counted-runs.js";
import { deliverEach } from "../support/deliver-each.js";
import {
  createEngineFixture,
  type EngineFixture,
  engineAt,
  testJob,
} from "../support/engine-fixture.js";
import { withFaults } from "../support/faults.js";
import { heldHandler, runOf } from "../support/held-runs.js";
import { throttled, withJobReadHook } from "../support/job-reads-hook.js";
import { createTestClients } from "../support/namespace.js";
import { redriven } from "../support/redriven.js";
import { waitFor } from "../support/wait.js";

/**
 * A run's life on the worker side under faults the emulators cannot produce (throttling, a batch
 * lost with its invocation, a cancel landing between two writes), injected with SDK middleware.
 * Each case states what the design promises.
 */

/**
 * Shorter than any deployment's (6 s at least): the cases wait in real time for leases to lapse.
 * Three of the workers' 500 ms beats to a lease keep a healthy run's lease live between beats.
 */
const LEASE_MS = 1500;

/**
 * One fixture for the file's cases (one after another, each its own jobs): its messages SQS moves to
 * the DLQ on their third receive.
 */
let f: EngineFixture;
beforeAll(async () => {
  f = await createEngineFixture({ settings: { leaseMs: LEASE_MS }, maxReceiveCount: 2 });
});
afterAll(() => f.destroy());

/**
 * A document client that shows `before` each request (its command's name and its input, before
 * marshalling) ahead of DynamoDB: `before` throws to fail it, or does something else first.
 */
function docWith(
  onTestFinished: TestContext["onTestFinished"],
  before: (command: string, input: Record<string, unknown>) => Promise<void>,
) {
  const clients = createTestClients({ maxSockets: 16 });
  onTestFinished(() => clients.destroy());
  clients.doc.middlewareStack.add(
    (next, context) => async (args) => {
      await before(context.commandName ?? "", args.input as Record<string, unknown>);
      return next(args);
    },
    { step: "initialize", name: "beforeRequest" },
  );
  return clients.doc;
}

describe("a worker whose heartbeats keep failing", () => {
  it("stops its handler once its own lease has lapsed, before another worker takes the run over", async () => {
    // Its DynamoDB refuses every heartbeat once `failing` is set (throttled, or unreachable from
    // this worker), while the handler still reaches its target.
    let failing = false;
    const faulty = withFaults(f.engine, {
      operation: "UpdateItem",
      times: Number.MAX_SAFE_INTEGER,
      match: (input) =>
        failing && String(input.UpdateExpression).includes("#status = :running, leaseUntil ="),
      error: () =>
        new Error("ThrottlingException: rate of requests exceeds the allowed throughput"),
    });
    let staleSignal: AbortSignal | undefined;
    let release: () => void = () => undefined;
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    const a = {
      ...f.workerDeps(
        "worker-a",
        {
          block: (ctx: JobContext) => {
            staleSignal = ctx.signal;
            return new Promise<void>((resolve) => {
              ctx.signal.addEventListener("abort", () => resolve(), { once: true });
              void released.then(resolve);
            });
          },
        },
        500,
      ),
      engine: faulty.engine,
    };
    let aAbortedWhileBRan: boolean | undefined;
    const b = f.workerDeps("worker-b", {
      block: async () => {
        aAbortedWhileBRan = staleSignal?.aborted;
      },
    });
    const lapsedBefore = f.metrics.sum(METRICS.leaseLapsed);
    try {
      const { job } = await createJob(
        f.engine,
        testJob({
          type: "block",
          schedule: { runAt: new Date().toISOString() },
          timeoutSeconds: 60,
        }),
      );
      const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
      const stale = processRun(a, received);
      // Its start is written (its first beat), then every beat fails.
      const started = await waitFor("the run's start", async () => {
        const run = await runOf(f, job.jobId).catch(() => undefined);
        return run?.status === "RUNNING" ? run : undefined;
      });
      failing = true;
      const lapse = Date.parse(started.leaseUntil ?? "") + LEASE_MS + 200;
      await sleep(lapse - Date.now());
      expect(
        (await reap(f.engine, { now: new Date(Date.now() + REAPER_SETTLE_MS + 500) })).resent,
      ).toBe(1);
      const again = await f.nextDelivery(f.engine.queues.normal, job.jobId);
      expect(await f.process(b, again)).toBe("ack");
      expect(await runOf(f, job.jobId)).toMatchObject({
        status: "SUCCEEDED",
        workerId: "worker-b",
      });
      release();
      const disposition = await stale;
      // Worker A knew (by its own clock, every beat since failed) that its lease had lapsed a lease
      // ago, and its handler was still running beside worker B's attempt.
      expect(aAbortedWhileBRan).toBe(true);
      // Its handler is told why, and A writes nothing more: the run stays worker B's.
      expect(staleSignal?.reason).toBeInstanceOf(LeaseLapsedError);
      expect(disposition).toBe("ack");
      // Counted where an operator looks, beside a lost fence, not only logged.
      expect(f.metrics.sum(METRICS.leaseLapsed) - lapsedBefore).toBe(1);
      expect(await runOf(f, job.jobId)).toMatchObject({
        status: "SUCCEEDED",
        workerId: "worker-b",
      });
    } finally {
      release();
      faulty.destroy();
    }
  }, 40_000);
});

describe("a jobs table throttled past the SDK's retries", () => {
  it("does not make a run whose handler never ran a dead letter of a crashed worker", async ({
    onTestFinished,
  }) => {
    // Every read of the jobs table is throttled (a hot job item); the runs table answers.
    const engine = withJobReadHook(f, onTestFinished, () => {
      throw throttled();
    });
    const { job, worker, calls } = await countedOneOffDueNow(f);
    const throttledWorker = { ...worker, engine };
    // Two deliveries, each failing on its read of the job (the second after writing its start),
    // each message shown again at once as a lease would.
    await deliverEach(f, job.jobId, 2, async (delivery) => {
      await expect(processRun(throttledWorker, delivery)).rejects.toThrow("provisioned throughput");
    });
    const inDlq = await redriven(f, job.jobId, LEASE_MS + 10_000);
    await waitFor(
      "the run's lease to lapse",
      async () =>
        ((await getRun(f.engine, inDlq.message))?.leaseUntil ?? "") < new Date().toISOString(),
      10_000,
    );
    // The throttling is over by the time the DLQ consumer runs.
    await handleCrashedRun(f.engine, inDlq.message, inDlq.receiveCount);
    expect(calls.count).toBe(0);
    const run = await runOf(f, job.jobId);
    // No worker crashed and no handler ran: the run is not dead of a crash, the reaper sends it again.
    expect(run.status).not.toBe("DEAD");
    expect(run.crashedRunning ?? false).toBe(false);
  }, 30_000);
});

describe("a Lambda batch lost after its records were handled", () => {
  it("does not make a paused job's parked run, which never ran, a dead letter of a crashed worker", async () => {
    const { job, worker, calls } = await countedOneOffDueNow(f);
    await pauseJob(f.engine, job.tenantId, job.jobId);
    // Each delivery parks the run and is acknowledged, but the invocation then dies on a
    // batch-mate (out of memory): with ReportBatchItemFailures the whole batch comes back.
    await deliverEach(f, job.jobId, 2, async (delivery) => {
      expect(await processRun(worker, delivery)).toBe("ack");
    });
    expect(await runOf(f, job.jobId)).toMatchObject({
      status: "QUEUED",
      reason: "waiting: job paused",
    });
    const inDlq = await redriven(f, job.jobId, LEASE_MS + 10_000);
    await handleCrashedRun(f.engine, inDlq.message, inDlq.receiveCount);
    // Parked, never run: it waits for the resume, which runs it.
    expect((await runOf(f, job.jobId)).status).toBe("QUEUED");
    await resumeJob(f.engine, job.tenantId, job.jobId);
    const resumed = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    expect(await f.process(worker, resumed)).toBe("ack");
    expect(calls.count).toBe(1);
  }, 30_000);
});

describe("the redrive DLQ consumer beside a cancel", () => {
  it("ends CANCELLED, as asked, a poison run whose cancel was requested between the consumer's read and its write", async ({
    onTestFinished,
  }) => {
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { runAt: new Date().toISOString() }, timeoutSeconds: 30 }),
    );
    // Two deliveries each start the run and crash their worker.
    const first = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    const one = await startRun(f.engine, first.message, "crash-1", new Date());
    if (one.kind !== "started") throw new Error(`not started: ${one.kind}`);
    await setVisibility(f.engine.sqs, first.queueUrl, first.receiptHandle, 0);
    const second = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    const afterLease = new Date(Date.parse(one.run.leaseUntil ?? "") + 1);
    const two = await startRun(f.engine, second.message, "crash-2", afterLease);
    if (two.kind !== "started") throw new Error(`not started: ${two.kind}`);
    await setVisibility(f.engine.sqs, second.queueUrl, second.receiptHandle, 0);
    const inDlq = await redriven(f, job.jobId, LEASE_MS + 10_000);
    const leaseUntil = Date.parse(two.run.leaseUntil ?? "");
    // The consumer runs once the second start's lease has lapsed, by its clock.
    const consumer = engineAt(f.engine, leaseUntil + 100);
    // The tenant's cancel decided on the run while its lease was still live (its read a moment
    // before the lapse), so it asks the holder to cancel; its write lands after the consumer read
    // the run, before the consumer's DEAD write.
    const api = { ...f.engine, clock: () => new Date(leaseUntil - 500) };
    let answered: Awaited<ReturnType<typeof cancelRun>> | undefined;
    const doc = docWith(onTestFinished, async (command, input) => {
      const values = input.ExpressionAttributeValues as Record<string, unknown> | undefined;
      if (
        answered === undefined &&
        command.startsWith("UpdateItem") &&
        values?.[":status"] === "DEAD"
      )
        answered = await cancelRun(api, job.tenantId, job.jobId, two.run.runId);
    });
    await handleCrashedRun({ ...consumer, doc }, inDlq.message, inDlq.receiveCount);
    expect(answered).toMatchObject({ status: "RUNNING", cancelledBy: "api" });
    // The cancel was accepted: the run ends CANCELLED, not DEAD (a dead letter, its failure
    // dependents triggered) over the request it answered.
    expect((await runOf(f, job.jobId)).status).toBe("CANCELLED");
  }, 30_000);
});

/**
 * Runs `job`'s first delivery on a worker whose every heartbeat extends the run's own lease while
 * the jobs table throttles `throttled.update` (a hot item), and calls `whileHeld` once the lease that
 * write would have kept (`throttled.keptLease`) lapsed, the run still held under a live lease, with
 * a count of the calls of the `held` type's handler made beside the holder's.
 */
async function besideAHolder(
  onTestFinished: TestContext["onTestFinished"],
  throttled: {
    readonly update: string;
    /** The run's entry as the job or the tenant lists it. */
    readonly keptLease: (run: Run) => Promise<string | undefined>;
  },
  job: { readonly jobId: string },
  whileHeld: (handlerBeside: JobHandler, beside: () => number) => Promise<void>,
): Promise<void> {
  const doc = docWith(onTestFinished, async (command, input) => {
    if (
      command.startsWith("UpdateItem") &&
      input.TableName === f.engine.tables.jobs &&
      input.UpdateExpression === throttled.update
    )
      throw Object.assign(new Error("Rate of requests exceeds the allowed throughput"), {
        name: "ThrottlingException",
      });
  });
  const holder = heldHandler();
  const a = {
    ...f.workerDeps("worker-a", { held: holder.handler }, 500),
    engine: { ...f.engine, doc },
  };
  const first = processRun(a, await f.nextDelivery(f.engine.queues.normal, job.jobId));
  let beside = 0;
  try {
    const started = await waitFor("the holder's start", async () => {
      const run = await runOf(f, job.jobId).catch(() => undefined);
      return run?.status === "RUNNING" ? run : undefined;
    });
    // Listed still, under a lease lapsed: only the run's own lease says it is held.
    await waitFor(
      "the lease the throttled write keeps to lapse",
      async () => ((await throttled.keptLease(started)) ?? "9") < new Date().toISOString(),
      LEASE_MS + 10_000,
    );
    const held = await runOf(f, job.jobId);
    expect(held).toMatchObject({ status: "RUNNING", fence: started.fence });
    expect(Date.parse(held.leaseUntil ?? "")).toBeGreaterThan(Date.now());
    await whileHeld(
      async () => {
        if (holder.contexts[0]?.signal.aborted === false) beside++;
      },
      () => beside,
    );
  } finally {
    holder.release();
    await first;
  }
}

describe("a run whose heartbeats extend its lease but not its job's admission", () => {
  // The heartbeat's extension of the run's `activeRuns` entry is what the jobs table throttles.
  const entry = (job: { readonly jobId: string }) => ({
    update: "SET activeRuns.#runId = :leaseUntil",
    keptLease: async (run: Run) => (await getJob(f.engine, job.jobId))?.activeRuns[run.runId],
  });

  it("keeps its job's overlap policy: a run due beside it under skip is skipped", async ({
    onTestFinished,
  }) => {
    const { job } = await createJob(
      f.engine,
      testJob({
        type: "held",
        schedule: { every: "PT1H", startAt: new Date(Date.now() + 200).toISOString() },
      }),
    );
    expect(job.policies.overlap).toBe("skip");
    await besideAHolder(onTestFinished, entry(job), job, async (held, beside) => {
      const triggered = await triggerJob(f.engine, job.tenantId, job.jobId);
      const second = await f.nextDelivery(f.engine.queues.normal, job.jobId);
      expect(second.message.scheduledFor).toBe(triggered.scheduledFor);
      expect(await f.process(f.workerDeps("worker-b", { held }), second)).toBe("ack");
      // Overlap skip: the triggered run is skipped while the first runs, not run beside it.
      expect(beside()).toBe(0);
    });
  }, 30_000);

  it.for<OverlapPolicy>(["buffer_one", "allow"])(
    "keeps its job's overlap policy: a run due beside it under %s (maxConcurrent 1) waits",
    { timeout: 30_000 },
    async (overlap, { onTestFinished }) => {
      const defaults = testJob().policies;
      const { job } = await createJob(
        f.engine,
        testJob({
          type: "held",
          schedule: { every: "PT1H", startAt: new Date(Date.now() + 200).toISOString() },
          policies: { ...defaults, overlap, maxConcurrent: 1 },
        }),
      );
      await besideAHolder(onTestFinished, entry(job), job, async (held, beside) => {
        const triggered = await triggerJob(f.engine, job.tenantId, job.jobId);
        const second = await f.nextDelivery(f.engine.queues.normal, job.jobId);
        expect(second.message.scheduledFor).toBe(triggered.scheduledFor);
        expect(await f.process(f.workerDeps("worker-b", { held }), second)).toBe("ack");
        expect(beside()).toBe(0);
        expect(await getRun(f.engine, triggered)).toMatchObject({
          status: "QUEUED",
          reason: `waiting: overlap policy ${overlap}`,
        });
      });
    },
  );
});

describe("a run whose heartbeats extend its lease but not its tenant's concurrent-runs slot", () => {
  it("keeps its tenant within its concurrentRuns quota: another run of the tenant waits", async ({
    onTestFinished,
  }) => {
    const tenantId = "quota-one";
    await writeQuotaOverride(f.engine, tenantId, { concurrentRuns: 1 }, new Date());
    const oneOff = () =>
      createJob(
        f.engine,
        testJob({ tenantId, type: "held", schedule: { runAt: new Date().toISOString() } }),
      );
    const { job } = await oneOff();
    // The heartbeat's extension of the run's slot is what the jobs table throttles.
    const slot = {
      update: "SET leaseUntil = :leaseUntil, expiresAt = :expiresAt",
      keptLease: async (run: Run) =>
        (await readQuotaPartition(f.engine, tenantId)).slots.find((s) => s.runId === run.runId)
          ?.leaseUntil,
    };
    await besideAHolder(onTestFinished, slot, job, async (held, beside) => {
      const { job: other } = await oneOff();
      const delivery = await f.nextDelivery(f.engine.queues.normal, other.jobId);
      expect(await f.process(f.workerDeps("worker-b", { held }), delivery)).toBe("ack");
      // The tenant's one slot is the holder's: the other run waits for it, rather than run beside.
      expect(beside()).toBe(0);
      expect(await runOf(f, other.jobId)).toMatchObject({
        status: "QUEUED",
        reason: "waiting: tenant at its concurrentRuns quota (1)",
      });
    });
  }, 30_000);
});
