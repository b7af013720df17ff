import { ProvisionedThroughputExceededException } from "@aws-sdk/client-dynamodb";
import { UpdateCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { processRun } from "../../shared/execution/worker.js";
import { createJob } from "../../shared/jobs/index.js";
import { jobKey } from "../../shared/storage/items.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { createTestClients } from "../support/namespace.js";

/**
 * Two first deliveries of one run (an SQS duplicate, a reaper re-send beside the original) whose
 * takes read the clock in the same millisecond lease the run alike, so their admissions write the
 * same change. "Sent more than once" does not tell them apart: the SDK also sends again a request
 * DynamoDB refused without applying it (throttled, a 500 before the write).
 */
describe("two first deliveries of one run, leased alike, one admission throttled and sent again", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  it("runs the handler once when the other delivery's admission lands on a job moved on meanwhile", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({ type: "counts-calls", schedule: { every: "PT1H" } }),
    );
    const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    // Both workers take the run in the same millisecond.
    const instant = new Date();
    const frozen = () => new Date(instant);
    let calls = 0;
    let release = () => {};
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    let otherRunning = () => {};
    const otherStarted = new Promise<void>((resolve) => {
      otherRunning = resolve;
    });
    const handler = async () => {
      calls++;
      otherRunning();
      await released;
    };
    const other = {
      ...f.workerDeps("worker-b", { "counts-calls": handler }),
      engine: { ...f.engine, clock: frozen },
    };
    let otherDelivery: Promise<unknown> = Promise.resolve();

    // Worker A's admission is throttled, not applied; before the SDK sends it again another run's
    // write moves the job on and worker B's delivery of the same run is admitted and starts.
    const clients = createTestClients({ maxSockets: 64 });
    let throttled = 0;
    clients.dynamo.middlewareStack.add(
      (next, context) => async (args) => {
        const input = args.input as Record<string, unknown>;
        if (
          throttled === 0 &&
          context.commandName === "UpdateItemCommand" &&
          String(input.UpdateExpression).includes("activeRuns.#runId = :leaseUntil")
        ) {
          throttled++;
          await f.engine.doc.send(
            new UpdateCommand({
              TableName: f.engine.tables.jobs,
              Key: jobKey(job.jobId),
              UpdateExpression: "SET activeRevision = activeRevision + :one",
              ExpressionAttributeValues: { ":one": 1 },
            }),
          );
          otherDelivery = processRun(other, received);
          await otherStarted;
          throw new ProvisionedThroughputExceededException({
            message: "The level of configured provisioned throughput for the table was exceeded",
            $metadata: { httpStatusCode: 400 },
          });
        }
        return next(args);
      },
      { step: "finalizeRequest", priority: "low", name: "throttleFirstAdmission" },
    );
    const first = {
      ...f.workerDeps("worker-a", { "counts-calls": handler }),
      engine: { ...f.engine, doc: clients.doc, clock: frozen },
    };
    try {
      const firstDelivery = processRun(first, received);
      // Worker A either acknowledges at once (held elsewhere) or runs the handler a second time.
      await Promise.race([firstDelivery, new Promise((resolve) => setTimeout(resolve, 3_000))]);
      release();
      await Promise.allSettled([firstDelivery, otherDelivery]);
    } finally {
      release();
      clients.destroy();
    }
    expect(throttled).toBe(1);
    expect(calls).toBe(1);
  }, 30_000);
});
