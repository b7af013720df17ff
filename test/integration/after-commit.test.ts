import { ProvisionedThroughputExceededException } from "@aws-sdk/client-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import { VersionMismatchError } from "../../shared/errors.js";
import { createJob, editJob, pauseJob, resumeJob, triggerJob } from "../../shared/jobs/index.js";
import { METRICS } from "../../shared/observability.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { tableOf, withFaults } from "../support/faults.js";
import { createTestClients } from "../support/namespace.js";

const SECOND = 1000;
const HOUR = 3_600_000;

type Input = Record<string, unknown>;
type TransactItem = Record<
  string,
  { TableName?: string; Key?: Record<string, unknown> } | undefined
>;
const transactItems = (input: Input) => (input.TransactItems as TransactItem[] | undefined) ?? [];

describe("a write that has committed is answered as done, whatever its fast path meets", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({ settings: { shardCount: 1, maxShardCount: 1 } });
  });
  afterAll(() => f.destroy());

  /**
   * A claim's transaction deletes a due entry of `jobId` and moves the job on, counting its
   * queued occurrences (an edit's deletes an entry too, but counts nothing).
   */
  const isClaimOf = (jobId: string) => (input: Input) =>
    transactItems(input).some(
      (item) =>
        String(item.Delete?.Key?.pk).startsWith("DUE#") &&
        String(item.Delete?.Key?.sk).includes(`#${jobId}#`),
    ) &&
    transactItems(input).some((item) =>
      String((item.Update as { UpdateExpression?: string } | undefined)?.UpdateExpression).includes(
        "occurrencesQueued",
      ),
    );

  const soonEvery = () => ({
    every: "PT1H",
    startAt: new Date(Date.now() + 30 * SECOND).toISOString(),
  });
  const laterEvery = () => ({
    every: "PT1H",
    startAt: new Date(Date.now() + 3 * HOUR).toISOString(),
  });

  /** The job's runs once a dispatcher pass has run: the entry the fast path left is claimed. */
  async function runsAfterPass(jobId: string) {
    await dispatchShard(f.engine, 0, `pass-${jobId}`);
    return (await f.runs()).filter((r) => r.jobId === jobId).map((r) => r.status);
  }

  it("edit: a fast-path claim that fails answers with the edited job; the next pass claims it", async () => {
    const { job } = await createJob(f.engine, testJob({ schedule: laterEvery() }));
    const before = f.metrics.sum(METRICS.fastPathFailures, { operation: "edit" });
    const faulty = withFaults(f.engine, {
      operation: "TransactWriteItems",
      times: 1,
      match: isClaimOf(job.jobId),
      reason: "ValidationError",
      conflictOn: (item) => item.Put !== undefined,
    });
    try {
      const edited = await editJob(faulty.engine, job.tenantId, job.jobId, 1, {
        schedule: soonEvery(),
      });
      expect(edited.version).toBe(2);
      expect(faulty.injected.count).toBe(1);
    } finally {
      faulty.destroy();
    }
    expect(f.metrics.sum(METRICS.fastPathFailures, { operation: "edit" }) - before).toBe(1);
    expect((await f.dueEntries()).filter((d) => d.jobId === job.jobId)).toHaveLength(1);
    expect(await runsAfterPass(job.jobId)).toEqual(["QUEUED"]);
  });

  it("edit: its job's read after the commit throttled past the retries answers with the edited job, not a 503 whose repeat is a 412", async () => {
    const { job } = await createJob(f.engine, testJob({ schedule: laterEvery() }));
    // Every read of the job fails once the edit's transaction (the one that moves its version)
    // has committed: storage throttled from then on.
    const clients = createTestClients();
    let committed = false;
    let refused = 0;
    clients.doc.middlewareStack.add(
      (next, context) => async (args) => {
        const input = args.input as Input;
        const command = context.commandName ?? "";
        const readsTheJob =
          command.startsWith("GetItem") &&
          (input.Key as { pk?: unknown } | undefined)?.pk === `JOB#${job.jobId}`;
        if (committed && readsTheJob) {
          refused++;
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
          committed = true;
        return result;
      },
      { step: "initialize", name: "throttleJobReadsAfterTheEdit" },
    );
    try {
      const edited = await editJob({ ...f.engine, doc: clients.doc }, job.tenantId, job.jobId, 1, {
        name: "renamed",
      });
      expect(refused).toBeGreaterThan(0);
      expect(edited).toMatchObject({ version: 2, name: "renamed" });
    } finally {
      clients.destroy();
    }
    // What a caller told to try again would have met: its own version.
    await expect(
      editJob(f.engine, job.tenantId, job.jobId, 1, { name: "renamed" }),
    ).rejects.toBeInstanceOf(VersionMismatchError);
  });

  it("resume: a fast-path claim that fails answers with the resumed job; the next pass claims it", async () => {
    const { job } = await createJob(f.engine, testJob({ schedule: laterEvery() }));
    await pauseJob(f.engine, job.tenantId, job.jobId);
    await editJob(f.engine, job.tenantId, job.jobId, 1, { schedule: soonEvery() });
    const faulty = withFaults(f.engine, {
      operation: "TransactWriteItems",
      times: 1,
      match: isClaimOf(job.jobId),
      reason: "ValidationError",
      conflictOn: (item) => item.Put !== undefined,
    });
    try {
      const resumed = await resumeJob(faulty.engine, job.tenantId, job.jobId);
      expect(resumed.status).toBe("ACTIVE");
      expect(faulty.injected.count).toBe(1);
    } finally {
      faulty.destroy();
    }
    expect(f.metrics.sum(METRICS.fastPathFailures, { operation: "resume" })).toBe(1);
    expect(await runsAfterPass(job.jobId)).toEqual(["QUEUED"]);
  });

  it("create with an idempotency key: a cancelled transaction is sent again and the job is created once", async () => {
    const faulty = withFaults(f.engine, {
      operation: "TransactWriteItems",
      times: 3,
      match: (input) => transactItems(input).some((item) => item.Put?.TableName !== undefined),
      reason: "TransactionConflict",
    });
    try {
      const created = await createJob(faulty.engine, testJob({ schedule: laterEvery() }), {
        idempotency: { key: "create-under-conflict", requestHash: "h1" },
      });
      expect(created.created).toBe(true);
      expect(faulty.injected.count).toBe(3);
      const again = await createJob(f.engine, testJob({ schedule: laterEvery() }), {
        idempotency: { key: "create-under-conflict", requestHash: "h1" },
      });
      expect(again.job.jobId).toBe(created.job.jobId);
    } finally {
      faulty.destroy();
    }
    expect(f.metrics.sum(METRICS.writeContention, { operation: "create" })).toBe(3);
  });

  it("trigger: a cancelled transaction is sent again and one run is queued", async () => {
    const { job } = await createJob(f.engine, testJob({ schedule: laterEvery() }));
    const faulty = withFaults(f.engine, {
      operation: "TransactWriteItems",
      times: 2,
      match: (input) => transactItems(input).some((item) => tableOf(item) === f.engine.tables.runs),
      reason: "TransactionConflict",
    });
    try {
      const run = await triggerJob(faulty.engine, job.tenantId, job.jobId);
      expect(run.status).toBe("QUEUED");
      expect(faulty.injected.count).toBe(2);
    } finally {
      faulty.destroy();
    }
    expect((await f.runs()).filter((r) => r.jobId === job.jobId)).toHaveLength(1);
    expect(f.metrics.sum(METRICS.writeContention, { operation: "trigger" })).toBe(2);
  });
});
