import { beforeEach, describe, expect, it } from "vitest";
import { claimDueEntry } from "../../shared/dispatch/claim.js";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import { reap } from "../../shared/dispatch/reaper.js";
import { cancelRun, pauseJob, resumeJob } from "../../shared/jobs/index.js";
import type { Run } from "../../shared/model.js";
import { startRun } from "../../shared/storage/run-start.js";
import { SECOND, useClaimRace } from "../support/claim-race.js";
import { deliveryOfRun, type EngineFixture } from "../support/engine-fixture.js";
import { useOneOffMoves } from "../support/one-off-moves.js";

/**
 * Attacks on a one-off's occurrence filed again after its running attempt was cancelled (a
 * resume's, an edit's back to its time): the next attempt must not run while the cancelled one
 * still runs.
 */

const race = useClaimRace();
const { clock, claimOptions, seedOne, runsOf, fixture, runsCalled, pastDeadlineOf } = race;
const { moveTo, attemptsOf } = useOneOffMoves(race);
let f: EngineFixture;
beforeEach(() => {
  f = fixture();
});

/** A one-off due 5 s ago, claimed, its attempt 1 started by worker-a, then cancelled through the API. */
async function runningCancelledByApi(jobId: string) {
  const now = clock();
  const due = new Date(now.getTime() - 5 * SECOND);
  const { job, entry } = await seedOne(jobId, { runAt: due.toISOString() }, due, now);
  expect((await claimDueEntry(f.engine, entry, claimOptions(now))).outcome).toBe("claimed");
  const [first] = await runsOf(jobId);
  if (!first) throw new Error("the claim queued no run");
  expect((await startRun(f.engine, first, "worker-a", clock())).kind).toBe("started");
  const asked = await cancelRun(f.engine, job.tenantId, jobId, first.runId);
  expect([asked.status, asked.cancelledBy]).toEqual(["RUNNING", "api"]);
  return { job, due, first };
}

/**
 * Attempt 2 of the occurrence at `due`, filed while attempt 1 (`first`, asked to cancel through the
 * API) still runs under worker-a's lease: delivered now, it does not run (two attempts of one
 * occurrence would run at once) and waits, naming attempt 1. Once that worker's lease lapses, a
 * delivery of attempt 1 ends it CANCELLED, unrun; past attempt 2's recheck the reaper sends it, and
 * it runs once.
 */
async function expectSecondRunsOnlyAfterFirstEnded(jobId: string, due: Date, first: Run) {
  expect(await runsCalled(jobId)).toEqual([]);
  const waiting = (await runsOf(jobId)).find((r) => r.attempt === 2);
  expect(waiting).toMatchObject({
    status: "QUEUED",
    reason: `waiting: ${first.runId} has not ended (RUNNING)`,
  });

  pastDeadlineOf(clock());
  await f.process(f.workerDeps("w", {}), deliveryOfRun(f.engine, first));
  pastDeadlineOf(new Date((await runsOf(jobId)).find((r) => r.attempt === 2)?.dueAt ?? ""));
  await reap(f.engine);
  expect(await runsCalled(jobId)).toEqual([[due.toISOString(), 1]]);
  expect(await attemptsOf(jobId, due)).toEqual([
    [1, "CANCELLED"],
    [2, "SUCCEEDED"],
  ]);
}

describe("a one-off's run cancelled through the API, still running under its worker's lease", () => {
  it("moved away and back: the next attempt the edit files waits for that run to end", async () => {
    const jobId = "api-cancel-back";
    const { job, due, first } = await runningCancelledByApi(jobId);

    await moveTo(job, 1, new Date(clock().getTime() + 600 * SECOND));
    await moveTo(job, 2, due);

    await expectSecondRunsOnlyAfterFirstEnded(jobId, due, first);
  });

  it("paused, moved away and back, then resumed: the next attempt the resume files waits for that run to end", async () => {
    const jobId = "api-cancel-resumed";
    const { job, due, first } = await runningCancelledByApi(jobId);

    await pauseJob(f.engine, job.tenantId, jobId);
    await moveTo(job, 1, new Date(clock().getTime() + 600 * SECOND));
    await moveTo(job, 2, due);
    await resumeJob(f.engine, job.tenantId, jobId);
    await dispatchShard(f.engine, 0, "pass-after-resume");

    await expectSecondRunsOnlyAfterFirstEnded(jobId, due, first);
  });
});
