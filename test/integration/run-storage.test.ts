import { PutCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConcurrentUpdateError, FenceLostError } from "../../shared/errors.js";
import { createJob } from "../../shared/jobs/index.js";
import type { Run } from "../../shared/model.js";
import { recordAdmission } from "../../shared/storage/admission.js";
import { finishRun } from "../../shared/storage/run-finish.js";
import { getJob, getRun } from "../../shared/storage/run-reads.js";
import { startRun } from "../../shared/storage/run-start.js";
import { queuedRun } from "../../shared/storage/runs.js";
import { ConditionsFailedError } from "../../shared/storage/transaction.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";

describe("run storage operations turn failed conditions into what they mean", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  /** A one-off job due now, its run started by `workerId`. */
  async function startedRun(workerId: string): Promise<Run> {
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { runAt: new Date().toISOString() } }),
    );
    const [queued] = (await f.runs()).filter((run) => run.jobId === job.jobId);
    if (!queued) throw new Error("the fast path queued no run");
    const started = await startRun(f.engine, queued, workerId, new Date());
    if (started.kind !== "started") throw new Error(`not started: ${started.kind}`);
    return started.run;
  }

  function nextAttemptOf(run: Run, now: Date) {
    return queuedRun(
      {
        jobId: run.jobId,
        tenantId: run.tenantId,
        scheduledFor: new Date(run.scheduledFor),
        dueAt: now,
        attempt: run.attempt + 1,
        priority: run.priority,
        jobVersion: run.jobVersion,
      },
      now,
      f.engine.settings,
    );
  }

  it("a finish by a worker whose fence is stale is FenceLostError, in one write or with a next attempt", async () => {
    const run = await startedRun("w");
    const stale: Run = { ...run, fence: run.fence - 1 };
    const now = new Date();
    await expect(
      finishRun(f.engine, stale, { status: "SUCCEEDED", ran: true, tracked: false }, now),
    ).rejects.toBeInstanceOf(FenceLostError);
    const retry = { runItem: nextAttemptOf(run, now).item };
    await expect(
      finishRun(f.engine, stale, { status: "FAILED", ran: true, tracked: false, retry }, now),
    ).rejects.toBeInstanceOf(FenceLostError);
    expect(await getRun(f.engine, run)).toMatchObject({ status: "RUNNING", fence: run.fence });
    expect(await getRun(f.engine, { ...run, attempt: run.attempt + 1 })).toBeNull();
  });

  it("a failed run whose next attempt exists already names that write; the fence held, so it is not a lost fence", async () => {
    const run = await startedRun("w");
    const now = new Date();
    const next = nextAttemptOf(run, now);
    await f.engine.doc.send(new PutCommand({ TableName: f.engine.tables.runs, Item: next.item }));
    const failure = await finishRun(
      f.engine,
      run,
      { status: "FAILED", error: "boom", ran: true, tracked: false, retry: { runItem: next.item } },
      now,
    ).catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(ConditionsFailedError);
    expect(failure).not.toBeInstanceOf(FenceLostError);
    expect([...(failure as ConditionsFailedError).failed]).toEqual(["nextAttempt"]);
    // Nothing of the transaction was written: the run is still RUNNING under its fence.
    expect(await getRun(f.engine, run)).toMatchObject({ status: "RUNNING", fence: run.fence });
  });

  it("an admission decided on a job that changed since is ConcurrentUpdateError, and writes nothing", async () => {
    const { job } = await createJob(f.engine, testJob());
    const leaseUntil = new Date(Date.now() + 60_000);
    const stale = { ...job, activeRevision: job.activeRevision + 1 };
    await expect(
      recordAdmission(
        f.engine,
        stale,
        { kind: "start", runId: "run-a", leaseUntil },
        { dropped: [] },
      ),
    ).rejects.toBeInstanceOf(ConcurrentUpdateError);
    expect((await getJob(f.engine, job.jobId))?.activeRuns).toEqual({});

    await recordAdmission(
      f.engine,
      job,
      { kind: "start", runId: "run-a", leaseUntil },
      { dropped: [] },
    );
    expect(await getJob(f.engine, job.jobId)).toMatchObject({
      activeRuns: { "run-a": leaseUntil.toISOString() },
      activeRevision: job.activeRevision + 1,
    });
  });
});
