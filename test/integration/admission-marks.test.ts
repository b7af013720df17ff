import { ProvisionedThroughputExceededException } from "@aws-sdk/client-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { processRun } from "../../shared/execution/worker.js";
import { cancelRun, createJob, triggerJob } from "../../shared/jobs/index.js";
import type { Job } from "../../shared/model.js";
import { recordAdmission } from "../../shared/storage/admission.js";
import { getJob, getRun } from "../../shared/storage/run-reads.js";
import {
  createEngineFixture,
  deliveryOfRun,
  type EngineFixture,
  testJob,
} from "../support/engine-fixture.js";
import { timedOutAnswer, withLostAnswers } from "../support/faults.js";
import { jobHoldingRunA } from "../support/held-runs.js";
import { createTestClients } from "../support/namespace.js";

/**
 * A run's admission mark (`admissionMarks`, storage/admission.ts) against what can land on the job
 * between an admission applied with its answer lost and the SDK's sending it again: another
 * delivery of the same run, a cancel of the run, throttles after the lost answer.
 */
/**
 * The cases run side by side (describe.concurrent), each on a job of its own; none bounds real
 * time. The throttled case waits out the SDK's backoff on a queue of its own: on the shared one,
 * the first case's receive would count as a delivery of its message, and the reverse.
 */
describe.concurrent("admission marks: a write applied with its answer lost, and what lands before it is sent again", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  const isAdmissionOf = (runId: string) => (input: Record<string, unknown>) => {
    // The request as sent: a start names its run, a buffer or a rerun mark writes it as a value.
    const names = input.ExpressionAttributeNames as Record<string, string> | undefined;
    const values = input.ExpressionAttributeValues as Record<string, { S?: string }> | undefined;
    return (
      String(input.UpdateExpression).includes("admissionMarks = :marks") &&
      (names?.["#runId"] === runId || values?.[":runId"]?.S === runId)
    );
  };

  it("runs the run once when another delivery of it, taken in the same millisecond, comes before the re-send", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({ type: "counts-calls", schedule: { every: "PT1H" } }),
    );
    const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    const instant = new Date();
    const frozen = { ...f.engine, clock: () => new Date(instant) };
    let calls = 0;
    const handlers = {
      "counts-calls": async () => {
        calls++;
      },
    };
    let other: unknown;
    const lossy = withLostAnswers(frozen, {
      operation: "UpdateItem",
      times: 1,
      match: (input) => String(input.UpdateExpression).includes("admissionMarks = :marks"),
      error: timedOutAnswer,
      meanwhile: async () => {
        other = await processRun(
          { ...f.workerDeps("worker-b", handlers), engine: frozen },
          received,
        );
      },
    });
    try {
      expect(
        await processRun({ ...f.workerDeps("worker-a", handlers), engine: lossy.engine }, received),
      ).toBe("ack");
    } finally {
      lossy.destroy();
    }
    expect(lossy.injected.count).toBe(1);
    expect(other).toBe("ack");
    expect(calls).toBe(1);
    const runs = (await f.runs()).filter((r) => r.jobId === job.jobId);
    expect(runs.map((r) => r.status)).toEqual(["SUCCEEDED"]);
  });

  it("ends a run cancelled before the re-send CANCELLED, unstarted, its handler let on once at most", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({
        type: "counts-calls",
        schedule: { cron: "0 0 1 1 *", timezone: "UTC" },
        policies: { ...testJob().policies, overlap: "allow", maxConcurrent: 2 },
      }),
    );
    const run = await triggerJob(f.engine, job.tenantId, job.jobId);
    let calls = 0;
    const lossy = withLostAnswers(f.engine, {
      operation: "UpdateItem",
      times: 1,
      match: isAdmissionOf(run.runId),
      error: timedOutAnswer,
      meanwhile: () => cancelRun(f.engine, job.tenantId, job.jobId, run.runId),
    });
    try {
      expect(
        await processRun(
          {
            ...f.workerDeps("worker-a", {
              "counts-calls": async () => {
                calls++;
              },
            }),
            engine: lossy.engine,
          },
          deliveryOfRun(f.engine, run),
        ),
      ).toBe("ack");
    } finally {
      lossy.destroy();
    }
    expect(lossy.injected.count).toBe(1);
    // The cancel ended the run unstarted (its start held unwritten); the delivery's handler, let
    // on by its own admission, runs until its first write meets the cancel (architecture.md,
    // run-fence.ts), once at most.
    expect(calls).toBeLessThanOrEqual(1);
    expect(await getRun(f.engine, run)).toMatchObject({ status: "CANCELLED", fence: 0 });
  });

  it("runs the run when the SDK's re-sends after the lost answer were throttled and retryOnContention sent the write again", async ({
    onTestFinished,
  }) => {
    const f = await createEngineFixture();
    onTestFinished(() => f.destroy());
    const { job } = await createJob(f.engine, testJob({ schedule: { every: "PT1H" } }));
    const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    const clients = createTestClients({ maxSockets: 64 });
    let calls = 0;
    let attempts = 0;
    // One SDK call of the admission per pass through `initialize`, each of its attempts through
    // `finalizeRequest`: the first call's first attempt is applied and its answer lost, the rest
    // of its attempts throttled, so the SDK gives up and retryOnContention calls again.
    clients.dynamo.middlewareStack.add(
      (next, context) => async (args) => {
        const input = args.input as Record<string, unknown>;
        if (
          context.commandName === "UpdateItemCommand" &&
          String(input.UpdateExpression).includes("admissionMarks = :marks")
        )
          calls++;
        return next(args);
      },
      { step: "initialize", name: "countAdmissionCalls" },
    );
    clients.dynamo.middlewareStack.add(
      (next, context) => async (args) => {
        const input = args.input as Record<string, unknown>;
        if (
          calls === 1 &&
          context.commandName === "UpdateItemCommand" &&
          String(input.UpdateExpression).includes("admissionMarks = :marks")
        ) {
          attempts++;
          if (attempts === 1) {
            await next(args);
            throw timedOutAnswer();
          }
          throw new ProvisionedThroughputExceededException({
            message: "The level of configured provisioned throughput for the table was exceeded",
            $metadata: { httpStatusCode: 400 },
          });
        }
        return next(args);
      },
      { step: "finalizeRequest", priority: "low", name: "loseThenThrottle" },
    );
    try {
      expect(
        await processRun(
          { ...f.workerDeps("worker-a"), engine: { ...f.engine, doc: clients.doc } },
          received,
        ),
      ).toBe("ack");
    } finally {
      clients.destroy();
    }
    expect(attempts).toBeGreaterThan(1);
    expect(calls).toBeGreaterThan(1);
    const runs = (await f.runs()).filter((r) => r.jobId === job.jobId);
    expect(runs.map((r) => r.status)).toEqual(["SUCCEEDED"]);
  }, 30_000);

  /** The job as it stands. */
  async function jobNow(jobId: string): Promise<Job> {
    const job = await getJob(f.engine, jobId);
    if (job === null) throw new Error("job gone");
    return job;
  }

  it.each([
    ["buffer", "run-b"],
    ["rerun waits", "run-r"],
  ] as const)(
    "a %s write applied with its answer lost counts as made when another run's admission landed first",
    async (kind, runId) => {
      const { job, leaseUntil } = await jobHoldingRunA(f.engine);
      const lossy = withLostAnswers(f.engine, {
        operation: "UpdateItem",
        times: 1,
        match: isAdmissionOf(runId),
        error: timedOutAnswer,
        meanwhile: async () =>
          recordAdmission(
            f.engine,
            await jobNow(job.jobId),
            { kind: "start", runId: "run-c", leaseUntil },
            { dropped: [] },
          ),
      });
      try {
        await recordAdmission(
          lossy.engine,
          await jobNow(job.jobId),
          { kind, runId },
          { dropped: [] },
        );
      } finally {
        lossy.destroy();
      }
      expect(lossy.injected.count).toBe(1);
      const after = await jobNow(job.jobId);
      expect(Object.keys(after.admissionMarks ?? {}).sort()).toEqual(
        ["run-a", "run-c", runId].sort(),
      );
    },
  );

  it.each([
    ["buffer", "bufferedRunId"],
    ["rerun waits", "rerunWaiting"],
  ] as const)(
    "a %s write that takes the place of a run that no longer waits drops that run's mark",
    async (kind, field) => {
      const { job } = await jobHoldingRunA(f.engine);
      await recordAdmission(
        f.engine,
        await jobNow(job.jobId),
        { kind, runId: "run-old" },
        { dropped: [] },
      );
      // run-old ended without being admitted (cancelled, dead): the next one takes its place.
      await recordAdmission(
        f.engine,
        await jobNow(job.jobId),
        { kind, runId: "run-new" },
        { dropped: [] },
      );
      const after = await jobNow(job.jobId);
      expect(after[field]).toBe("run-new");
      expect(Object.keys(after.admissionMarks ?? {}).sort()).toEqual(["run-a", "run-new"]);
    },
  );

  it("keeps no mark but the held runs' when an admission drops only some of the ended runs", async () => {
    const { job } = await createJob(f.engine, testJob());
    const leaseUntil = new Date(Date.now() + 60_000);
    let current = job;
    // 150 listed runs, each admitted by this version.
    for (let i = 0; i < 150; i++) {
      await recordAdmission(
        f.engine,
        current,
        { kind: "start", runId: `run-${i}`, leaseUntil },
        { dropped: [] },
      );
      current = await jobNow(job.jobId);
    }
    expect(Object.keys(current.admissionMarks ?? {})).toHaveLength(150);
    // All 150 read ended: a write takes 100 of them off, the rest go with the next.
    await recordAdmission(
      f.engine,
      current,
      { kind: "start", runId: "run-new", leaseUntil },
      { dropped: Object.keys(current.activeRuns) },
    );
    const after = await jobNow(job.jobId);
    expect(Object.keys(after.activeRuns)).toHaveLength(51);
    expect(Object.keys(after.admissionMarks ?? {}).sort()).toEqual(
      Object.keys(after.activeRuns).sort(),
    );
  }, 60_000);
});
