import { ProvisionedThroughputExceededException } from "@aws-sdk/client-dynamodb";
import { UpdateCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createApiApp } from "../../shared/api/app.js";
import { bearerAuthenticator } from "../../shared/api/auth.js";
import { JobSchema } from "../../shared/api/schemas/jobs.js";
import { createJob, triggerJob } from "../../shared/jobs/index.js";
import { jobKey } from "../../shared/storage/items.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { createTestClients, type TestClients } from "../support/namespace.js";
import { JOB_TYPES } from "./support.js";

/**
 * A write that has committed is answered as done, though storage fails the reads its answer is
 * shown from (throttled past the SDK's retries): told it failed, the caller would send it again,
 * and an edit sent again at the version it read meets its own version, a 412 that blames it.
 */
const KEY = "committed-answers-key";
const TENANT = "tenant-committed";
const HOUR = 3_600_000;

describe("a committed write whose answer's reads storage throttles", () => {
  let f: EngineFixture;
  const clients: TestClients[] = [];
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(async () => {
    for (const c of clients) c.destroy();
    await f.destroy();
  });

  /**
   * An API over clients whose reads of the runs table (the answer's runs under way) are throttled
   * once a transaction that moves a job's version (an edit's) has committed.
   */
  function apiThrottlingRunReadsAfterAnEdit() {
    const faulty = createTestClients();
    clients.push(faulty);
    const state = { committed: false, refused: 0 };
    faulty.doc.middlewareStack.add(
      (next, context) => async (args) => {
        const command = context.commandName ?? "";
        const input = args.input as Record<string, unknown>;
        if (state.committed && command.startsWith("BatchGetItem")) {
          state.refused++;
          throw new ProvisionedThroughputExceededException({
            message: "The level of configured provisioned throughput for the table was exceeded",
            $metadata: { httpStatusCode: 400 },
          });
        }
        const result = await next(args);
        if (
          command.startsWith("TransactWriteItems") &&
          JSON.stringify(input).includes("version = version + :one")
        )
          state.committed = true;
        return result;
      },
      { step: "initialize", name: "throttleRunReadsAfterAnEdit" },
    );
    const app = createApiApp({
      engine: { ...f.engine, doc: faulty.doc },
      jobTypes: JOB_TYPES,
      authenticate: bearerAuthenticator(new Map([[KEY, TENANT]])),
    });
    return { app, state };
  }

  it("an edit of a job with a run under way answers 200 with the edited job, not a 503", async () => {
    const startAt = new Date(Date.now() + 3 * HOUR).toISOString();
    const { job } = await createJob(
      f.engine,
      testJob({ tenantId: TENANT, schedule: { every: "PT1H", startAt } }),
    );
    // A run under way: its admission lists it on the job, so every answer of the job reads it.
    const run = await triggerJob(f.engine, TENANT, job.jobId);
    await f.engine.doc.send(
      new UpdateCommand({
        TableName: f.engine.tables.jobs,
        Key: jobKey(job.jobId),
        UpdateExpression: "SET activeRuns.#run = :lease",
        ExpressionAttributeNames: { "#run": run.runId },
        ExpressionAttributeValues: { ":lease": new Date(Date.now() + HOUR).toISOString() },
      }),
    );
    const { app, state } = apiThrottlingRunReadsAfterAnEdit();
    const response = await app.request(`/jobs/${job.jobId}`, {
      method: "PATCH",
      headers: {
        Authorization: `Bearer ${KEY}`,
        "Content-Type": "application/json",
        "If-Match": '"1"',
      },
      body: JSON.stringify({ name: "renamed" }),
    });
    const text = await response.text();
    expect(state.refused).toBeGreaterThan(0);
    expect(response.status, text).toBe(200);
    expect(response.headers.get("etag")).toBe('"2"');
    expect(JobSchema.parse(JSON.parse(text))).toMatchObject({ name: "renamed", version: 2 });
  });
});
