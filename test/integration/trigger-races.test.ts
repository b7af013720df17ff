import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { IllegalTransitionError, JobNotFoundError } from "../../shared/errors.js";
import {
  cancelJob,
  createJob,
  deleteJob,
  pauseJob,
  resumeJob,
  triggerJobWithKey,
} from "../../shared/jobs/index.js";
import type { Run } from "../../shared/model.js";
import { readTriggerRecord } from "../../shared/storage/job-trigger.js";
import { getJob } from "../../shared/storage/run-reads.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";

const TENANT = "tenant-a";

/**
 * A trigger reads its job, then writes its run: a cancel, delete or pause of the job that lands
 * between the two must not be outrun. The trigger is refused as it is once the job is cancelled,
 * gone or paused, and no run is written for a worker to end unrun.
 */
describe("a trigger racing its job's cancel, delete, pause or completion", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  const runsOf = async (jobId: string): Promise<Run[]> =>
    (await f.runs()).filter((r) => r.jobId === jobId);

  /** Runs `change` once, just before the trigger's transaction goes out. */
  function beforeTriggerWrite(change: () => Promise<unknown>) {
    const name = "changeBeforeTriggerWrite";
    let ran = 0;
    f.engine.doc.middlewareStack.add(
      (next, context) => async (args) => {
        const items = (args.input as { TransactItems?: unknown[] }).TransactItems;
        if (
          ran === 0 &&
          context.commandName === "TransactWriteItemsCommand" &&
          JSON.stringify(items ?? []).includes('"triggered":true')
        ) {
          ran++;
          await change();
        }
        return next(args);
      },
      { step: "initialize", name },
    );
    return { ran: () => ran, remove: () => f.engine.doc.middlewareStack.remove(name) };
  }

  it.each([
    ["deleted", deleteJob, JobNotFoundError],
    ["cancelled", cancelJob, IllegalTransitionError],
    ["paused", pauseJob, IllegalTransitionError],
  ] as const)(
    "a job %s between the trigger's read and its write: refused as after it, no run written",
    async (_, change, refusal) => {
      const { job } = await createJob(f.engine, testJob({ schedule: { every: "PT1H" } }));
      const hook = beforeTriggerWrite(() => change(f.engine, TENANT, job.jobId));
      try {
        await expect(
          triggerJobWithKey(f.engine, TENANT, job.jobId, undefined),
        ).rejects.toBeInstanceOf(refusal);
      } finally {
        hook.remove();
      }
      expect(hook.ran()).toBe(1);
      expect((await runsOf(job.jobId)).filter((r) => r.triggered === true)).toEqual([]);
    },
  );

  it("a one-off completed between the trigger's read and its write: triggered as a completed job is", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { runAt: new Date().toISOString() } }),
    );
    const delivered = await f.nextDelivery(f.engine.queues.normal, job.jobId, 15_000);
    const hook = beforeTriggerWrite(() => f.process(f.workerDeps("w"), delivered));
    let triggered: Run;
    try {
      const result = await triggerJobWithKey(f.engine, TENANT, job.jobId, undefined);
      expect(result.created).toBe(true);
      triggered = result.run;
    } finally {
      hook.remove();
    }
    expect(hook.ran()).toBe(1);
    const completed = await getJob(f.engine, job.jobId);
    expect(completed?.status).toBe("COMPLETED");
    expect((await runsOf(job.jobId)).find((r) => r.runId === triggered.runId)?.status).toBe(
      "QUEUED",
    );
  });

  it("a keyed trigger overtaken by a pause takes no key: refused, and the same key after resume queues its run", async () => {
    const { job } = await createJob(f.engine, testJob({ schedule: { every: "PT1H" } }));
    const key = { tenantId: TENANT, jobId: job.jobId, key: "paused-under-it" };
    const hook = beforeTriggerWrite(() => pauseJob(f.engine, TENANT, job.jobId, {}));
    try {
      await expect(triggerJobWithKey(f.engine, TENANT, job.jobId, key.key)).rejects.toBeInstanceOf(
        IllegalTransitionError,
      );
    } finally {
      hook.remove();
    }
    expect(hook.ran()).toBe(1);
    // The key's record goes with the run's write or not at all: a record without its run would
    // answer every repeat of the key 409 ("queued run …, which is gone").
    expect(await readTriggerRecord(f.engine, key)).toBeNull();
    await resumeJob(f.engine, TENANT, job.jobId);
    const result = await triggerJobWithKey(f.engine, TENANT, job.jobId, key.key);
    expect(result.created).toBe(true);
    expect((await runsOf(job.jobId)).filter((r) => r.triggered === true)).toEqual([
      expect.objectContaining({ runId: result.run.runId, status: "QUEUED" }),
    ]);
  });

  /** Runs `during` once, as the delete's removal of the job's item goes out (after its cancels). */
  async function deleteWith(jobId: string, during: () => Promise<unknown>): Promise<boolean> {
    const name = "beforeItemDelete";
    let ran = false;
    f.engine.doc.middlewareStack.add(
      (next, context) => async (args) => {
        if (!ran && context.commandName === "DeleteItemCommand") {
          ran = true;
          await during();
        }
        return next(args);
      },
      { step: "initialize", name },
    );
    try {
      await deleteJob(f.engine, TENANT, jobId);
    } finally {
      f.engine.doc.middlewareStack.remove(name);
    }
    return ran;
  }

  it("a completed one-off's trigger landing inside its delete, after the runs' cancel and before the item goes: refused as a deleted job's (404), no run written", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { runAt: new Date().toISOString() } }),
    );
    await f.process(
      f.workerDeps("w"),
      await f.nextDelivery(f.engine.queues.normal, job.jobId, 15_000),
    );
    expect((await getJob(f.engine, job.jobId))?.status).toBe("COMPLETED");
    let refusal: unknown;
    const ran = await deleteWith(job.jobId, () =>
      triggerJobWithKey(f.engine, TENANT, job.jobId, "inside-the-delete").catch((error) => {
        refusal = error;
      }),
    );
    expect(ran).toBe(true);
    expect(refusal).toBeInstanceOf(JobNotFoundError);
    expect(await getJob(f.engine, job.jobId)).toBeNull();
    expect((await runsOf(job.jobId)).filter((r) => r.triggered === true)).toEqual([]);
    // Its key took nothing: no record answers a repeat with a run that was never written.
    expect(
      await readTriggerRecord(f.engine, {
        tenantId: TENANT,
        jobId: job.jobId,
        key: "inside-the-delete",
      }),
    ).toBeNull();
  });

  it("a completed one-off's trigger whose read comes before its delete and whose write lands inside it: refused (404), no run written", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { runAt: new Date().toISOString() } }),
    );
    await f.process(
      f.workerDeps("w"),
      await f.nextDelivery(f.engine.queues.normal, job.jobId, 15_000),
    );
    // The trigger reads the job COMPLETED; its write waits until the delete has cancelled the
    // job's runs and is about to remove the item.
    let releaseWrite: () => void = () => {};
    const writeHeld = new Promise<void>((resolve) => {
      releaseWrite = resolve;
    });
    let writeReached: () => void = () => {};
    const reached = new Promise<void>((resolve) => {
      writeReached = resolve;
    });
    const hook = beforeTriggerWrite(async () => {
      writeReached();
      await writeHeld;
    });
    try {
      const trigger = triggerJobWithKey(f.engine, TENANT, job.jobId, undefined);
      const settled = trigger.then(
        () => null,
        (error: unknown) => error,
      );
      await reached;
      // The trigger's write goes out as the delete's removal does, after its runs' cancel.
      const ran = await deleteWith(job.jobId, async () => {
        releaseWrite();
        await settled;
      });
      expect(ran).toBe(true);
      expect(await settled).toBeInstanceOf(JobNotFoundError);
    } finally {
      hook.remove();
    }
    expect((await runsOf(job.jobId)).filter((r) => r.triggered === true)).toEqual([]);
  });
});
