import { beforeEach, describe, expect, it } from "vitest";
import { claimDueEntry } from "../../shared/dispatch/claim.js";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import { NotReplayableError } from "../../shared/errors.js";
import { type JobContext, JobError } from "../../shared/execution/job-contract.js";
import { editJob, pauseJob, replayDeadLetter, resumeJob } from "../../shared/jobs/index.js";
import { getTenantJob, listDeadLetters, listRuns } from "../../shared/jobs/queries.js";
import type { Job, Run } from "../../shared/model.js";
import type { MisfirePolicy } from "../../shared/policies.js";
import { startRun } from "../../shared/storage/run-start.js";
import { SECOND, useClaimRace } from "../support/claim-race.js";
import { deliveryOfRun, type EngineFixture } from "../support/engine-fixture.js";

const { clock, time, claimOptions, seedOne, runsOf, fixture, runsCalled, withHook } =
  useClaimRace();
let f: EngineFixture;
beforeEach(() => {
  f = fixture();
});

const moveTo = (job: Job, version: number, at: Date) =>
  editJob(f.engine, job.tenantId, job.jobId, version, { schedule: { runAt: at.toISOString() } });

const attemptsOf = async (jobId: string, at: Date) =>
  (await runsOf(jobId))
    .filter((r) => r.scheduledFor === at.toISOString())
    .sort((a, b) => a.attempt - b.attempt)
    .map((r) => [r.attempt, r.status]);

/** Delivers `run` once to a worker whose `noop` handler is `handler`. */
async function deliverWith(run: Run, handler: (ctx: JobContext) => Promise<unknown>) {
  await f.process(f.workerDeps("w", { noop: handler }), deliveryOfRun(f.engine, run));
}

/**
 * A one-off due 5 s ago whose run, while it runs, has the job moved 10 minutes away (version 2)
 * and then dies of a non-retryable error: attempt 1 DEAD, on the dead-letter list, and the job
 * ACTIVE for its new time (the ending leaves a one-off moved meanwhile alone).
 */
async function deadWhileMovedAway(jobId: string, misfire?: MisfirePolicy) {
  const now = clock();
  const due = new Date(now.getTime() - 5 * SECOND);
  const away = new Date(now.getTime() + 600 * SECOND);
  const { job, entry } = await seedOne(jobId, { runAt: due.toISOString() }, due, now, misfire);
  expect((await claimDueEntry(f.engine, entry, claimOptions(now))).outcome).toBe("claimed");
  const [first] = await runsOf(jobId);
  if (!first) throw new Error("the claim queued no run");
  await deliverWith(first, async () => {
    await moveTo(job, 1, away);
    throw new JobError("bad request", { retryable: false });
  });
  expect(await attemptsOf(jobId, due)).toEqual([[1, "DEAD"]]);
  const moved = await getTenantJob(f.engine, job.tenantId, jobId);
  expect([moved.status, moved.version]).toEqual(["ACTIVE", 2]);
  const dead = (await runsOf(jobId)).find((r) => r.status === "DEAD");
  if (!dead) throw new Error("no dead run");
  return { job, due, away, dead };
}

describe("a one-off whose run died while it was moved away, then moved back to that run's time", () => {
  it("the occurrence runs once more, as the dead run's next attempt, and the job completes", async () => {
    const jobId = "dead-back";
    const { job, due } = await deadWhileMovedAway(jobId);

    const back = await moveTo(job, 2, due);
    await dispatchShard(f.engine, 0, "pass-after-edit");

    expect(back.status).toBe("ACTIVE");
    expect(await attemptsOf(jobId, due)).toEqual([
      [1, "DEAD"],
      [2, "QUEUED"],
    ]);
    expect(await runsCalled(jobId)).toEqual([[due.toISOString(), 1]]);
    expect((await getTenantJob(f.engine, job.tenantId, jobId)).status).toBe("COMPLETED");
  });

  it("moved back past the misfire grace under skip: the occurrence is recorded skipped, and the dead letter is still replayable", async () => {
    const jobId = "dead-back-skip";
    const { job, due, dead } = await deadWhileMovedAway(jobId, "skip");
    time.ms += 120 * SECOND;

    await moveTo(job, 2, due);
    expect(await attemptsOf(jobId, due)).toEqual([
      [1, "DEAD"],
      [2, "SKIPPED"],
    ]);
    expect((await getTenantJob(f.engine, job.tenantId, jobId)).status).toBe("COMPLETED");
    const replayed = await replayDeadLetter(f.engine, job.tenantId, dead.runId);

    expect(replayed.run.attempt).toBe(3);
    expect(await runsCalled(jobId)).toEqual([[due.toISOString(), 1]]);
    // The history lists every attempt of the occurrence, newest first, each with why it ended so.
    const history = (await listRuns(f.engine, jobId, { limit: 10 })).items
      .filter((r) => r.scheduledFor === due.toISOString())
      .map((r) => [r.attempt, r.status, r.reason]);
    expect(history).toEqual([
      [3, "SUCCEEDED", null],
      [2, "SKIPPED", "misfire: missed by more than the 60 s grace; policy skip"],
      [1, "DEAD", "non-retryable error: bad request"],
    ]);
  });

  it("a replay while the edit's run waits to retry is refused naming that retry", async () => {
    const jobId = "dead-back-retrying";
    const { job, due, dead } = await deadWhileMovedAway(jobId);
    await moveTo(job, 2, due);
    const [, edits] = await runsOf(jobId);
    if (edits?.attempt !== 2) throw new Error("the edit filed no attempt 2");
    await deliverWith(edits, async () => {
      throw new JobError("flaky", { retryable: true });
    });
    const retry = (await runsOf(jobId)).find((r) => r.attempt === 3);
    expect(retry?.status).toBe("QUEUED");

    const refused = await replayRefusal(job, dead);

    expect(refused.why).toContain(`runs again as ${retry?.runId} (queued)`);
    expect(await attemptsOf(jobId, due)).toEqual([
      [1, "DEAD"],
      [2, "FAILED"],
      [3, "QUEUED"],
    ]);
  });

  it("a replay of the dead letter is refused while the edit's run is queued, naming it, and is its next attempt once that run has run", async () => {
    const jobId = "dead-back-replay";
    const { job, due, dead } = await deadWhileMovedAway(jobId);
    await moveTo(job, 2, due);
    const [, taken] = await runsOf(jobId);
    if (taken?.attempt !== 2) throw new Error("the edit filed no attempt 2");

    const whileQueued = await replayRefusal(job, dead);
    expect(whileQueued.why).toContain(`runs again as ${taken.runId} (queued)`);
    expect(whileQueued.why).toContain("replayable once that run and its retries have ended");
    expect(await runsCalled(jobId)).toEqual([[due.toISOString(), 1]]);

    const replayed = await replayDeadLetter(f.engine, job.tenantId, dead.runId);
    expect(replayed.run.attempt).toBe(3);
    expect(await runsCalled(jobId)).toEqual([[due.toISOString(), 1]]);
    expect(await attemptsOf(jobId, due)).toEqual([
      [1, "DEAD"],
      [2, "SUCCEEDED"],
      [3, "SUCCEEDED"],
    ]);
    const listed = await listDeadLetters(f.engine, job.tenantId, { limit: 10 });
    expect(listed.items.map((r) => r.runId)).not.toContain(dead.runId);
  });
});

/** The refusal of a replay of `dead`: a NotReplayableError, and the reason it gives. */
async function replayRefusal(job: Job, dead: Run): Promise<{ why: string }> {
  const refused = await replayDeadLetter(f.engine, job.tenantId, dead.runId).catch(
    (error: unknown) => error,
  );
  expect(refused).toBeInstanceOf(NotReplayableError);
  return { why: String((refused as NotReplayableError).context.why) };
}

describe("an edit moving the one-off back landing between a replay's read of the occurrence and its write", () => {
  it("the replay is refused naming the edit's run, which runs once", async () => {
    const jobId = "dead-back-race-replay";
    const { job, due, dead } = await deadWhileMovedAway(jobId);
    const isReplayCommit = (input: Record<string, unknown>) =>
      JSON.stringify(input.TransactItems ?? []).includes(dead.runId);

    const { result: refused, hooked } = await withHook(
      "TransactWriteItemsCommand",
      async () => void (await moveTo(job, 2, due)),
      () => replayRefusal(job, dead),
      isReplayCommit,
    );

    expect(hooked).toBe(1);
    const [, taken] = await runsOf(jobId);
    expect(refused.why).toContain(`next attempt is ${taken?.runId} already (queued)`);
    expect(await runsCalled(jobId)).toEqual([[due.toISOString(), 1]]);
    expect(await attemptsOf(jobId, due)).toEqual([
      [1, "DEAD"],
      [2, "SUCCEEDED"],
    ]);
  });
});

describe("a one-off resumed after a pause cancelled its run, its next attempt queued, then moved away", () => {
  it("that attempt is skipped as a first attempt of the old time is: the one-off runs at its new time alone", async () => {
    const jobId = "rerun-away";
    const now = clock();
    const due = new Date(now.getTime() - 5 * SECOND);
    const away = new Date(now.getTime() + 600 * SECOND);
    const { job, entry } = await seedOne(jobId, { runAt: due.toISOString() }, due, now);
    expect((await claimDueEntry(f.engine, entry, claimOptions(now))).outcome).toBe("claimed");
    const [first] = await runsOf(jobId);
    if (!first) throw new Error("no run");
    expect((await startRun(f.engine, first, "worker-a", clock())).kind).toBe("started");
    await pauseJob(f.engine, job.tenantId, jobId, { running: "cancel" });
    await resumeJob(f.engine, job.tenantId, jobId);
    expect(await attemptsOf(jobId, due)).toEqual([
      [1, "RUNNING"],
      [2, "QUEUED"],
    ]);

    await moveTo(job, 1, away);

    expect(await runsCalled(jobId)).toEqual([]);
    const skipped = (await runsOf(jobId)).find(
      (r) => r.scheduledFor === due.toISOString() && r.attempt === 2,
    );
    expect([skipped?.status, skipped?.reason]).toEqual([
      "SKIPPED",
      `job edited (version 1 → 2): ${due.toISOString()} is not an occurrence of its new schedule`,
    ]);
    const moved = await getTenantJob(f.engine, job.tenantId, jobId);
    expect([moved.status, moved.schedule]).toEqual(["ACTIVE", { runAt: away.toISOString() }]);
  });
});
