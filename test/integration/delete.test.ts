import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { claimDueEntry } from "../../shared/dispatch/claim.js";
import { JobNotFoundError, NotReplayableError } from "../../shared/errors.js";
import { admitRun } from "../../shared/execution/admission.js";
import { JobError } from "../../shared/execution/job-contract.js";
import {
  cancelJob,
  createJob,
  deleteJob,
  pauseJob,
  replayDeadLetter,
  triggerJob,
} from "../../shared/jobs/index.js";
import {
  assertTenantHistory,
  getTenantJob,
  getTenantRun,
  listJobs,
  listRuns,
} from "../../shared/jobs/queries.js";
import type { Run } from "../../shared/model.js";
import { sweepExpired } from "../../shared/storage/expiry-sweep.js";
import { startRun } from "../../shared/storage/run-start.js";
import {
  createEngineFixture,
  type EngineFixture,
  jobWithDeadRun,
  jobWithRetryDue,
  testJob,
} from "../support/engine-fixture.js";
import { withHeartbeatsHeld } from "../support/faults.js";
import { waitFor } from "../support/wait.js";

const TENANT = "tenant-a";
const OTHER = "tenant-b";
const HOUR = 3_600_000;
const DAY = 24 * HOUR;

describe("deleting a job", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  const runsOf = async (jobId: string): Promise<Run[]> =>
    (await f.runs()).filter((r) => r.jobId === jobId).sort((a, b) => a.attempt - b.attempt);
  const jobItem = async (jobId: string) => (await f.jobs()).find((j) => j.jobId === jobId);

  it("cancels the queued runs, removes the due entry and the job; the history stays for its tenant only", async () => {
    const { job } = await createJob(f.engine, testJob({ schedule: { every: "PT30S" } }));
    const queued = await runsOf(job.jobId);
    expect(queued.length).toBeGreaterThan(5);

    await deleteJob(f.engine, TENANT, job.jobId);

    expect(await jobItem(job.jobId)).toBeUndefined();
    expect((await f.dueEntries()).filter((d) => d.jobId === job.jobId)).toEqual([]);
    const runs = await runsOf(job.jobId);
    expect(runs).toHaveLength(queued.length);
    expect(runs.every((r) => r.status === "CANCELLED" && r.reason === "job cancelled")).toBe(true);
    await expect(getTenantJob(f.engine, TENANT, job.jobId)).rejects.toBeInstanceOf(
      JobNotFoundError,
    );
    const listed = await listJobs(f.engine, TENANT, { limit: 100 });
    expect(listed.items.map((j) => j.jobId)).not.toContain(job.jobId);
    // The run history answers its tenant, and only its tenant.
    await assertTenantHistory(f.engine, TENANT, job.jobId);
    await expect(assertTenantHistory(f.engine, OTHER, job.jobId)).rejects.toBeInstanceOf(
      JobNotFoundError,
    );
    const page = await listRuns(f.engine, job.jobId, { limit: 100 });
    expect(page.items).toHaveLength(queued.length);
    const first = runs[0];
    if (!first) throw new Error("no run");
    expect((await getTenantRun(f.engine, TENANT, first.runId)).status).toBe("CANCELLED");
    // A repeat finds nothing to delete; so do a trigger and another tenant.
    await expect(deleteJob(f.engine, TENANT, job.jobId)).rejects.toBeInstanceOf(JobNotFoundError);
    await expect(triggerJob(f.engine, TENANT, job.jobId)).rejects.toBeInstanceOf(JobNotFoundError);
  });

  it("another tenant cannot delete the job; a job with neither item nor runs has no history", async () => {
    const { job } = await createJob(f.engine, testJob({ schedule: { every: "PT1H" } }));
    await expect(deleteJob(f.engine, OTHER, job.jobId)).rejects.toBeInstanceOf(JobNotFoundError);
    expect((await jobItem(job.jobId))?.status).toBe("ACTIVE");
    await expect(assertTenantHistory(f.engine, OTHER, job.jobId)).rejects.toBeInstanceOf(
      JobNotFoundError,
    );
    await expect(
      assertTenantHistory(f.engine, TENANT, "01JZZZZZZZZZZZZZZZZZZZZZZZ"),
    ).rejects.toBeInstanceOf(JobNotFoundError);
  });

  it("deletes a completed job as it is, and a paused one with its parked runs cancelled", async () => {
    const { job: done } = await createJob(
      f.engine,
      testJob({ schedule: { runAt: new Date().toISOString() } }),
    );
    const delivered = await f.nextDelivery(f.engine.queues.normal, done.jobId, 15_000);
    await f.process(f.workerDeps("w"), delivered);
    expect((await jobItem(done.jobId))?.status).toBe("COMPLETED");
    await deleteJob(f.engine, TENANT, done.jobId);
    expect(await jobItem(done.jobId)).toBeUndefined();
    expect((await runsOf(done.jobId)).map((r) => r.status)).toEqual(["SUCCEEDED"]);

    const { job: paused } = await createJob(
      f.engine,
      testJob({ schedule: { runAt: new Date().toISOString() } }),
    );
    await pauseJob(f.engine, TENANT, paused.jobId);
    const parkedDelivery = await f.nextDelivery(f.engine.queues.normal, paused.jobId, 15_000);
    await f.process(f.workerDeps("w"), parkedDelivery);
    expect(Object.keys((await jobItem(paused.jobId))?.parkedRuns ?? {})).toHaveLength(1);
    await deleteJob(f.engine, TENANT, paused.jobId);
    expect(await jobItem(paused.jobId)).toBeUndefined();
    expect((await runsOf(paused.jobId)).map((r) => [r.status, r.reason])).toEqual([
      ["CANCELLED", "job cancelled"],
    ]);
  }, 40_000);

  it("a completed job's delete that dies before removing the item leaves it completed and marked: a trigger is 404, a replay refused, and a repeat finishes the delete", async () => {
    const { job, dead } = await jobWithDeadRun(f);
    const name = "deleteDiesBeforeItemDelete";
    f.engine.doc.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === "DeleteItemCommand")
          throw new Error("injected: the delete died");
        return next(args);
      },
      { step: "initialize", name },
    );
    try {
      await expect(deleteJob(f.engine, TENANT, job.jobId)).rejects.toThrow(/injected/);
    } finally {
      f.engine.doc.middlewareStack.remove(name);
    }
    const marked = await jobItem(job.jobId);
    expect(marked?.status).toBe("COMPLETED");
    expect(typeof marked?.deleteRequestedAt).toBe("string");
    expect((await getTenantJob(f.engine, TENANT, job.jobId)).status).toBe("COMPLETED");
    await expect(triggerJob(f.engine, TENANT, job.jobId)).rejects.toBeInstanceOf(JobNotFoundError);
    await expect(replayDeadLetter(f.engine, TENANT, dead?.runId ?? "")).rejects.toThrow(
      "its job was deleted",
    );
    expect((await runsOf(job.jobId)).map((r) => [r.attempt, r.status])).toEqual([[1, "DEAD"]]);

    await deleteJob(f.engine, TENANT, job.jobId);
    expect(await jobItem(job.jobId)).toBeUndefined();
    await expect(deleteJob(f.engine, TENANT, job.jobId)).rejects.toBeInstanceOf(JobNotFoundError);
  });

  it("a completed job's delete that dies right after its mark: a queued run of the job its worker receives then ends CANCELLED, unrun, as once the job is gone", async () => {
    const { job, dead } = await jobWithDeadRun(f);
    // Replayed before the delete: a run queued with its message (the second attempt succeeds).
    const { run: replay } = await replayDeadLetter(f.engine, TENANT, dead.runId);
    const name = "deleteDiesAfterItsMark";
    let marked = false;
    f.engine.doc.middlewareStack.add(
      (next) => async (args) => {
        if (marked) throw new Error("injected: the delete died after its mark");
        const input = args.input as { UpdateExpression?: string };
        const result = await next(args);
        marked = input.UpdateExpression?.includes("deleteRequestedAt") === true;
        return result;
      },
      { step: "initialize", name },
    );
    try {
      await expect(deleteJob(f.engine, TENANT, job.jobId)).rejects.toThrow(/injected/);
    } finally {
      f.engine.doc.middlewareStack.remove(name);
    }
    expect(marked).toBe(true);
    expect((await runsOf(job.jobId)).map((r) => [r.attempt, r.status])).toEqual([
      [1, "DEAD"],
      [2, "QUEUED"],
    ]);

    expect(await f.process(f.workerDeps("w"), await f.nextDeliveryOfRun(replay))).toBe("ack");
    const [, ended] = await runsOf(job.jobId);
    expect([ended?.status, ended?.reason]).toEqual(["CANCELLED", "job no longer exists"]);
    await deleteJob(f.engine, TENANT, job.jobId);
    expect(await jobItem(job.jobId)).toBeUndefined();
  }, 30_000);

  it("a run RUNNING at the delete that then fails ends CANCELLED by the delete's cancel, with its error: its next attempt SKIPPED, no job written, acknowledged", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({
        type: "deletes-its-job",
        schedule: { runAt: new Date().toISOString() },
        policies: {
          ...testJob().policies,
          retry: { maxAttempts: 3, initialDelayMs: 1000, maxDelayMs: 1000 },
        },
      }),
    );
    const beatsHeld = withHeartbeatsHeld(f.engine);
    const deps = {
      ...f.workerDeps(
        "w",
        {
          "deletes-its-job": async (ctx) => {
            // RUNNING once its first heartbeat wrote the start.
            await waitFor("the run's start", async () =>
              (await runsOf(ctx.jobId)).some((r) => r.status === "RUNNING"),
            );
            beatsHeld.hold();
            await deleteJob(f.engine, TENANT, ctx.jobId);
            // Beats come and go meanwhile (every 200 ms); none reaches the run.
            await new Promise((resolve) => setTimeout(resolve, 500));
            throw new JobError("failed after its job was deleted", { retryable: true });
          },
        },
        200,
      ),
      engine: beatsHeld.engine,
    };
    const delivered = await f.nextDelivery(f.engine.queues.normal, job.jobId, 15_000);

    try {
      expect(await f.process(deps, delivered)).toBe("ack");
    } finally {
      beatsHeld.destroy();
    }
    expect(beatsHeld.injected.count).toBeGreaterThan(0);

    const runs = await runsOf(job.jobId);
    // A delete cancels the job first, and a cancel asks the running run to stop: its failure
    // cannot record FAILED, and the next attempt it put before that ending is taken back at once.
    const [first] = runs;
    expect(runs.map((r) => [r.attempt, r.status, r.reason, r.error, r.cancelledBy])).toEqual([
      [1, "CANCELLED", "job cancelled", "failed after its job was deleted", "job-cancel"],
      [
        2,
        "SKIPPED",
        `${first?.runId} ended CANCELLED, not FAILED: this retry does not run`,
        null,
        null,
      ],
    ]);
    expect(await jobItem(job.jobId)).toBeUndefined();
    expect((await f.dueEntries()).filter((d) => d.jobId === job.jobId)).toEqual([]);
  }, 30_000);

  it("a recurring run RUNNING at the delete is cancelled by it, even when its handler returns, and does not bring the job back", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({ type: "deletes-its-job", schedule: { every: "PT1H" } }),
    );
    const deps = f.workerDeps("w", {
      "deletes-its-job": async (ctx) => {
        await deleteJob(f.engine, TENANT, ctx.jobId);
      },
    });
    const delivered = await f.nextDelivery(f.engine.queues.normal, job.jobId, 15_000);
    expect(await f.process(deps, delivered)).toBe("ack");
    expect((await runsOf(job.jobId)).map((r) => [r.status, r.cancelledBy])).toEqual([
      ["CANCELLED", "job-cancel"],
    ]);
    expect(await jobItem(job.jobId)).toBeUndefined();
  }, 30_000);

  it("a delete that lands between the worker's read of the job and its admission ends the run CANCELLED, unrun", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({ type: "counts-calls", schedule: { every: "PT1H" } }),
    );
    let calls = 0;
    const deps = f.workerDeps("w", {
      "counts-calls": async () => {
        calls++;
      },
    });
    const delivered = await f.nextDelivery(f.engine.queues.normal, job.jobId, 15_000);
    const name = "deleteBeforeAdmission";
    let deleted = false;
    f.engine.doc.middlewareStack.add(
      (next) => async (args) => {
        const input = args.input as { ConditionExpression?: string };
        if (!deleted && input.ConditionExpression === "activeRevision = :revision") {
          deleted = true;
          await deleteJob(f.engine, TENANT, job.jobId);
        }
        return next(args);
      },
      { step: "initialize", name },
    );
    try {
      expect(await f.process(deps, delivered)).toBe("ack");
    } finally {
      f.engine.doc.middlewareStack.remove(name);
    }

    expect(deleted).toBe(true);
    expect(calls).toBe(0);
    const [run] = (await runsOf(job.jobId)).filter(
      (r) => r.scheduledFor === delivered.message.scheduledFor,
    );
    // The delete's cancel found it RUNNING (started, not yet admitted) and asked it to stop.
    expect([run?.status, run?.reason, run?.cancelledBy]).toEqual([
      "CANCELLED",
      "job cancelled",
      "job-cancel",
    ]);
    expect(await jobItem(job.jobId)).toBeUndefined();
  }, 30_000);

  it("an admission that finds the job deleted since the worker read it is JobNotFoundError", async () => {
    const { job } = await createJob(f.engine, testJob({ schedule: { every: "PT1H" } }));
    const delivered = await f.nextDelivery(f.engine.queues.normal, job.jobId, 15_000);
    const started = await startRun(f.engine, delivered.message, "w", f.engine.clock());
    if (started.kind !== "started") throw new Error(`not started: ${started.kind}`);
    const seen = await getTenantJob(f.engine, TENANT, job.jobId);
    await deleteJob(f.engine, TENANT, job.jobId);
    await expect(
      admitRun(f.engine, seen, started.run.runId, new Date(started.run.leaseUntil ?? "")),
    ).rejects.toBeInstanceOf(JobNotFoundError);
  }, 30_000);

  it("the claim of a deleted job's leftover retry entry is stale: the entry goes, no run is queued", async () => {
    const { job, retry: entry } = await jobWithRetryDue(f);
    expect(entry).toMatchObject({ kind: "retry", attempt: 2 });

    await deleteJob(f.engine, TENANT, job.jobId);
    const due = new Date(entry.dueAt);
    const result = await claimDueEntry(f.engine, entry, {
      now: due,
      horizonEnd: new Date(due.getTime() + 60_000),
    });

    expect(result.outcome).toBe("stale");
    expect((await f.dueEntries()).filter((d) => d.jobId === job.jobId)).toEqual([]);
    expect((await runsOf(job.jobId)).map((r) => [r.attempt, r.status])).toEqual([[1, "FAILED"]]);
  }, 30_000);

  it("a dead letter of a deleted job stays listed in the history and cannot be replayed (why)", async () => {
    const { job, dead } = await jobWithDeadRun(f);

    await deleteJob(f.engine, TENANT, job.jobId);
    const refused = replayDeadLetter(f.engine, TENANT, dead.runId);
    await expect(refused).rejects.toBeInstanceOf(NotReplayableError);
    await expect(refused).rejects.toThrow(/its job was deleted/);
    expect((await runsOf(job.jobId)).map((r) => r.status)).toEqual(["DEAD"]);
  }, 30_000);

  // Last in the file: its sweep removes every item expired a month from now.
  it("a cancelled job's dead letter that outlives the job says it was cancelled or deleted, not deleted", async () => {
    // Dead letters kept longer than runs and cancelled jobs: the dead run outlives its job.
    const settings = { ...f.engine.settings, retentionDays: 30, deadLetterRetentionDays: 90 };
    const engine = { ...f.engine, settings };
    const { job } = await createJob(
      engine,
      testJob({
        type: "fail",
        payload: { times: 1, retryable: false },
        schedule: { every: "PT1H" },
      }),
    );
    const delivered = await f.nextDelivery(f.engine.queues.normal, job.jobId, 15_000);
    await f.process({ ...f.workerDeps("w"), engine }, delivered);
    const dead = (await runsOf(job.jobId)).find((r) => r.status === "DEAD");
    if (!dead) throw new Error("no dead run");
    await cancelJob(engine, TENANT, job.jobId);
    await expect(replayDeadLetter(engine, TENANT, dead.runId)).rejects.toThrow(
      /cannot replay a run of a job that is cancelled/,
    );

    const pastRetention = new Date(Date.now() + 31 * DAY);
    expect((await sweepExpired(engine, pastRetention)).jobs).toBeGreaterThan(0);
    expect(await jobItem(job.jobId)).toBeUndefined();
    const later = { ...engine, clock: () => pastRetention };
    const refused = replayDeadLetter(later, TENANT, dead.runId);
    await expect(refused).rejects.toBeInstanceOf(NotReplayableError);
    await expect(refused).rejects.toThrow(
      "its job no longer exists: it was deleted, or it was cancelled (it expires 30 days later) or completed, and expired",
    );
  }, 30_000);
});
