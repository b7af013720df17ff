import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Engine } from "../../shared/engine.js";
import { JobError } from "../../shared/execution/job-contract.js";
import { processRun } from "../../shared/execution/worker.js";
import { createJob, triggerJob } from "../../shared/jobs/index.js";
import { jobAsItStands } from "../../shared/jobs/queries.js";
import type { Run, RunSummary } from "../../shared/model.js";
import { deleteMessages, type ReceivedRun, setVisibility } from "../../shared/queue/work-queue.js";
import { recordRunOnJob } from "../../shared/storage/run-on-job.js";
import { getJob, getRun } from "../../shared/storage/run-reads.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { createTestClients } from "../support/namespace.js";
import { waitFor } from "../support/wait.js";

/** Its next run is far off: a run's ending writes the job at once (no `nextAdmissionSoon`). */
const YEARLY = { cron: "0 0 1 1 *", timezone: "UTC" };

type Input = {
  TableName?: string;
  UpdateExpression?: string;
  TransactItems?: readonly { Update?: { TableName?: string } }[];
};

/**
 * An engine whose first write of the job's side of a run's ending (an UpdateItem naming lastRun,
 * or a transaction that updates a job) waits until `release`: the run's own write has landed, the
 * job's has not, as when a worker is slow between its two writes (or its transaction is slow).
 */
function holdingJobWrite(base: Engine) {
  const clients = createTestClients({ maxSockets: 16 });
  let reached = false;
  let held = false;
  let release = () => {};
  const released = new Promise<void>((resolve) => {
    release = resolve;
  });
  clients.doc.middlewareStack.add(
    (next, context) => async (args) => {
      const input = args.input as Input;
      const command = context.commandName ?? "";
      const jobWrite =
        (command.startsWith("UpdateItem") &&
          input.TableName === base.tables.jobs &&
          String(input.UpdateExpression ?? "").includes("lastRun")) ||
        (command.startsWith("TransactWriteItems") &&
          (input.TransactItems ?? []).some((item) => item.Update?.TableName === base.tables.jobs));
      if (jobWrite && !held) {
        held = true;
        reached = true;
        await released;
      }
      return next(args);
    },
    { step: "initialize", name: "holdJobWrite" },
  );
  return {
    engine: { ...base, doc: clients.doc },
    reached: () => reached,
    release: () => release(),
    destroy: () => clients.destroy(),
  };
}

const summaryOf = (run: Run): RunSummary => ({
  runId: run.runId,
  status: run.status,
  scheduledFor: run.scheduledFor,
  attempt: run.attempt,
  finishedAt: run.finishedAt ?? "",
});

describe("a job's lastRun is the run that finished last, whatever order the job's writes land in", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  /** The next delivery of this run's message (others of its job go back for later). */
  async function deliveryOf(run: Run): Promise<ReceivedRun> {
    for (;;) {
      const received = await f.nextDelivery(f.engine.queues.normal, run.jobId);
      if (received.message.scheduledFor === run.scheduledFor) return received;
      await setVisibility(f.engine.sqs, received.queueUrl, received.receiptHandle, 0);
    }
  }

  /**
   * Processes `older`'s delivery with its job's write held back, then `newer`'s to the end, then
   * lets the older's job write land. Returns both runs as they ended.
   */
  async function endInReverse(
    olderDelivery: ReceivedRun,
    newer: Run,
    olderHandlers: Parameters<EngineFixture["workerDeps"]>[1] = {},
  ): Promise<{ older: Run; newer: Run }> {
    const holding = holdingJobWrite(f.engine);
    try {
      const olderDone = processRun(
        { ...f.workerDeps("slow", olderHandlers), engine: holding.engine },
        olderDelivery,
      );
      await waitFor("the older run's job write", () => holding.reached());
      const newerDelivery = await deliveryOf(newer);
      expect(await f.process(f.workerDeps("fast"), newerDelivery)).toBe("ack");
      holding.release();
      expect(await olderDone).toBe("ack");
      await deleteMessages(f.engine.sqs, olderDelivery.queueUrl, [olderDelivery.receiptHandle]);
    } finally {
      holding.release();
      holding.destroy();
    }
    const olderRun = await getRun(f.engine, olderDelivery.message);
    const newerRun = await getRun(f.engine, newer);
    if (olderRun === null || newerRun === null) throw new Error("a run is gone");
    expect(Date.parse(olderRun.finishedAt ?? "")).toBeLessThan(
      Date.parse(newerRun.finishedAt ?? ""),
    );
    return { older: olderRun, newer: newerRun };
  }

  /** A recurring job that lets two runs overlap (allow, 2), and two runs of it triggered. */
  async function twoOverlappingRuns() {
    const { job } = await createJob(
      f.engine,
      testJob({
        schedule: YEARLY,
        policies: { ...testJob().policies, overlap: "allow", maxConcurrent: 2 },
      }),
    );
    const first = await triggerJob(f.engine, job.tenantId, job.jobId);
    const second = await triggerJob(f.engine, job.tenantId, job.jobId);
    return { job, first, second };
  }

  /** The older run's handler: a retryable failure, so its ending is the failure's transaction. */
  const FAILING = {
    noop: async () => {
      throw new JobError("planned failure", { retryable: true });
    },
  };

  it("a one-off's own run whose job write lands after a trigger's newer run completes the job and leaves lastRun the newer", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { runAt: new Date().toISOString() } }),
    );
    const own = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    const triggered = await triggerJob(f.engine, job.tenantId, job.jobId);
    const { newer } = await endInReverse(own, triggered);

    const stored = await getJob(f.engine, job.jobId);
    expect(stored).toMatchObject({ status: "COMPLETED", lastRun: summaryOf(newer) });
  }, 30_000);

  it("two overlapping runs of a recurring job (allow, 2): the older's late job write drops its entry and leaves lastRun the newer", async () => {
    const { job, first, second } = await twoOverlappingRuns();
    const { newer } = await endInReverse(await deliveryOf(first), second);

    const stored = await getJob(f.engine, job.jobId);
    expect(stored?.activeRuns).toEqual({});
    expect(stored?.lastRun).toEqual(summaryOf(newer));
    expect((await jobAsItStands(f.engine, stored ?? job)).lastRun).toEqual(summaryOf(newer));
  }, 30_000);

  it("a failure whose transaction (with its next attempt) lands after a newer run's ending leaves lastRun the newer", async () => {
    const { job, first, second } = await twoOverlappingRuns();
    const { older, newer } = await endInReverse(await deliveryOf(first), second, FAILING);

    expect(older.status).toBe("FAILED");
    const stored = await getJob(f.engine, job.jobId);
    expect(stored?.activeRuns).toEqual({});
    expect(stored?.lastRun).toEqual(summaryOf(newer));
    // The failure's next attempt is written all the same.
    const attempts = (await f.runs()).filter(
      (r) => r.jobId === job.jobId && r.scheduledFor === older.scheduledFor,
    );
    expect(attempts.map((r) => r.attempt).sort()).toEqual([1, 2]);
  }, 30_000);

  it("a one-off's own failure whose transaction lands after a trigger's newer run still writes its next attempt", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { runAt: new Date().toISOString() } }),
    );
    const own = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    const triggered = await triggerJob(f.engine, job.tenantId, job.jobId);
    const { older, newer } = await endInReverse(own, triggered, FAILING);

    expect(older.status).toBe("FAILED");
    expect(await getJob(f.engine, job.jobId)).toMatchObject({
      status: "ACTIVE",
      lastRun: summaryOf(newer),
    });
    const attempts = (await f.runs()).filter(
      (r) => r.jobId === job.jobId && r.scheduledFor === older.scheduledFor,
    );
    expect(attempts.map((r) => r.attempt).sort()).toEqual([1, 2]);
  }, 30_000);

  it("between runs that finished in the same millisecond, lastRun is the greater runId", async () => {
    const runAt = new Date(Date.now() + 365 * 24 * 3600_000).toISOString();
    const { job } = await createJob(f.engine, testJob({ schedule: { runAt } }));
    const run = await triggerJob(f.engine, job.tenantId, job.jobId);
    const at = new Date().toISOString();
    const ended = (suffix: string, finishedAt = at): Run => ({
      ...run,
      runId: `${run.runId}-${suffix}`,
      status: "SUCCEEDED",
      finishedAt,
    });
    const lastRunAfter = async (ending: Run) => {
      await recordRunOnJob(f.engine, ending, {
        status: "SUCCEEDED",
        ran: true,
        tracked: false,
        completesJob: false,
      });
      return (await getJob(f.engine, job.jobId))?.lastRun?.runId;
    };
    expect(await lastRunAfter(ended("b"))).toBe(`${run.runId}-b`);
    expect(await lastRunAfter(ended("a"))).toBe(`${run.runId}-b`);
    expect(await lastRunAfter(ended("c"))).toBe(`${run.runId}-c`);
    // A later millisecond wins whatever its runId; an earlier one never does.
    const later = new Date(Date.parse(at) + 1).toISOString();
    expect(await lastRunAfter(ended("0", later))).toBe(`${run.runId}-0`);
    const earlier = new Date(Date.parse(at) - 1).toISOString();
    expect(await lastRunAfter(ended("z", earlier))).toBe(`${run.runId}-0`);
  }, 30_000);
});
