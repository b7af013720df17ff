import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import { processRun } from "../../shared/execution/worker.js";
import { createJob, editJob, triggerJob } from "../../shared/jobs/index.js";
import { getTenantJob } from "../../shared/jobs/queries.js";
import type { Run } from "../../shared/model.js";
import {
  createEngineFixture,
  deliveryOfRun,
  type EngineFixture,
  farJob,
} from "../support/engine-fixture.js";

type Input = Record<string, unknown>;

/**
 * Adversarial review h94 of refuseNoOccurrenceTime (an edit onto a triggered run's time is a 400
 * naming schedule.runAt). The refusal reads the runs at the new runAt before the edit's commit, and
 * the trigger's write checks only the job's status, so a trigger landing on that instant between the
 * edit's read and its commit is not refused: the one-off is filed at attempt 1 of the triggered
 * run's time, where the trigger's run already stands.
 */
describe("a trigger landing on an edit's new runAt between the edit's read and commit", () => {
  let f: EngineFixture;
  const T = Math.floor(Date.now() / 1000) * 1000 + 5 * 60_000;
  beforeAll(async () => {
    f = await createEngineFixture({
      settings: { shardCount: 1, maxShardCount: 1 },
      clock: () => new Date(T),
    });
  });
  afterAll(() => f.destroy());

  it("either refuses the edit or runs the one-off as its own run", async () => {
    const { job } = await createJob(f.engine, farJob("tenant-a"));
    const isJobWrite = (input: Input) =>
      JSON.stringify(input.TransactItems ?? []).includes(`"JOB#${job.jobId}"`);
    let triggered: Run | undefined;
    let hooked = false;
    const { doc } = f.engine;
    doc.middlewareStack.add(
      (next, context) => async (args) => {
        if (
          !hooked &&
          context.commandName === "TransactWriteItemsCommand" &&
          isJobWrite(args.input as Input)
        ) {
          hooked = true;
          triggered = await triggerJob(f.engine, job.tenantId, job.jobId);
        }
        return next(args);
      },
      { step: "initialize", name: "triggerBeforeEditCommit" },
    );
    const runAt = new Date(T).toISOString();
    const edited = await editJob(f.engine, job.tenantId, job.jobId, job.version, {
      schedule: { runAt },
    })
      .catch((error: unknown) => error)
      .finally(() => doc.middlewareStack.remove("triggerBeforeEditCommit"));
    if (triggered === undefined) throw new Error("the hook did not trigger");
    expect(triggered.scheduledFor).toBe(runAt);

    // Whatever the edit answered, both runs asked for run: the trigger's, and the one-off's
    // unless its edit was refused.
    await dispatchShard(f.engine, 0, "pass-1");
    for (const run of (await f.runs()).filter(
      (r) => r.jobId === job.jobId && r.status === "QUEUED",
    ))
      await processRun(f.workerDeps("w"), deliveryOfRun(f.engine, run));
    await dispatchShard(f.engine, 0, "pass-2");
    for (const run of (await f.runs()).filter(
      (r) => r.jobId === job.jobId && r.status === "QUEUED",
    ))
      await processRun(f.workerDeps("w"), deliveryOfRun(f.engine, run));

    const runs = (await f.runs())
      .filter((r) => r.jobId === job.jobId)
      .map((r) => [r.scheduledFor, r.attempt, r.status, r.triggered === true]);
    const after = await getTenantJob(f.engine, job.tenantId, job.jobId);
    // Observed: the edit accepted, one run at runAt (attempt 1, not triggered, SUCCEEDED), the job
    // COMPLETED: the one-off's claim put its run over the trigger's, QUEUED and unstarted at the
    // older jobVersion (claim.ts RUN_PUT_CONDITION), so the run the trigger answered 202 with is
    // gone and its runId names the one-off's run: two runs asked for, one stored and run.
    if (edited instanceof Error) return;
    expect(after.status).toBe("COMPLETED");
    expect(runs).toContainEqual([runAt, 1, "SUCCEEDED", true]);
  });
});
