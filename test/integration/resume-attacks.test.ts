import { beforeEach, describe, expect, it } from "vitest";
import { claimDueEntry } from "../../shared/dispatch/claim.js";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import { reap } from "../../shared/dispatch/reaper.js";
import type { JobContext } from "../../shared/execution/job-contract.js";
import { cancelRun, editJob, pauseJob, resumeJob } from "../../shared/jobs/index.js";
import { getTenantJob } from "../../shared/jobs/queries.js";
import type { Run } from "../../shared/model.js";
import { startRun } from "../../shared/storage/run-start.js";
import { useCancelledAttempt } from "../support/cancelled-attempt.js";
import { SECOND, useClaimRace } from "../support/claim-race.js";
import { deliveryOfRun, type EngineFixture } from "../support/engine-fixture.js";
import { useOneOffMoves } from "../support/one-off-moves.js";

/**
 * Attacks on a one-off's occurrence filed again after its running attempt was cancelled (a
 * resume's, an edit's back to its time) and on the two entries that can name one next attempt: a
 * failure's own retry of the cancelled run and the resume's fence-0 entry.
 */

const race = useClaimRace();
const {
  clock,
  time,
  claimOptions,
  seedOne,
  runsOf,
  fixture,
  runsCalled,
  pastDeadlineOf,
  entriesOf,
} = race;
const { moveTo, attemptsOf, retryingOneOff } = useOneOffMoves(race);
const { failsAsPauseCancels, resumedUnclaimed } = useCancelledAttempt(race);
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
  await expectCancelledThenSucceeded(jobId, due);
}

/** The occurrence at `due`: attempt 1 CANCELLED, attempt 2 SUCCEEDED, and no other attempt. */
async function expectCancelledThenSucceeded(jobId: string, due: Date) {
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

/**
 * A one-off due 5 s ago (retries an hour apart, misfire `fire_once`) whose attempt 1 fails as a
 * pause with `running: "cancel"` lands (a draw near the top): attempt 1 CANCELLED, and attempt 2,
 * the failure's own retry put before the refused ending, a retry entry due about an hour on,
 * naming attempt 1's start (fence 1). The resume's fast path fails: its entry for attempt 2
 * (fence 0) is left pending, unclaimed.
 */
async function failedAsPauseCancelledThenResumed() {
  const { job, due, first } = await retryingOneOff();
  await failsAsPauseCancels(first, 0.99);
  expect(await attemptsOf(job.jobId, due)).toEqual([[1, "CANCELLED"]]);
  const [retry, ...more] = (await entriesOf(job.jobId)).filter((e) => e.kind === "retry");
  if (!retry || more.length > 0) throw new Error("expected one retry entry");
  expect([retry.attempt, retry.retryOf?.fence]).toEqual([2, 1]);

  await resumedUnclaimed(job);
  const resumed = (await entriesOf(job.jobId)).find((e) => e.kind === "occurrence");
  expect([resumed?.attempt, resumed?.retryOf?.fence]).toEqual([2, 0]);
  return { job, due, retry };
}

describe("a failure's own retry entry of a run a pause cancelled, beside the resume's entry for the same attempt (fence 0)", () => {
  it("the retry entry claimed first, then an edit that keeps the occurrence while the retry runs with its start unwritten: the resume's entry's claim does not send that attempt a second message", async () => {
    const { job, due, retry } = await failedAsPauseCancelledThenResumed();

    // A pass at the retry's time claims its entry first (the resume's, overdue, is claimed next).
    time.ms = Date.parse(retry.dueAt) + SECOND;
    expect((await claimDueEntry(f.engine, retry, claimOptions(clock()))).outcome).toBe("claimed");
    const queued = (await runsOf(job.jobId)).find((r) => r.attempt === 2);
    if (!queued) throw new Error("the retry's claim queued no run");

    // Its first delivery holds its start unwritten (QUEUED, fence 0, to everyone else) while its
    // handler runs; an edit that keeps the occurrence (version 2, rewriting the resume's entry)
    // and the pass's claim of that entry land meanwhile.
    let calls = 0;
    const editedMidRun = async (ctx: JobContext) => {
      calls++;
      if (calls === 1) {
        await editJob(f.engine, ctx.tenantId, ctx.jobId, 1, { name: "renamed" });
        await dispatchShard(f.engine, 0, "pass-during-the-retry");
      }
      return { ok: true };
    };
    const deps = f.workerDeps("w", { noop: editedMidRun });
    await f.process(deps, deliveryOfRun(f.engine, queued));
    for (const received of await f.receiveAll(f.engine.queues.normal, { quietMs: 1500 })) {
      if (received.message.jobId === job.jobId) await f.process(deps, received);
    }

    expect(calls).toBe(1);
    await expectCancelledThenSucceeded(job.jobId, due);
    expect(await entriesOf(job.jobId)).toEqual([]);
    const after = await getTenantJob(f.engine, job.tenantId, job.jobId);
    expect([after.status, after.version]).toEqual(["COMPLETED", 2]);
  });
});
