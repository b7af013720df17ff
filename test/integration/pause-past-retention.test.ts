import { UpdateCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Clock, offsetClock } from "../../shared/clock.js";
import type { Engine } from "../../shared/engine.js";
import { processRun } from "../../shared/execution/worker.js";
import { createJob, pauseJob, resumeJob } from "../../shared/jobs/index.js";
import type { Run } from "../../shared/model.js";
import { sweepExpired } from "../../shared/storage/expiry-sweep.js";
import { runExpiresAt } from "../../shared/storage/retention.js";
import { getJob, runKeyOf } from "../../shared/storage/run-reads.js";
import {
  createEngineFixture,
  deliveryOfRun,
  type EngineFixture,
  engineAt,
  testJob,
} from "../support/engine-fixture.js";

const TENANT = "tenant-a";
const DAY = 24 * 3_600_000;
/** An operator who keeps one day of history (`-c retentionDays=1`). */
const RETENTION_DAYS = 1;

/**
 * A pause that outlasts the run history's retention: the runs it parked (and a one-off's run that
 * ended while it was paused) reach their TTL before the resume. DynamoDB deletes them (the expiry
 * sweep here); the resume must still leave the job with something to run, or ended.
 */
describe("a pause longer than the retention", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({ settings: { retentionDays: RETENTION_DAYS } });
  });
  afterAll(() => f.destroy());

  /** A clock that reads `ms` (epoch) now and runs on from there. */
  const at = (ms: number): Clock => offsetClock(ms - Date.now());
  const withClock = (clock: Clock): Engine => ({ ...f.engine, clock });
  const runsOf = async (jobId: string) => (await f.runs()).filter((r) => r.jobId === jobId);
  const deliver = (run: Run, clock: Clock, handlers = {}) => {
    const received = deliveryOfRun(f.engine, run);
    return processRun({ ...f.workerDeps("w", handlers), engine: withClock(clock) }, received);
  };

  /** A one-off due in a minute, and the run its create claimed. */
  const oneOffClaimedAtCreate = async () => {
    const runAt = new Date(Date.now() + 60_000);
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { runAt: runAt.toISOString() } }),
    );
    const [claimed] = await runsOf(job.jobId);
    if (!claimed) throw new Error("not claimed at create");
    return { job, runAt, claimed };
  };

  it("gives a one-off whose parked run expired (parked with a TTL, by a release before parked runs dropped theirs) its occurrence back: it runs", async () => {
    const { job, runAt, claimed } = await oneOffClaimedAtCreate();
    await pauseJob(f.engine, TENANT, job.jobId);
    await deliver(claimed, at(runAt.getTime()));
    expect((await runsOf(job.jobId)).map((r) => r.reason)).toEqual(["waiting: job paused"]);
    // Parked by a release that left the run its TTL: a retention after it was queued.
    await f.engine.doc.send(
      new UpdateCommand({
        TableName: f.engine.tables.runs,
        Key: runKeyOf(claimed),
        UpdateExpression: "SET expiresAt = :expiresAt",
        ExpressionAttributeValues: { ":expiresAt": runExpiresAt(new Date(), f.engine.settings) },
      }),
    );

    // Two days later: the parked run's TTL has passed and DynamoDB has deleted it.
    const later = runAt.getTime() + 2 * RETENTION_DAYS * DAY;
    await sweepExpired(f.engine, new Date(later));
    expect(await runsOf(job.jobId)).toEqual([]);
    const warned: { message: string; fields: Record<string, unknown> }[] = [];
    const resuming = engineAt(f.engine, later);
    const warn = (message: string, fields: Record<string, unknown> = {}) =>
      void warned.push({ message, fields });
    await resumeJob(
      { ...resuming, obs: { ...resuming.obs, log: { ...resuming.obs.log, warn } } },
      TENANT,
      job.jobId,
    );
    // The operator's line names the job's tenant, whom the lost runs are to be told of.
    expect(warned.find((l) => l.message.startsWith("resume: parked runs expired"))?.fields).toEqual(
      {
        tenantId: TENANT,
        jobId: job.jobId,
        runIds: [claimed.runId],
      },
    );

    // fire_once: the occurrence runs, late, once.
    const delivery = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    await processRun({ ...f.workerDeps("w"), engine: engineAt(f.engine, later) }, delivery);
    expect((await runsOf(job.jobId)).map((r) => r.status)).toEqual(["SUCCEEDED"]);
    expect(await getJob(f.engine, job.jobId)).toMatchObject({ status: "COMPLETED" });
  }, 30_000);

  it("completes a one-off whose run ended while paused and then expired", async () => {
    const { job, runAt, claimed } = await oneOffClaimedAtCreate();
    // Paused while its run runs: the run's ending leaves the paused one-off PAUSED.
    let pause: Promise<unknown> = Promise.resolve();
    await deliver(claimed, at(runAt.getTime()), {
      noop: async () => {
        pause = pauseJob(f.engine, TENANT, job.jobId);
        await pause;
      },
    });
    await pause;
    expect((await runsOf(job.jobId)).map((r) => r.status)).toEqual(["SUCCEEDED"]);
    expect((await getJob(f.engine, job.jobId))?.status).toBe("PAUSED");

    const later = runAt.getTime() + 2 * RETENTION_DAYS * DAY;
    await sweepExpired(f.engine, new Date(later));
    expect(await runsOf(job.jobId)).toEqual([]);
    await resumeJob(engineAt(f.engine, later), TENANT, job.jobId);
    expect(await getJob(f.engine, job.jobId)).toMatchObject({ status: "COMPLETED" });
  }, 30_000);

  it("gives a resumed parked run a fresh retention, so its TTL does not delete it while it runs", async () => {
    const { job, runAt, claimed } = await oneOffClaimedAtCreate();
    await pauseJob(f.engine, TENANT, job.jobId);
    await deliver(claimed, at(runAt.getTime()));
    // Resumed just before the parked run's TTL: it is sent again and must outlive its run.
    const resumedAt = runAt.getTime() + RETENTION_DAYS * DAY - 60_000;
    await resumeJob(engineAt(f.engine, resumedAt), TENANT, job.jobId);
    await sweepExpired(f.engine, new Date(resumedAt + 120_000));
    expect((await runsOf(job.jobId)).map((r) => r.status)).toEqual(["QUEUED"]);
    const delivery = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    await processRun({ ...f.workerDeps("w"), engine: engineAt(f.engine, resumedAt) }, delivery);
    expect((await runsOf(job.jobId)).map((r) => r.status)).toEqual(["SUCCEEDED"]);
  }, 30_000);
});
