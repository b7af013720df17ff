import { InternalServerError } from "@aws-sdk/client-dynamodb";
import { PutCommand, UpdateCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConcurrentUpdateError, FenceLostError } from "../../shared/errors.js";
import { createJob } from "../../shared/jobs/index.js";
import type { Run } from "../../shared/model.js";
import { recordAdmission } from "../../shared/storage/admission.js";
import { sweepExpired } from "../../shared/storage/expiry-sweep.js";
import { jobKey } from "../../shared/storage/items.js";
import { requestRunCancel } from "../../shared/storage/run-cancel.js";
import { finishRun } from "../../shared/storage/run-finish.js";
import { getJob, getRun } from "../../shared/storage/run-reads.js";
import { requeueRun } from "../../shared/storage/run-requeue.js";
import {
  extendRunSlot,
  joinRunSlot,
  leaveRunSlot,
  releaseRunSlot,
  takeRunSlot,
} from "../../shared/storage/run-slots.js";
import { startRun } from "../../shared/storage/run-start.js";
import { queuedRun } from "../../shared/storage/runs.js";
import { readQuotaPartition } from "../../shared/storage/tenant-quotas.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { jobHoldingRunA } from "../support/held-runs.js";
import { createTestClients } from "../support/namespace.js";

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
        retryOf: { runId: run.runId, fence: run.fence },
      },
      now,
      f.engine.settings,
    );
  }

  it("a finish by a worker whose fence is stale is FenceLostError, in one write or after its next attempt, which the holder's ending decides", async () => {
    const run = await startedRun("w");
    const stale: Run = { ...run, fence: run.fence - 1 };
    const now = new Date();
    await expect(
      finishRun(f.engine, stale, { status: "SUCCEEDED", ran: true, tracked: false }, now),
    ).rejects.toBeInstanceOf(FenceLostError);
    const retry = { runItem: nextAttemptOf(stale, now).item };
    await expect(
      finishRun(f.engine, stale, { status: "FAILED", ran: true, tracked: false, retry }, now),
    ).rejects.toBeInstanceOf(FenceLostError);
    expect(await getRun(f.engine, run)).toMatchObject({ status: "RUNNING", fence: run.fence });
    // Put before the ending, and left: the run's holder may fail too, and its ending lets it run.
    expect(await getRun(f.engine, { ...run, attempt: run.attempt + 1 })).toMatchObject({
      status: "QUEUED",
      fence: 0,
      retryOf: { runId: run.runId, fence: stale.fence },
    });
  });

  it("a finish by a worker whose fence another start took again (a restored table) is FenceLostError, even beside that start's identical ending", async () => {
    const run = await startedRun("worker-b");
    const now = new Date();
    await finishRun(f.engine, run, { status: "SUCCEEDED", ran: true, tracked: false }, now);
    // Worker A started the run under the same fence before a restore took the fence back; its
    // ending, at the very instant of B's, finds the run SUCCEEDED under that fence.
    const staleStart: Run = {
      ...run,
      workerId: "worker-a",
      startedAt: new Date(Date.parse(run.startedAt ?? "") - 60_000).toISOString(),
    };
    await expect(
      finishRun(f.engine, staleStart, { status: "SUCCEEDED", ran: true, tracked: false }, now),
    ).rejects.toBeInstanceOf(FenceLostError);
  });

  it("a requeue by a worker whose fence another start took again (a restored table), sent twice, is FenceLostError beside that start's identical requeue", async () => {
    const run = await startedRun("worker-b");
    const dueAt = new Date(Date.now() + 5_000);
    await requeueRun(f.engine, run, "waiting: overlap policy skip", dueAt);
    // Worker A started the run under the same fence before a restore took the fence back; its
    // requeue, at the very instant of B's, fails its first attempt before reaching the table (a
    // 500), and the SDK's second finds the run QUEUED as A's would leave it, under that fence.
    const staleStart: Run = {
      ...run,
      workerId: "worker-a",
      startedAt: new Date(Date.parse(run.startedAt ?? "") - 60_000).toISOString(),
    };
    const clients = createTestClients();
    let failed = false;
    clients.dynamo.middlewareStack.add(
      (next, context) => async (args) => {
        if (!failed && context.commandName === "UpdateItemCommand") {
          failed = true;
          throw new InternalServerError({
            message: "not applied",
            $metadata: { httpStatusCode: 500 },
          });
        }
        return next(args);
      },
      { step: "finalizeRequest", priority: "low", name: "failFirstAttempt" },
    );
    try {
      const engineA = { ...f.engine, doc: clients.doc };
      await expect(
        requeueRun(engineA, staleStart, "waiting: overlap policy skip", dueAt),
      ).rejects.toBeInstanceOf(FenceLostError);
      expect(failed).toBe(true);
    } finally {
      clients.destroy();
    }
  });

  it("a failed run whose next attempt exists already (an earlier start's put, or its own answered late) records FAILED over it: one attempt", async () => {
    const run = await startedRun("w");
    const now = new Date();
    const earlier = nextAttemptOf({ ...run, fence: run.fence - 1 }, now);
    await f.engine.doc.send(
      new PutCommand({ TableName: f.engine.tables.runs, Item: earlier.item }),
    );
    await finishRun(
      f.engine,
      run,
      {
        status: "FAILED",
        error: "boom",
        ran: true,
        tracked: false,
        retry: { runItem: nextAttemptOf(run, now).item },
      },
      now,
    );
    expect(await getRun(f.engine, run)).toMatchObject({ status: "FAILED", fence: run.fence });
    // The attempt that was there stands: its worker runs it once this one says FAILED.
    expect(await getRun(f.engine, { ...run, attempt: run.attempt + 1 })).toMatchObject({
      status: "QUEUED",
      retryOf: { runId: run.runId, fence: run.fence - 1 },
    });
  });

  it("a start of a run another worker holds under a live lease is busy, and leaves the run to its holder", async () => {
    const run = await startedRun("worker-a");
    // A duplicate delivery, a second before the holder's lease lapses.
    const beforeLapse = new Date(Date.parse(run.leaseUntil ?? "") - 1000);
    const second = await startRun(f.engine, run, "worker-b", beforeLapse);
    expect(second.kind).toBe("busy");
    expect(await getRun(f.engine, run)).toMatchObject({
      status: "RUNNING",
      fence: run.fence,
      workerId: "worker-a",
      leaseUntil: run.leaseUntil,
    });
  });

  it("a worker whose run another worker took over since its lease lapsed cannot end it CANCELLED once a cancel is asked: the holder does", async () => {
    const run = await startedRun("worker-a");
    const lapsed = new Date(Date.parse(run.leaseUntil ?? "") + 1000);
    const taken = await startRun(f.engine, run, "worker-b", lapsed);
    if (taken.kind !== "started") throw new Error(`not taken over: ${taken.kind}`);
    expect(taken.run.fence).toBe(run.fence + 1);
    expect(await requestRunCancel(f.engine, taken.run, "api", lapsed)).not.toBeNull();
    const cancelled = {
      status: "CANCELLED",
      reason: "cancelled",
      ran: true,
      tracked: false,
      honoursCancel: true,
    } as const;

    await expect(finishRun(f.engine, run, cancelled, lapsed)).rejects.toBeInstanceOf(
      FenceLostError,
    );
    expect(await getRun(f.engine, run)).toMatchObject({
      status: "RUNNING",
      fence: run.fence + 1,
      workerId: "worker-b",
      finishedAt: null,
    });
    await finishRun(f.engine, taken.run, cancelled, lapsed);
    expect(await getRun(f.engine, run)).toMatchObject({
      status: "CANCELLED",
      fence: run.fence + 1,
      workerId: "worker-b",
    });
  });

  it("a concurrent-runs slot a later start of its run took over is neither extended nor freed by the earlier start", async () => {
    const now = new Date();
    const leaseUntil = new Date(now.getTime() + 60_000).toISOString();
    const earlier = {
      tenantId: "tenant-slots",
      index: 0,
      runId: "run-slotted",
      fence: 1,
      leaseUntil,
      taker: "take-1",
    };
    const later = { ...earlier, fence: 2, taker: "take-2" };
    const another = { ...earlier, runId: "run-other", taker: "take-3" };
    expect(await takeRunSlot(f.engine, earlier, now)).toBe(true);
    // The run started again (its lease lapsed): the later start takes over the run's own slot.
    expect(await takeRunSlot(f.engine, later, now)).toBe(true);

    expect(await extendRunSlot(f.engine, earlier, new Date(now.getTime() + 120_000))).toBe(false);
    await releaseRunSlot(f.engine, earlier);
    // Still the later start's: no other run of the tenant gets it.
    expect(await takeRunSlot(f.engine, another, now)).toBe(false);
    await releaseRunSlot(f.engine, later);
    expect(await takeRunSlot(f.engine, another, now)).toBe(true);
  });

  it("a concurrent-runs slot two deliveries of one start took is freed by the last take to leave it, not by the first", async () => {
    const now = new Date();
    const tenantId = "tenant-slot-takes";
    const first = {
      tenantId,
      index: 0,
      runId: "run-twice",
      fence: 1,
      leaseUntil: new Date(now.getTime() + 60_000).toISOString(),
      taker: "take-1",
    };
    const second = { ...first, taker: "take-2" };
    const slots = async () =>
      (await readQuotaPartition(f.engine, tenantId)).slots.map((s) => [
        s.index,
        s.runId,
        [...(s.takers ?? [])].sort(),
      ]);
    expect(await takeRunSlot(f.engine, first, now)).toBe(true);
    // The second read the slot free and puts it: it joins the first's take, not replaces it.
    expect(await takeRunSlot(f.engine, second, now)).toBe(true);
    expect(await slots()).toEqual([[0, "run-twice", ["take-1", "take-2"]]]);
    await leaveRunSlot(f.engine, first);
    // Sent again (its answer lost): the take is gone already, and the other's stays.
    await leaveRunSlot(f.engine, first);
    expect(await slots()).toEqual([[0, "run-twice", ["take-2"]]]);
    await leaveRunSlot(f.engine, second);
    expect(await slots()).toEqual([]);

    // A slot an earlier version took records no take: one joining it is left held by its leaving.
    await f.engine.doc.send(
      new PutCommand({
        TableName: f.engine.tables.jobs,
        Item: {
          pk: `QUOTA#${tenantId}`,
          sk: "SLOT#0001",
          runId: "run-twice",
          fence: 1,
          leaseUntil: first.leaseUntil,
        },
      }),
    );
    const joining = { ...second, index: 1 };
    expect(await joinRunSlot(f.engine, joining, false)).toBe(true);
    await leaveRunSlot(f.engine, joining);
    expect(await slots()).toEqual([[1, "run-twice", ["unrecorded"]]]);
    await releaseRunSlot(f.engine, joining);
    expect(await slots()).toEqual([]);
  });

  it("a slot write sent again after the slot was freed and taken anew touches only its own take", async () => {
    const now = new Date();
    const tenantId = "tenant-slot-resent";
    const lease = new Date(now.getTime() + 60_000).toISOString();
    const running = {
      tenantId,
      index: 0,
      runId: "run-resent",
      fence: 1,
      leaseUntil: lease,
      taker: "take-1",
    };
    const letOff = { ...running, taker: "take-2" };
    const slots = async () =>
      (await readQuotaPartition(f.engine, tenantId)).slots.map((s) => [
        s.index,
        s.runId,
        [...(s.takers ?? [])].sort(),
      ]);
    expect(await takeRunSlot(f.engine, running, now)).toBe(true);
    expect(await joinRunSlot(f.engine, letOff, true)).toBe(true);
    await releaseRunSlot(f.engine, running);
    // The join sent again once the running start freed the slot: nothing is put back.
    expect(await joinRunSlot(f.engine, letOff, true)).toBe(false);
    expect(await slots()).toEqual([]);

    // A third delivery of the start takes the slot anew: the let-off take, sent again, leaves it.
    const third = { ...running, taker: "take-3" };
    expect(await takeRunSlot(f.engine, third, now)).toBe(true);
    await leaveRunSlot(f.engine, letOff);
    expect(await slots()).toEqual([[0, "run-resent", ["take-3"]]]);
    // Its lease lapsed and another run took the slot: the start's writes leave that run's alone.
    const lapsedAt = new Date(Date.parse(lease) + 1000);
    const other = {
      ...running,
      runId: "run-other",
      taker: "take-4",
      leaseUntil: new Date(lapsedAt.getTime() + 60_000).toISOString(),
    };
    expect(await takeRunSlot(f.engine, other, lapsedAt)).toBe(true);
    await leaveRunSlot(f.engine, third);
    await releaseRunSlot(f.engine, third);
    expect(await joinRunSlot(f.engine, third, true)).toBe(false);
    expect(await slots()).toEqual([[0, "run-other", ["take-4"]]]);
  });

  it("a concurrent-runs slot its worker never freed (it died) expires a day after its last lease", async () => {
    const now = new Date();
    const slot = {
      tenantId: "tenant-slot-expiry",
      index: 0,
      runId: "run-crashed",
      fence: 1,
      leaseUntil: new Date(now.getTime() + 60_000).toISOString(),
      taker: "take-1",
    };
    expect(await takeRunSlot(f.engine, slot, now)).toBe(true);
    const extendedTo = new Date(now.getTime() + 120_000);
    expect(await extendRunSlot(f.engine, slot, extendedTo)).toBe(true);
    const slots = async () => (await readQuotaPartition(f.engine, slot.tenantId)).slots;

    // No release: a lapsed slot is free to take, but nothing else deletes its item.
    const day = 86_400_000;
    await sweepExpired(f.engine, new Date(extendedTo.getTime() + day - 60_000));
    expect(await slots()).toHaveLength(1);
    await sweepExpired(f.engine, new Date(extendedTo.getTime() + day + 1_000));
    expect(await slots()).toEqual([]);
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

  it("an admission writes its run's mark and keeps the marks of the runs the job still holds, no others", async () => {
    const { job, leaseUntil } = await jobHoldingRunA(f.engine);
    const one = await getJob(f.engine, job.jobId);
    if (one === null) throw new Error("job gone");
    await recordAdmission(f.engine, one, { kind: "buffer", runId: "run-b" }, { dropped: [] });
    const two = await getJob(f.engine, job.jobId);
    if (two === null) throw new Error("job gone");
    const aMark = one.admissionMarks?.["run-a"];
    expect(aMark).toMatch(/^[\w-]{12}$/);
    expect(two.admissionMarks).toEqual({ "run-a": aMark, "run-b": expect.any(String) });
    const bMark = two.admissionMarks?.["run-b"];

    // A mark whose run the job no longer holds (one an older version's write took off, or left
    // while a rolled-back version admitted the job) goes with the next admission, as does the
    // mark of an entry that admission takes off.
    await f.engine.doc.send(
      new UpdateCommand({
        TableName: f.engine.tables.jobs,
        Key: jobKey(job.jobId),
        UpdateExpression: "SET admissionMarks.#gone = :mark",
        ExpressionAttributeNames: { "#gone": "run-gone" },
        ExpressionAttributeValues: { ":mark": "x" },
      }),
    );
    const withLeftOver = await getJob(f.engine, job.jobId);
    if (withLeftOver === null) throw new Error("job gone");
    expect(withLeftOver.admissionMarks?.["run-gone"]).toBe("x");
    await recordAdmission(
      f.engine,
      withLeftOver,
      { kind: "start", runId: "run-b", leaseUntil },
      { dropped: ["run-a"] },
    );
    const three = await getJob(f.engine, job.jobId);
    expect(three?.activeRuns).toEqual({ "run-b": leaseUntil.toISOString() });
    expect(Object.keys(three?.admissionMarks ?? {})).toEqual(["run-b"]);
    expect(three?.admissionMarks?.["run-b"]).not.toBe(bMark);
  });
});
