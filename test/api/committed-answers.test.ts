import { ProvisionedThroughputExceededException } from "@aws-sdk/client-dynamodb";
import { UpdateCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { createApiApp } from "../../shared/api/app.js";
import { bearerAuthenticator } from "../../shared/api/auth.js";
import { JobSchema } from "../../shared/api/schemas/jobs.js";
import { createJob, triggerJob } from "../../shared/jobs/index.js";
import { silentObservability } from "../../shared/observability.js";
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
const HEADERS = { Authorization: `Bearer ${KEY}`, "Content-Type": "application/json" };

type Input = Record<string, unknown>;

const BatchAnswer = z.object({
  results: z.array(z.object({ status: z.number(), job: z.object({ id: z.string() }).optional() })),
});

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
   * once `committed` has seen a write of the request go through.
   */
  function apiThrottlingRunReadsOnce(committed: (command: string, input: Input) => boolean) {
    const faulty = createTestClients();
    clients.push(faulty);
    const state = { committed: false, refused: 0 };
    faulty.doc.middlewareStack.add(
      (next, context) => async (args) => {
        const command = context.commandName ?? "";
        const input = args.input as Input;
        const readsRuns =
          command.startsWith("BatchGetItem") &&
          Object.keys((input.RequestItems as Input | undefined) ?? {}).includes(
            f.engine.tables.runs,
          );
        if (state.committed && readsRuns) {
          state.refused++;
          throw new ProvisionedThroughputExceededException({
            message: "The level of configured provisioned throughput for the table was exceeded",
            $metadata: { httpStatusCode: 400 },
          });
        }
        const result = await next(args);
        if (committed(command, input)) state.committed = true;
        return result;
      },
      { step: "initialize", name: "throttleRunReadsAfterTheWrite" },
    );
    // What the operator is told of an answer given as written: a warning per failed read.
    const warnings: { message: string; fields: Record<string, unknown> }[] = [];
    const obs = {
      ...silentObservability,
      log: {
        ...silentObservability.log,
        warn: (message: string, fields: Record<string, unknown> = {}) =>
          void warnings.push({ message, fields }),
      },
    };
    const app = createApiApp({
      engine: { ...f.engine, doc: faulty.doc, obs },
      jobTypes: JOB_TYPES,
      authenticate: bearerAuthenticator(new Map([[KEY, TENANT]])),
    });
    return { app, state, warnings };
  }

  /** Lists `runId` on its job as its admission does for a run under way: every answer reads it. */
  async function listUnderWay(jobId: string, runId: string) {
    await f.engine.doc.send(
      new UpdateCommand({
        TableName: f.engine.tables.jobs,
        Key: jobKey(jobId),
        UpdateExpression: "SET activeRuns.#run = :lease",
        ExpressionAttributeNames: { "#run": runId },
        ExpressionAttributeValues: { ":lease": new Date(Date.now() + HOUR).toISOString() },
      }),
    );
  }

  const hourly = () => ({
    every: "PT1H",
    startAt: new Date(Date.now() + 3 * HOUR).toISOString(),
  });

  it("an edit of a job with a run under way answers 200 with the edited job, not a 503", async () => {
    const { job } = await createJob(f.engine, testJob({ tenantId: TENANT, schedule: hourly() }));
    await listUnderWay(job.jobId, (await triggerJob(f.engine, TENANT, job.jobId)).runId);
    const { app, state, warnings } = apiThrottlingRunReadsOnce(
      (command, input) =>
        command.startsWith("TransactWriteItems") &&
        JSON.stringify(input).includes("version = version + :one"),
    );
    const response = await app.request(`/jobs/${job.jobId}`, {
      method: "PATCH",
      headers: { ...HEADERS, "If-Match": '"1"' },
      body: JSON.stringify({ name: "renamed" }),
    });
    const text = await response.text();
    expect(state.refused).toBeGreaterThan(0);
    expect(response.status, text).toBe(200);
    expect(response.headers.get("etag")).toBe('"2"');
    expect(JobSchema.parse(JSON.parse(text))).toMatchObject({ name: "renamed", version: 2 });
    // The job's own re-read and the answer's read of its runs: each line names whose job it is.
    expect(warnings.map((w) => w.message)).toEqual([
      "could not read an edited job again; answering it as written",
      "could not read written jobs' runs under way; answering them as written",
    ]);
    for (const { fields } of warnings) expect(fields).toMatchObject({ tenantId: TENANT });
  });

  it("a batch with a keyed repeat whose job has a run under way answers each job, not a 503 that would create the new ones again", async () => {
    const keyed = { type: "noop", schedule: hourly(), idempotencyKey: "batch-repeat" };
    const first = await createApiApp({
      engine: f.engine,
      jobTypes: JOB_TYPES,
      authenticate: bearerAuthenticator(new Map([[KEY, TENANT]])),
    }).request("/jobs:batch", {
      method: "POST",
      headers: HEADERS,
      body: JSON.stringify({ jobs: [keyed] }),
    });
    const made = BatchAnswer.parse(await first.json()).results[0]?.job?.id ?? "";
    await listUnderWay(made, (await triggerJob(f.engine, TENANT, made)).runId);
    const jobsBefore = (await f.jobs()).length;
    // Throttled from the first job written on: the new job's put has gone through.
    const { app, state, warnings } = apiThrottlingRunReadsOnce(
      (command, input) =>
        (command.startsWith("PutItem") || command.startsWith("BatchWriteItem")) &&
        JSON.stringify(input).includes("a new one"),
    );
    const response = await app.request("/jobs:batch", {
      method: "POST",
      headers: HEADERS,
      body: JSON.stringify({
        jobs: [keyed, { type: "noop", name: "a new one", schedule: hourly() }],
      }),
    });
    const text = await response.text();
    expect(state.refused).toBeGreaterThan(0);
    expect(response.status, text).toBe(200);
    const { results } = BatchAnswer.parse(JSON.parse(text));
    expect(results.map((r) => [r.status, r.job?.id === made])).toEqual([
      [200, true],
      [201, false],
    ]);
    expect((await f.jobs()).length).toBe(jobsBefore + 1);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]?.fields).toMatchObject({ tenantId: TENANT, jobIds: [made] });
  });
});
