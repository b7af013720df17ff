import { GetCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { offsetClock } from "../../shared/clock.js";
import { tickOnce } from "../../shared/dispatch/tick.js";
import { JobNotFoundError, NotReplayableError } from "../../shared/errors.js";
import {
  cancelJob,
  createJob,
  editJob,
  replayDeadLetter,
  triggerJob,
} from "../../shared/jobs/index.js";
import { getTenantJob, listDeadLetters, listJobs } from "../../shared/jobs/queries.js";
import { pushQueuedDeadline } from "../../shared/storage/inflight.js";
import { jobKey } from "../../shared/storage/items.js";
import {
  createEngineFixture,
  type EngineFixture,
  jobWithDeadRun,
  testJob,
} from "../support/engine-fixture.js";

const TENANT = "tenant-expired";
const HOUR = 3_600_000;
const DAY = 24 * HOUR;

/**
 * A job past its retention has expired: DynamoDB's TTL deletes its item some time later (within
 * days), and until then the item is still there to read. Every reader takes it as gone, as it
 * will be: what a request gets must not depend on when TTL comes round.
 */
describe("a job past its retention that TTL has not deleted yet", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  /** The engine as it is `ms` from now. */
  const engineAt = (ms: number) => ({ ...f.engine, clock: offsetClock(ms) });

  /** A one-off whose only occurrence was past its grace under `skip`: completed as it is created. */
  async function completedJob() {
    const { job } = await createJob(
      f.engine,
      testJob({
        tenantId: TENANT,
        schedule: { runAt: new Date(Date.now() - HOUR).toISOString() },
        policies: { ...testJob().policies, misfire: "skip" },
      }),
    );
    expect(job.status).toBe("COMPLETED");
    return job;
  }

  it("is not found, and a trigger does not bring it back", async () => {
    const job = await completedJob();
    const retention =
      Math.max(f.engine.settings.retentionDays, f.engine.settings.deadLetterRetentionDays) * DAY;
    // Inside its retention it is there to read.
    expect((await getTenantJob(engineAt(retention - HOUR), TENANT, job.jobId)).status).toBe(
      "COMPLETED",
    );

    const expired = engineAt(retention + HOUR);
    await expect(getTenantJob(expired, TENANT, job.jobId)).rejects.toBeInstanceOf(JobNotFoundError);
    await expect(triggerJob(expired, TENANT, job.jobId)).rejects.toBeInstanceOf(JobNotFoundError);
    const runs = (await f.runs()).filter((run) => run.jobId === job.jobId);
    // Its one run: the occurrence recorded SKIPPED at the create; no triggered one.
    expect(runs.map((run) => run.status)).toEqual(["SKIPPED"]);
  });

  it("a trigger that read it just before its expiry, and writes after, does not bring it back", async () => {
    const job = await completedJob();
    const retention =
      Math.max(f.engine.settings.retentionDays, f.engine.settings.deadLetterRetentionDays) * DAY;
    // The trigger's read of the job comes a second before its expiry; every later instant, a
    // second past it: the request crosses the expiry between its read and its writes.
    let reads = 0;
    const crossing = {
      ...f.engine,
      clock: () => new Date(Date.now() + retention + (reads++ === 0 ? -1_000 : 1_000)),
    };
    await expect(triggerJob(crossing, TENANT, job.jobId)).rejects.toBeInstanceOf(JobNotFoundError);
    const later = engineAt(retention + HOUR);
    await expect(getTenantJob(later, TENANT, job.jobId)).rejects.toBeInstanceOf(JobNotFoundError);
    const runs = (await f.runs()).filter((run) => run.jobId === job.jobId);
    expect(runs.map((run) => run.status)).toEqual(["SKIPPED"]);
  });

  it("a replay that read it just before its expiry, and writes after, does not bring it back", async () => {
    const { job, dead } = await jobWithDeadRun(f, { tenantId: TENANT });
    const completed = await getTenantJob(f.engine, TENANT, job.jobId);
    expect(completed.status).toBe("COMPLETED");
    const { Item: item } = await f.engine.doc.send(
      new GetCommand({
        TableName: f.engine.tables.jobs,
        Key: jobKey(job.jobId),
        ConsistentRead: true,
      }),
    );
    const expiresAtMs = Number(item?.expiresAt) * 1000;
    // The replay's read of the job comes a second before its expiry; every later instant, after it.
    let reads = 0;
    const crossing = {
      ...f.engine,
      clock: () => new Date(expiresAtMs + (reads++ === 0 ? -1_000 : 1_000)),
    };
    const refused = replayDeadLetter(crossing, TENANT, dead?.runId ?? "");
    await expect(refused).rejects.toBeInstanceOf(NotReplayableError);
    // The reason names what may have become of a completed job, not only a delete or a cancel.
    await expect(refused).rejects.toThrow(/completed/);
    const later = engineAt(expiresAtMs - Date.now() + HOUR);
    await expect(getTenantJob(later, TENANT, job.jobId)).rejects.toBeInstanceOf(JobNotFoundError);
    expect((await f.runs()).filter((run) => run.jobId === job.jobId)).toHaveLength(1);
  });

  it("a run's first delivery after its job expired ends it unrun, as a later delivery does", async () => {
    const startAt = new Date(Math.ceil((Date.now() + 2_000) / 1_000) * 1_000);
    const { job } = await createJob(
      f.engine,
      testJob({
        tenantId: TENANT,
        schedule: { every: "PT1M", startAt: startAt.toISOString() },
        maxRuns: 1,
      }),
    );
    // Its one occurrence claimed, the job completes; nothing looks at the run after that.
    const due = engineAt(startAt.getTime() - Date.now() + 1_000);
    await tickOnce(due, "expired-first-delivery");
    expect((await getTenantJob(due, TENANT, job.jobId)).status).toBe("COMPLETED");
    const { Item: item } = await f.engine.doc.send(
      new GetCommand({
        TableName: f.engine.tables.jobs,
        Key: jobKey(job.jobId),
        ConsistentRead: true,
      }),
    );
    const expired = engineAt(Number(item?.expiresAt) * 1000 - Date.now() + HOUR);
    const delivery = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    expect(delivery.receiveCount).toBe(1);
    // Its reaper deadline moved on past the expiry (a re-send), so the delivery may hold its start
    // unwritten and decide on the job as read with the run.
    const deadline = new Date(expired.clock().getTime() + 10 * 60_000);
    expect(await pushQueuedDeadline(expired, delivery.message, 0, deadline)).toBe(true);
    await f.process({ ...f.workerDeps("w"), engine: expired }, delivery);
    const runs = (await f.runs()).filter((run) => run.jobId === job.jobId);
    expect(runs.map((run) => [run.status, run.reason])).toEqual([
      ["CANCELLED", "job no longer exists"],
    ]);
  });

  it("a cancelled job's dead letter stays listed past the job's expiry, its replay refused as for a job gone", async () => {
    const startAt = new Date(Math.ceil((Date.now() + 2_000) / 1_000) * 1_000);
    const { job } = await createJob(
      f.engine,
      testJob({
        tenantId: TENANT,
        type: "fail",
        payload: { times: 1, retryable: false },
        schedule: { every: "PT1H", startAt: startAt.toISOString() },
      }),
    );
    await tickOnce(engineAt(startAt.getTime() - Date.now() + 1_000), "cancelled-dead-letter");
    await f.process(f.workerDeps("w"), await f.nextDelivery(f.engine.queues.normal, job.jobId));
    const [dead] = (await f.runs()).filter((run) => run.jobId === job.jobId);
    expect(dead?.status).toBe("DEAD");
    await cancelJob(f.engine, TENANT, job.jobId);
    const listed = async (engine: ReturnType<typeof engineAt>) =>
      (await listDeadLetters(engine, TENANT, { limit: 100 })).items.map((r) => r.runId);

    // While the cancelled job is kept, its replay is the cancel's 409.
    const kept = engineAt(f.engine.settings.retentionDays * DAY - HOUR);
    expect(await listed(kept)).toContain(dead?.runId);
    await expect(replayDeadLetter(kept, TENANT, dead?.runId ?? "")).rejects.toThrow(
      /a job that is cancelled/,
    );
    // Once it has expired (TTL not come yet), the dead letter is still listed (runs are read until
    // TTL deletes them: architecture.md, Known limits), and its replay says the job no longer
    // exists; nothing is written.
    const expired = engineAt(f.engine.settings.retentionDays * DAY + HOUR);
    expect(await listed(expired)).toContain(dead?.runId);
    const refused = replayDeadLetter(expired, TENANT, dead?.runId ?? "");
    await expect(refused).rejects.toBeInstanceOf(NotReplayableError);
    await expect(refused).rejects.toThrow(/its job no longer exists/);
    expect((await f.runs()).filter((run) => run.jobId === job.jobId)).toHaveLength(1);
  });

  it("a dependent keeps its cancelled upstream through a schedule edit until the upstream expires, then the edit is a 400", async () => {
    const { job: upstream } = await createJob(f.engine, testJob({ tenantId: TENANT }));
    const { job: other } = await createJob(f.engine, testJob({ tenantId: TENANT }));
    const { job: dependent } = await createJob(
      f.engine,
      testJob({
        tenantId: TENANT,
        schedule: { after: { jobs: [upstream.jobId], on: "success" } },
      }),
    );
    await cancelJob(f.engine, TENANT, upstream.jobId);
    const bothUpstreams = {
      schedule: { after: { jobs: [upstream.jobId, other.jobId], on: "success" as const } },
    };
    const kept = engineAt(f.engine.settings.retentionDays * DAY - HOUR);
    const edited = await editJob(kept, TENANT, dependent.jobId, dependent.version, bothUpstreams);
    // Gone once expired, as a deleted upstream is: an edit of the schedule that keeps it names it.
    const expired = engineAt(f.engine.settings.retentionDays * DAY + HOUR);
    const onFailure = {
      schedule: { after: { jobs: [upstream.jobId, other.jobId], on: "failure" as const } },
    };
    await expect(
      editJob(expired, TENANT, dependent.jobId, edited.version, onFailure),
    ).rejects.toThrow(`no job ${upstream.jobId} of this tenant`);
    const dropped = { schedule: { after: { jobs: [other.jobId], on: "success" as const } } };
    expect(
      (await editJob(expired, TENANT, dependent.jobId, edited.version, dropped)).schedule,
    ).toEqual(dropped.schedule);
  });

  it("is not listed among its tenant's jobs", async () => {
    const { job } = await createJob(f.engine, testJob({ tenantId: TENANT, name: "to cancel" }));
    await cancelJob(f.engine, TENANT, job.jobId);
    const listed = async (engine: ReturnType<typeof engineAt>) =>
      (await listJobs(engine, TENANT, { limit: 50 })).items.map((j) => j.jobId);
    expect(await listed(engineAt(f.engine.settings.retentionDays * DAY - HOUR))).toContain(
      job.jobId,
    );
    expect(await listed(engineAt(f.engine.settings.retentionDays * DAY + HOUR))).not.toContain(
      job.jobId,
    );
  });
});
