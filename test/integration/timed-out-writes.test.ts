import { UpdateCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createJob } from "../../shared/jobs/index.js";
import { jobKey } from "../../shared/storage/items.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
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
});
