import { randomUUID } from "node:crypto";
import { UpdateCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { processRun } from "../../shared/execution/worker.js";
import { createJob, triggerJob } from "../../shared/jobs/index.js";
import type { Run } from "../../shared/model.js";
import { jobKey } from "../../shared/storage/items.js";
import { getRun } from "../../shared/storage/run-reads.js";
import {
  createEngineFixture,
  deliveryOfRun,
  type EngineFixture,
  testJob,
} from "../support/engine-fixture.js";
import { timedOutAnswer, withLostAnswers } from "../support/faults.js";

/**
 * Writes applied whose answer did not come within the clients' request timeout (shared/aws.ts):
 * the SDK sends the write again only once the timeout has passed, 5 s after DynamoDB applied it on
 * AWS, where after a 500 it does so at once. Other writers' writes land in those seconds, and the
 * write sent again meets its own earlier write with theirs on top.
 */
describe("a write applied whose answer timed out, with another write landing before the SDK sends it again", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  it("a recurring run's admission still runs the run it admitted when another run's write on the job came meanwhile", async () => {
    const { job } = await createJob(f.engine, testJob({ schedule: { every: "PT1H" } }));
    const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    const lossy = withLostAnswers(f.engine, {
      operation: "UpdateItem",
      times: 1,
      match: (input) => String(input.UpdateExpression).includes("activeRuns.#runId = :leaseUntil"),
      error: timedOutAnswer,
      // Another run's write on its job in those seconds (an admission, an ending's job write, an
      // ended run's entry taken off): each moves the job's activeRevision on.
      meanwhile: () =>
        f.engine.doc.send(
          new UpdateCommand({
            TableName: f.engine.tables.jobs,
            Key: jobKey(job.jobId),
            UpdateExpression: "SET activeRevision = activeRevision + :one",
            ExpressionAttributeValues: { ":one": 1 },
          }),
        ),
    });
    try {
      expect(
        await f.process({ ...f.workerDeps("timed-out-admission"), engine: lossy.engine }, received),
      ).toBe("ack");
    } finally {
      lossy.destroy();
    }
    expect(lossy.injected.count).toBe(1);
    const runs = (await f.runs()).filter((r) => r.jobId === job.jobId);
    expect(runs.map((r) => [r.status, r.fence])).toEqual([["SUCCEEDED", 1]]);
  });

  /** The job's other run admitted as a worker of this version admits it: it runs to its end. */
  const admittedHere = (second: Run) => () =>
    processRun(f.workerDeps("other-run"), deliveryOfRun(f.engine, second));
  /** As a worker of an earlier version admits it (during a deploy): its mark on the job alone. */
  const admittedByEarlierVersion = (second: Run) => () =>
    f.engine.doc.send(
      new UpdateCommand({
        TableName: f.engine.tables.jobs,
        Key: jobKey(second.jobId),
        UpdateExpression:
          "SET activeRevision = activeRevision + :one, lastAdmission = :mark, activeRuns.#runId = :lease",
        ExpressionAttributeNames: { "#runId": second.runId },
        ExpressionAttributeValues: {
          ":one": 1,
          ":mark": randomUUID(),
          ":lease": new Date(Date.now() + 60_000).toISOString(),
        },
      }),
    );

  it.each([
    ["this version's", admittedHere],
    ["an earlier version's", admittedByEarlierVersion],
  ])(
    "a run's admission still runs its run when %s admission of another run of the job landed before the SDK sent it again",
    async (_, otherAdmission) => {
      const { job } = await createJob(
        f.engine,
        testJob({
          schedule: { cron: "0 0 1 1 *", timezone: "UTC" },
          policies: { ...testJob().policies, overlap: "allow", maxConcurrent: 2 },
        }),
      );
      const first = await triggerJob(f.engine, job.tenantId, job.jobId);
      const second = await triggerJob(f.engine, job.tenantId, job.jobId);
      const lossy = withLostAnswers(f.engine, {
        operation: "UpdateItem",
        times: 1,
        match: (input) =>
          String(input.UpdateExpression).includes("activeRuns.#runId = :leaseUntil") &&
          (input.ExpressionAttributeNames as Record<string, string> | undefined)?.["#runId"] ===
            first.runId,
        error: timedOutAnswer,
        // The job's other run is admitted in the seconds before the SDK sends the first run's
        // admission again.
        meanwhile: otherAdmission(second),
      });
      try {
        expect(
          await processRun(
            { ...f.workerDeps("timed-out-admission"), engine: lossy.engine },
            deliveryOfRun(f.engine, first),
          ),
        ).toBe("ack");
      } finally {
        lossy.destroy();
      }
      expect(lossy.injected.count).toBe(1);
      expect((await getRun(f.engine, first))?.status).toBe("SUCCEEDED");
    },
  );
});
