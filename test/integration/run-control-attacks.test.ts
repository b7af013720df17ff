import { beforeEach, describe, expect, it } from "vitest";
import { claimDueEntry } from "../../shared/dispatch/claim.js";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import { type JobContext, JobError } from "../../shared/execution/job-contract.js";
import {
  cancelJob,
  editJob,
  pauseJob,
  replayDeadLetter,
  resumeJob,
  triggerJob,
} from "../../shared/jobs/index.js";
import { getTenantJob, listDeadLetters, listRuns } from "../../shared/jobs/queries.js";
import type { Run } from "../../shared/model.js";
import { startRun } from "../../shared/storage/run-start.js";
import { SECOND, useClaimRace } from "../support/claim-race.js";
import { deliveryOfRun, type EngineFixture } from "../support/engine-fixture.js";
import { useOneOffMoves } from "../support/one-off-moves.js";

const race = useClaimRace();
const {
  clock,
  time,
  claimOptions,
  seedOne,
  runsOf,
  fixture,
  runsCalled,
  withHook,
  withHooks,
  isRunPut,
  entriesOf,
} = race;
const { moveTo, attemptsOf, deadWhileMovedAway, failedOnce, retryEntryOf, replayRefusal } =
  useOneOffMoves(race);
let f: EngineFixture;
beforeEach(() => {
  f = fixture();
});

/** Delivers `run` once to a worker whose `noop` handler is `handler`. */
async function deliverWith(run: Run, handler: (ctx: JobContext) => Promise<unknown>) {
  await f.process(f.workerDeps("w", { noop: handler }), deliveryOfRun(f.engine, run));
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

    const refused = await replayRefusal(job, dead.runId);

    expect(refused).toContain(`runs again as ${retry?.runId} (queued)`);
    expect(await attemptsOf(jobId, due)).toEqual([
      [1, "DEAD"],
      [2, "FAILED"],
      [3, "QUEUED"],
    ]);
  });

  it("a replay of the dead letter is refused while the edit's run is queued, naming it, and for good once that run has succeeded", async () => {
    const jobId = "dead-back-replay";
    const { job, due, dead } = await deadWhileMovedAway(jobId);
    await moveTo(job, 2, due);
    const [, taken] = await runsOf(jobId);
    if (taken?.attempt !== 2) throw new Error("the edit filed no attempt 2");

    const whileQueued = await replayRefusal(job, dead.runId);
    expect(whileQueued).toContain(`runs again as ${taken.runId} (queued)`);
    expect(whileQueued).toContain("replayable once that run and its retries have ended");
    expect(await runsCalled(jobId)).toEqual([[due.toISOString(), 1]]);

    // The occurrence ran: a replay would be its second success.
    const afterSuccess = await replayRefusal(job, dead.runId);
    expect(afterSuccess).toContain(`ran again as ${taken.runId} and succeeded`);
    expect(await runsCalled(jobId)).toEqual([]);
    expect(await attemptsOf(jobId, due)).toEqual([
      [1, "DEAD"],
      [2, "SUCCEEDED"],
    ]);
    const listed = await listDeadLetters(f.engine, job.tenantId, { limit: 10 });
    expect(listed.items.map((r) => r.runId)).toContain(dead.runId);
  });
});

describe("a replay of the dead letter landing between the edit's read of that time's run and its commit", () => {
  it("the edit's claim takes the replay's key: the occurrence runs once, and the dead letter is gone", async () => {
    const jobId = "dead-back-race";
    const { job, due, dead } = await deadWhileMovedAway(jobId);
    const isEditCommit = (input: Record<string, unknown>) =>
      JSON.stringify(input.TransactItems ?? []).includes(`JOB#${jobId}`);

    const { hooked } = await withHook(
      "TransactWriteItemsCommand",
      async () => void (await replayDeadLetter(f.engine, job.tenantId, dead.runId)),
      () => moveTo(job, 2, due),
      isEditCommit,
    );

    expect(hooked).toBe(1);
    expect(await runsCalled(jobId)).toEqual([[due.toISOString(), 1]]);
    expect(await attemptsOf(jobId, due)).toEqual([
      [1, "DEAD"],
      [2, "SUCCEEDED"],
    ]);
    expect((await getTenantJob(f.engine, job.tenantId, jobId)).status).toBe("COMPLETED");
    const listed = await listDeadLetters(f.engine, job.tenantId, { limit: 10 });
    expect(listed.items.map((r) => r.runId)).not.toContain(dead.runId);
  });
});

describe("an edit moving the one-off back landing between a replay's read of the occurrence and its write", () => {
  it("the replay is refused naming the edit's run, which runs once", async () => {
    const jobId = "dead-back-race-replay";
    const { job, due, dead } = await deadWhileMovedAway(jobId);
    const isReplayCommit = (input: Record<string, unknown>) =>
      JSON.stringify(input.TransactItems ?? []).includes(dead.runId);

    const { result: refused, hooked } = await withHook(
      "TransactWriteItemsCommand",
      async () => void (await moveTo(job, 2, due)),
      () => replayRefusal(job, dead.runId),
      isReplayCommit,
    );

    expect(hooked).toBe(1);
    const [, taken] = await runsOf(jobId);
    expect(refused).toContain(`next attempt is ${taken?.runId} already (queued)`);
    expect(await runsCalled(jobId)).toEqual([[due.toISOString(), 1]]);
    expect(await attemptsOf(jobId, due)).toEqual([
      [1, "DEAD"],
      [2, "SUCCEEDED"],
    ]);
  });
});

describe("a replay of the dead letter while the edit's entry waits unclaimed (its fast path throttled)", () => {
  it("the replay takes the attempt, the entry's claim finds it there: the occurrence runs once and the job completes", async () => {
    const jobId = "dead-back-pending";
    const { job, due, dead } = await deadWhileMovedAway(jobId);
    const { hooked } = await withHooks(
      [{ command: "PutItemCommand", when: isRunPut, fail: () => new Error("throttled") }],
      () => moveTo(job, 2, due),
    );
    expect(hooked).toBe(1);
    expect((await entriesOf(jobId)).map((e) => e.attempt)).toEqual([2]);

    const replayed = await replayDeadLetter(f.engine, job.tenantId, dead.runId);
    await dispatchShard(f.engine, 0, "pass-after-replay");

    expect(replayed.run.attempt).toBe(2);
    expect(await entriesOf(jobId)).toEqual([]);
    expect(await runsCalled(jobId)).toEqual([[due.toISOString(), 1]]);
    expect(await attemptsOf(jobId, due)).toEqual([
      [1, "DEAD"],
      [2, "SUCCEEDED"],
    ]);
    expect((await getTenantJob(f.engine, job.tenantId, jobId)).status).toBe("COMPLETED");
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

describe("a one-off under misfire skip resumed after a pause cancelled its run, its next attempt claimed on time, then started past the grace (the workers behind)", () => {
  it("that attempt is judged as its first attempt would be: recorded skipped, unrun, and the job completes", async () => {
    const jobId = "rerun-late";
    const now = clock();
    const due = new Date(now.getTime() - 5 * SECOND);
    const { job, entry } = await seedOne(jobId, { runAt: due.toISOString() }, due, now, "skip");
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

    time.ms += 120 * SECOND;

    expect(await runsCalled(jobId)).toEqual([]);
    const late = (await runsOf(jobId)).find((r) => r.attempt === 2);
    expect([late?.status, late?.reason]).toEqual([
      "SKIPPED",
      "misfire: started 125 s late, past the 60 s grace; policy skip",
    ]);
    expect((await getTenantJob(f.engine, job.tenantId, jobId)).status).toBe("COMPLETED");
  });
});

describe("a replay of a dead letter after its job was edited to another payload and priority", () => {
  it("runs the edited definition on the new priority's queue, at the job's version", async () => {
    const jobId = "dead-edited";
    const now = clock();
    const due = new Date(now.getTime() - 5 * SECOND);
    const { job, entry } = await seedOne(
      jobId,
      { every: "PT1H", startAt: due.toISOString() },
      due,
      now,
    );
    expect((await claimDueEntry(f.engine, entry, claimOptions(now))).outcome).toBe("claimed");
    const [first] = await runsOf(jobId);
    if (!first) throw new Error("no run");
    await deliverWith(first, async () => {
      throw new JobError("bad request", { retryable: false });
    });
    await editJob(f.engine, job.tenantId, jobId, 1, { payload: { fixed: true }, priority: "high" });

    const { run } = await replayDeadLetter(f.engine, job.tenantId, first.runId);
    const seen: unknown[] = [];
    for (const received of await f.receiveAll(f.engine.queues.high)) {
      if (received.message.jobId !== jobId) continue;
      await f.process(
        f.workerDeps("w", { noop: async (ctx) => void seen.push(ctx.payload) }),
        received,
      );
    }

    expect([run.priority, run.jobVersion]).toEqual(["high", 2]);
    expect(seen).toEqual([{ fixed: true }]);
    const replayed = (await runsOf(jobId)).find((r) => r.runId === run.runId);
    expect([replayed?.status, replayed?.executedVersion]).toEqual(["SUCCEEDED", 2]);
  });
});

const HOUR = 3_600_000;

describe("a one-off whose run failed while it was moved away, its retry an entry due in about an hour, moved back", () => {
  it("the retry is the occurrence's next attempt: it runs once at its time and completes the job", async () => {
    const { job, due } = await failedOnce(0.99, { moveAway: true });
    const retry = await retryEntryOf(job.jobId);

    // The failed run's retry is under way: the edit files nothing at its attempt (taking its key,
    // the occurrence would run as a first attempt, skipped as one when late or moved away again).
    await moveTo(job, 2, due);
    await dispatchShard(f.engine, 0, "pass-after-edit");
    expect(await runsCalled(job.jobId)).toEqual([]);
    expect((await getTenantJob(f.engine, job.tenantId, job.jobId)).status).toBe("ACTIVE");

    time.ms = Date.parse(retry.dueAt) + 5 * SECOND;
    await dispatchShard(f.engine, 0, "pass-at-retry");
    expect(await runsCalled(job.jobId)).toEqual([[due.toISOString(), 1]]);
    expect((await getTenantJob(f.engine, job.tenantId, job.jobId)).status).toBe("COMPLETED");
    expect(await attemptsOf(job.jobId, due)).toEqual([
      [1, "FAILED"],
      [2, "SUCCEEDED"],
    ]);
    expect(await entriesOf(job.jobId)).toEqual([]);
  });
});

describe("a one-off whose run failed while it was moved away, its retry queued a few seconds out, moved back", () => {
  it("the retry is the occurrence's next attempt: it runs once and completes the job", async () => {
    const { job, due } = await failedOnce(0.001, { moveAway: true });
    const retry = (await runsOf(job.jobId)).find((r) => r.attempt === 2);
    expect(retry?.status).toBe("QUEUED");
    if (!retry) throw new Error("no queued retry");

    await moveTo(job, 2, due);
    await dispatchShard(f.engine, 0, "pass-after-edit");
    time.ms = Date.parse(retry.dueAt) + SECOND;
    const calls: string[] = [];
    await deliverWith(retry, async (ctx) => void calls.push(`${ctx.scheduledFor}#${ctx.attempt}`));
    expect(await runsCalled(job.jobId)).toEqual([]);

    expect(calls).toEqual([`${due.toISOString()}#2`]);
    expect(await attemptsOf(job.jobId, due)).toEqual([
      [1, "FAILED"],
      [2, "SUCCEEDED"],
    ]);
    expect((await getTenantJob(f.engine, job.tenantId, job.jobId)).status).toBe("COMPLETED");
    expect(await entriesOf(job.jobId)).toEqual([]);
  });
});

describe("a one-off cancelled while its failed run's retry waits as a due entry", () => {
  it("the retry never runs: claimed at its time, its run ends cancelled, and nothing is left", async () => {
    const { job, due } = await failedOnce(0.99);
    const retry = await retryEntryOf(job.jobId);

    await cancelJob(f.engine, job.tenantId, job.jobId);
    time.ms = Date.parse(retry.dueAt) + 5 * SECOND;
    await dispatchShard(f.engine, 0, "pass-at-retry");

    expect(await runsCalled(job.jobId)).toEqual([]);
    const after = await attemptsOf(job.jobId, due);
    expect(after[0]).toEqual([1, "FAILED"]);
    expect(after.slice(1).every(([, status]) => status === "CANCELLED")).toBe(true);
    expect(await entriesOf(job.jobId)).toEqual([]);
  });
});

describe("a one-off paused while its failed run's retry waits as a due entry, resumed an hour after the retry came due, under misfire skip", () => {
  it("the retry is parked at its time and runs once after the resume (a retry is no late first attempt), completing the job", async () => {
    const { job, due } = await failedOnce(0.99, { misfire: "skip" });
    const retry = await retryEntryOf(job.jobId);

    await pauseJob(f.engine, job.tenantId, job.jobId, { running: "cancel" });
    time.ms = Date.parse(retry.dueAt) + 5 * SECOND;
    await dispatchShard(f.engine, 0, "pass-at-retry");
    expect(await runsCalled(job.jobId)).toEqual([]);
    const parked = (await runsOf(job.jobId)).find((r) => r.attempt === 2);
    expect([parked?.status, parked?.reason]).toEqual(["QUEUED", "waiting: job paused"]);

    time.ms += HOUR;
    await resumeJob(f.engine, job.tenantId, job.jobId);
    await dispatchShard(f.engine, 0, "pass-after-resume");

    expect(await runsCalled(job.jobId)).toEqual([[due.toISOString(), 1]]);
    expect(await attemptsOf(job.jobId, due)).toEqual([
      [1, "FAILED"],
      [2, "SUCCEEDED"],
    ]);
    expect((await getTenantJob(f.engine, job.tenantId, job.jobId)).status).toBe("COMPLETED");
  });
});

describe("a one-off triggered while its failed run's retry waits as a due entry", () => {
  it("the triggered run leaves the job active; the retry runs at its time and completes it", async () => {
    const { job, due } = await failedOnce(0.99);
    const retry = await retryEntryOf(job.jobId);

    const triggered = await triggerJob(f.engine, job.tenantId, job.jobId);
    expect(await runsCalled(job.jobId)).toEqual([[triggered.scheduledFor, 1]]);
    const meanwhile = await getTenantJob(f.engine, job.tenantId, job.jobId);
    expect([meanwhile.status, meanwhile.lastRun?.runId]).toEqual(["ACTIVE", triggered.runId]);

    time.ms = Date.parse(retry.dueAt) + 5 * SECOND;
    await dispatchShard(f.engine, 0, "pass-at-retry");
    expect(await runsCalled(job.jobId)).toEqual([[due.toISOString(), 1]]);
    expect(await attemptsOf(job.jobId, due)).toEqual([
      [1, "FAILED"],
      [2, "SUCCEEDED"],
    ]);
    expect((await getTenantJob(f.engine, job.tenantId, job.jobId)).status).toBe("COMPLETED");
  });
});
