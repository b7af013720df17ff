import { DeleteCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JobError, type JobHandler } from "../../shared/execution/job-contract.js";
import { processRun } from "../../shared/execution/worker.js";
import { createJob, replayDeadLetter, triggerJob } from "../../shared/jobs/index.js";
import { getTenantJob } from "../../shared/jobs/queries.js";
import { runKey } from "../../shared/storage/runs.js";
import {
  createEngineFixture,
  deliveryOfRun,
  type EngineFixture,
  farJob,
} from "../support/engine-fixture.js";
import { refusedEditOnto } from "../support/triggered-instant.js";

/**
 * Adversarial review h94 of refuseNoOccurrenceTime. Whether a later attempt is a triggered run's
 * is read from its first attempt (isOccurrenceRun: a retry or replay carries no `triggered`), and
 * a first attempt that is gone counts as an occurrence's. Runs expire one by one: a dead triggered
 * run is kept deadLetterRetentionDays (30) after its death, and its replay, made d days later, a
 * retention (30) after its own ending, so for d days TTL has deleted the first attempt while the
 * replay is still there. An edit onto
 * that time is then taken for a move onto an occurrence's, and files the one-off as the triggered
 * run's next attempt, under its webhook-id: what 1bfc3cd refuses.
 */
describe("an edit onto the time of a triggered run whose first attempt has expired", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({ settings: { shardCount: 1, maxShardCount: 1 } });
  });
  afterAll(() => f.destroy());

  it("is refused naming schedule.runAt and the triggered run, as while its first attempt was there", async () => {
    const handlers: Record<string, JobHandler> = {
      once: async () => {
        throw new JobError("target down", { retryable: false });
      },
    };
    const { job } = await createJob(f.engine, { ...farJob("tenant-a"), type: "once" });
    const triggered = await triggerJob(f.engine, job.tenantId, job.jobId);
    await processRun(f.workerDeps("w", handlers), deliveryOfRun(f.engine, triggered));
    const dead = (await f.runs()).find((r) => r.runId === triggered.runId);
    expect(dead?.status).toBe("DEAD");
    const { run: replay } = await replayDeadLetter(f.engine, job.tenantId, triggered.runId);
    await processRun(f.workerDeps("w", handlers), deliveryOfRun(f.engine, replay));
    expect((await f.runs()).find((r) => r.runId === replay.runId)?.status).toBe("DEAD");

    // The first attempt's TTL has come (DynamoDB Local deletes nothing by TTL).
    await f.engine.doc.send(
      new DeleteCommand({
        TableName: f.engine.tables.runs,
        Key: runKey(job.jobId, triggered.scheduledFor, 1),
      }),
    );
    const current = await getTenantJob(f.engine, job.tenantId, job.jobId);
    const issue = await refusedEditOnto(f.engine, current, replay);
    expect(issue.message).toContain(`a triggered run (${replay.runId}, dead)`);
  });
});
