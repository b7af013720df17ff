import { beforeEach, describe, expect, it } from "vitest";
import { claimDueEntry } from "../../shared/dispatch/claim.js";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import { reap } from "../../shared/dispatch/reaper.js";
import { type JobContext, JobError } from "../../shared/execution/job-contract.js";
import { editJob, pauseJob, replayDeadLetter, resumeJob } from "../../shared/jobs/index.js";
import { getTenantJob } from "../../shared/jobs/queries.js";
import type { DueEntry } from "../../shared/model.js";
import type { MisfirePolicy } from "../../shared/policies.js";
import { startRun } from "../../shared/storage/run-start.js";
import { useCancelledAttempt } from "../support/cancelled-attempt.js";
import { SECOND, useClaimRace } from "../support/claim-race.js";
import { deliveryOfRun, type EngineFixture } from "../support/engine-fixture.js";
import { useOneOffMoves } from "../support/one-off-moves.js";

/**
 * Attacks on the `rerun` mark (a one-off's occurrence claimed again past attempt 1) and on what
 * files such an attempt: whether a failure's retry can be taken over by one and then skipped with
 * it, as a first attempt is.
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
  entriesOf,
  withHook,
  withHooks,
  isRunPut,
  pastDeadlineOf,
} = race;
const { moveTo, attemptsOf, failedOnce, retryEntryOf, replayRefusal } = useOneOffMoves(race);
const {
  failsAsPauseCancels,
  expectAttempt3RunsThenNewTime,
  expectRunsOnceCancelledEnded,
  cancelLands,
} = useCancelledAttempt(race);
let f: EngineFixture;
beforeEach(() => {
  f = fixture();
});

/**
 * Retries half an hour apart: a retry drawn near the top of the jitter is an entry past the
 * lookahead and past every time the one-off is moved to (10 and 20 minutes on), and the pass at its
 * time sweeps half an hour of buckets, not an hour's.
 */
const RETRY_APART_MS = 1_800_000;

/**
 * A one-off due 5 s ago (retries half an hour apart, at most 3 attempts) whose first run, while it
 * runs, has the job moved 10 minutes away (version 2), then fails retryably: attempt 1 FAILED, its
 * retry an entry due in about half an hour (a draw near the top of the backoff's jitter), the job
 * ACTIVE at its new time.
 */
async function failedWhileMovedAway(misfire: MisfirePolicy) {
  const failed = await failedOnce(0.99, { moveAway: true, misfire, retryApartMs: RETRY_APART_MS });
  expect(await attemptsOf(failed.job.jobId, failed.due)).toEqual([[1, "FAILED"]]);
  return { ...failed, retry: await retryEntryOf(failed.job.jobId) };
}

/**
 * At the retry entry's time: a pass claims it, the queue's runs of the job are delivered, and the
 * calls of the handler for the occurrence at `due` are returned (the one-off's new time, past
 * too, runs beside them).
 */
async function atRetryTime(jobId: string, retry: DueEntry, due: Date) {
  time.ms = Math.max(time.ms, Date.parse(retry.dueAt) + 5 * SECOND);
  await dispatchShard(f.engine, 0, "pass-at-retry");
  return (await runsCalled(jobId)).filter(([at]) => at === due.toISOString());
}

describe("a one-off whose run failed (its retry an entry half an hour out) while it was moved away", () => {
  it("moved away only: the retry runs at its time (the baseline the attacks below hold to)", async () => {
    const { job, due, retry } = await failedWhileMovedAway("fire_once");
    expect(await runsCalled(job.jobId)).toEqual([]);

    expect(await atRetryTime(job.jobId, retry, due)).toEqual([[due.toISOString(), 1]]);
    expect(await attemptsOf(job.jobId, due)).toEqual([
      [1, "FAILED"],
      [2, "SUCCEEDED"],
    ]);
  });

  it("moved back past the misfire grace under skip: the failure's retry still runs once", async () => {
    const { job, due, retry } = await failedWhileMovedAway("skip");
    time.ms += 120 * SECOND;

    await moveTo(job, 2, due);
    await dispatchShard(f.engine, 0, "pass-after-edit");
    expect(await runsCalled(job.jobId)).toEqual([]);

    expect(await atRetryTime(job.jobId, retry, due)).toEqual([[due.toISOString(), 1]]);
    expect(await attemptsOf(job.jobId, due)).toEqual([
      [1, "FAILED"],
      [2, "SUCCEEDED"],
    ]);
    expect((await getTenantJob(f.engine, job.tenantId, job.jobId)).status).toBe("COMPLETED");
  });

  it("moved back, then away again before anything ran: the failure's retry still runs once", async () => {
    const { job, due, retry } = await failedWhileMovedAway("fire_once");
    const later = new Date(clock().getTime() + 1200 * SECOND);

    await moveTo(job, 2, due);
    await moveTo(job, 3, later);
    expect(await runsCalled(job.jobId)).toEqual([]);

    expect(await atRetryTime(job.jobId, retry, due)).toEqual([[due.toISOString(), 1]]);
    expect(await attemptsOf(job.jobId, due)).toEqual([
      [1, "FAILED"],
      [2, "SUCCEEDED"],
    ]);
  });

  it("paused, moved back while paused, resumed past the grace under skip: the failure's retry still runs once", async () => {
    const { job, due, retry } = await failedWhileMovedAway("skip");
    await pauseJob(f.engine, job.tenantId, job.jobId, {});
    await moveTo(job, 2, due);
    time.ms += 120 * SECOND;
    await resumeJob(f.engine, job.tenantId, job.jobId);
    await dispatchShard(f.engine, 0, "pass-after-resume");
    expect(await runsCalled(job.jobId)).toEqual([]);

    expect(await atRetryTime(job.jobId, retry, due)).toEqual([[due.toISOString(), 1]]);
    expect(await attemptsOf(job.jobId, due)).toEqual([
      [1, "FAILED"],
      [2, "SUCCEEDED"],
    ]);
  });
});

/** Every message of the job's runs the queue holds now, delivered to a worker whose `noop` handler is `handler`. */
async function deliverQueued(jobId: string, handler: (ctx: JobContext) => Promise<unknown>) {
  const deps = f.workerDeps("w", { noop: handler });
  for (const received of await f.receiveAll(f.engine.queues.normal)) {
    if (received.message.jobId === jobId) await f.process(deps, received);
  }
}

/**
 * A one-off due 5 s ago (misfire `misfire`) whose run a pause with `running: "cancel"` cancelled
 * while it ran, then resumed: its next attempt, attempt 2, QUEUED and marked `rerun`.
 */
async function rerunQueued(jobId: string, misfire: MisfirePolicy) {
  const now = clock();
  const due = new Date(now.getTime() - 5 * SECOND);
  const { job, entry } = await seedOne(jobId, { runAt: due.toISOString() }, due, now, misfire);
  expect((await claimDueEntry(f.engine, entry, claimOptions(now))).outcome).toBe("claimed");
  const [first] = await runsOf(jobId);
  if (!first) throw new Error("no run");
  expect((await startRun(f.engine, first, "worker-a", clock())).kind).toBe("started");
  await pauseJob(f.engine, job.tenantId, jobId, { running: "cancel" });
  await resumeJob(f.engine, job.tenantId, jobId);
  const rerun = (await runsOf(jobId)).find((r) => r.attempt === 2);
  expect([rerun?.status, rerun?.rerun]).toEqual(["QUEUED", true]);
  return { job, due };
}

describe("which runs carry the rerun mark", () => {
  it("a rerun's failure retry is not marked: moved away before it runs, it still runs at its old time", async () => {
    const { job, due } = await rerunQueued("rerun-retry-away", "fire_once");
    // Attempt 2 waits for attempt 1, which the pause cancelled while it ran, to end.
    const [first] = await runsOf(job.jobId);
    if (!first) throw new Error("no run");
    await cancelLands(first);
    await deliverQueued(job.jobId, async () => {
      throw new JobError("flaky", { retryable: true });
    });
    const runs = await runsOf(job.jobId);
    const failed = runs.find((r) => r.attempt === 2);
    const retry = runs.find((r) => r.attempt === 3);
    expect([failed?.status, retry?.status, retry?.rerun]).toEqual(["FAILED", "QUEUED", undefined]);
    expect(retry?.retryOf?.runId).toBe(failed?.runId);

    const away = new Date(clock().getTime() + 600 * SECOND);
    await moveTo(job, 1, away);
    if (!retry) throw new Error("no retry");
    time.ms = Math.max(time.ms, Date.parse(retry.dueAt) + SECOND);
    const calls: string[] = [];
    const deps = f.workerDeps("w", {
      noop: async (ctx) => void calls.push(`${ctx.scheduledFor}#${ctx.attempt}`),
    });
    await f.process(deps, deliveryOfRun(f.engine, retry));
    const ended = (await runsOf(job.jobId)).find((r) => r.attempt === 3);

    expect([calls, ended?.status, ended?.reason]).toEqual([
      [`${due.toISOString()}#3`],
      "SUCCEEDED",
      null,
    ]);
    const moved = await getTenantJob(f.engine, job.tenantId, job.jobId);
    expect([moved.status, moved.nextRunAt]).toEqual(["ACTIVE", away.toISOString()]);
  });

  it("a rerun started past the grace under fire_once runs: a one-off has no later occurrence to stand in for it", async () => {
    const { job, due } = await rerunQueued("rerun-late-fire-once", "fire_once");
    time.ms += 120 * SECOND;

    // Its first delivery, past the grace, decides the misfire policy; it then waits for attempt 1.
    await expectRunsOnceCancelledEnded(job.jobId, due, 2);
    expect((await getTenantJob(f.engine, job.tenantId, job.jobId)).status).toBe("COMPLETED");
  });
});

/**
 * A one-off due 5 s ago whose attempt 1 failed; its retry, attempt 2 (a QUEUED run: a draw of 0),
 * is running when a pause with `running: "cancel"` asks it to stop.
 */
async function retryRunningWhenPaused() {
  const { job, due, away, first } = await failedOnce(0);
  const retry = (await runsOf(job.jobId)).find((r) => r.attempt === 2);
  expect([retry?.status, retry?.retryOf?.runId]).toEqual(["QUEUED", first.runId]);
  if (!retry) throw new Error("no retry");
  expect((await startRun(f.engine, retry, "worker-a", clock())).kind).toBe("started");
  await pauseJob(f.engine, job.tenantId, job.jobId, { running: "cancel" });
  return { job, due, away };
}

describe("a failure's retry that a pause cancelled while it ran, filed again by the resume", () => {
  it.each([
    ["claimed by the resume at once", null],
    ["its claim throttled, then an edit that keeps the occurrence (its payload)", "edit"],
    ["its claim throttled, then a pause and a resume", "pause and resume"],
  ] as const)(
    "%s: attempt 3 is a retry, unmarked; moved away before it runs, it still runs at its old time, and the one-off at its new time",
    async (_, beforeClaim) => {
      const { job, due, away } = await retryRunningWhenPaused();
      let version = 1;
      if (beforeClaim === null) await resumeJob(f.engine, job.tenantId, job.jobId);
      else {
        const { hooked } = await withHooks(
          [{ command: "PutItemCommand", when: isRunPut, fail: () => new Error("throttled") }],
          () => resumeJob(f.engine, job.tenantId, job.jobId),
        );
        expect(hooked).toBe(1);
        if (beforeClaim === "edit")
          await editJob(f.engine, job.tenantId, job.jobId, version++, {
            payload: { edited: true },
          });
        else {
          await pauseJob(f.engine, job.tenantId, job.jobId);
          await resumeJob(f.engine, job.tenantId, job.jobId);
        }
        await dispatchShard(f.engine, 0, "pass-before-claim");
      }
      const runs = await runsOf(job.jobId);
      const [cancelled, again] = [2, 3].map((n) => runs.find((r) => r.attempt === n));
      expect([again?.status, again?.rerun, again?.retryOf]).toEqual([
        "QUEUED",
        undefined,
        { runId: cancelled?.runId, fence: 0, oneOff: true },
      ]);

      await moveTo(job, version, away);
      time.ms = Math.max(time.ms, Date.parse(again?.dueAt ?? "") + SECOND);
      await expectAttempt3RunsThenNewTime(job.jobId, due, away, "RUNNING");
      expect((await getTenantJob(f.engine, job.tenantId, job.jobId)).status).toBe("COMPLETED");
    },
  );
});

describe("a failure's retry that fails as a pause's cancel lands (the narrow window): its next attempt, put before the refused ending, is not taken back", () => {
  it.each([
    ["a QUEUED run (a draw of 0)", 0],
    ["an entry half an hour out (a draw of 0.99)", 0.99],
  ])(
    "attempt 3 as %s: after the resume and a move away it runs once at its old time, and the one-off at its new time",
    async (_, draw) => {
      const { job, due, away } = await failedOnce(0, { retryApartMs: RETRY_APART_MS });
      const retry = (await runsOf(job.jobId)).find((r) => r.attempt === 2);
      if (!retry) throw new Error("no retry");
      await failsAsPauseCancels(retry, draw);
      const next = (await runsOf(job.jobId)).find((r) => r.attempt === 3);
      const [entry, ...more] = (await entriesOf(job.jobId)).filter((e) => e.kind === "retry");
      expect([await attemptsOf(job.jobId, due), (next ?? entry)?.retryOf?.runId, more]).toEqual([
        draw === 0
          ? [
              [1, "FAILED"],
              [2, "CANCELLED"],
              [3, "QUEUED"],
            ]
          : [
              [1, "FAILED"],
              [2, "CANCELLED"],
            ],
        retry.runId,
        [],
      ]);

      await resumeJob(f.engine, job.tenantId, job.jobId);
      await moveTo(job, 1, away);
      // A QUEUED attempt 3 was never sent (its failure's ending, which sends it, was refused): the
      // reaper sends it at its deadline. An entry's attempt 3 is the resume's, sent at once.
      if (next) {
        pastDeadlineOf(new Date(next.dueAt));
        expect((await reap(f.engine)).resent).toBe(1);
      } else time.ms += 5 * SECOND;
      await expectAttempt3RunsThenNewTime(job.jobId, due, away, "CANCELLED");
      if (entry) {
        // The failure's retry entry, claimed at its time, finds its attempt run: it queues nothing.
        time.ms = Math.max(time.ms, Date.parse(entry.dueAt) + 5 * SECOND);
        await dispatchShard(f.engine, 0, "pass-at-retry");
        expect([await runsCalled(job.jobId), await entriesOf(job.jobId)]).toEqual([[], []]);
      }
      expect(await attemptsOf(job.jobId, due)).toHaveLength(3);
      expect((await getTenantJob(f.engine, job.tenantId, job.jobId)).status).toBe("COMPLETED");
    },
  );
});

/**
 * A one-off created due 5 s ago (retries half an hour apart) whose first run, while it runs, has the
 * job moved 10 minutes away (version 2) and then dies: attempt 1 DEAD, listed. A retry of the run
 * an edit files in its place waits as an entry half an hour out.
 */
async function deadWhileMovedAwayRetrying() {
  const { job, due, away, first } = await failedOnce(0.99, {
    moveAway: true,
    retryable: false,
    retryApartMs: RETRY_APART_MS,
  });
  expect(await attemptsOf(job.jobId, due)).toEqual([[1, "DEAD"]]);
  return { job, due, away, dead: first };
}

describe("replays of a dead one-off's run after an edit gave its time back", () => {
  it("two replays with different Idempotency-Keys after the edit's run died too: one is the attempt after it, the other refused, and each key's repeat answers as its first did", async () => {
    const { job, due, dead } = await deadWhileMovedAwayRetrying();
    await moveTo(job, 2, due);
    // The edit's run fails for good: the occurrence has not run (after a success, a replay is
    // refused for good).
    const deps = f.workerDeps("w", {
      noop: async () => {
        throw new JobError("broken", { retryable: false });
      },
    });
    for (const received of await f.receiveAll(f.engine.queues.normal)) {
      if (received.message.jobId === job.jobId) await f.process(deps, received);
    }
    const isReplayCommit = (input: Record<string, unknown>) =>
      JSON.stringify(input.TransactItems ?? []).includes(dead.runId);

    let second: Awaited<ReturnType<typeof replayDeadLetter>> | undefined;
    const { result: refused, hooked } = await withHook(
      "TransactWriteItemsCommand",
      async () => {
        second = await replayDeadLetter(f.engine, job.tenantId, dead.runId, "key-b");
      },
      () => replayRefusal(job, dead.runId, "key-a"),
      isReplayCommit,
    );

    expect(hooked).toBe(1);
    expect([second?.run.attempt, second?.earlier]).toEqual([3, false]);
    expect(refused).toMatch(/replayed/);
    expect(await attemptsOf(job.jobId, due)).toEqual([
      [1, "DEAD"],
      [2, "DEAD"],
      [3, "QUEUED"],
    ]);
    const repeat = await replayDeadLetter(f.engine, job.tenantId, dead.runId, "key-b");
    expect([repeat.run.runId, repeat.earlier]).toEqual([second?.run.runId, true]);
    expect(await replayRefusal(job, dead.runId, "key-a")).toContain(
      `already replayed as ${second?.run.runId}`,
    );
  });

  it("while the edit's run is FAILED with its retry an entry half an hour out: refused naming that run, and the retry runs once at its time", async () => {
    const { job, due, dead } = await deadWhileMovedAwayRetrying();
    await moveTo(job, 2, due);
    const deps = f.workerDeps("w", {
      noop: async () => {
        throw new JobError("flaky", { retryable: true });
      },
    });
    for (const received of await f.receiveAll(f.engine.queues.normal)) {
      if (received.message.jobId === job.jobId)
        await f.process({ ...deps, engine: { ...f.engine, random: () => 0.99 } }, received);
    }
    expect(await attemptsOf(job.jobId, due)).toEqual([
      [1, "DEAD"],
      [2, "FAILED"],
    ]);
    const [retry] = (await entriesOf(job.jobId)).filter((e) => e.kind === "retry");
    if (!retry) throw new Error("no retry entry");

    const why = await replayRefusal(job, dead.runId);
    expect(why).toContain(`runs again as ${dead.runId.replace(/-1$/, "-2")} (failed)`);

    expect(await atRetryTime(job.jobId, retry, due)).toEqual([[due.toISOString(), 1]]);
    expect(await attemptsOf(job.jobId, due)).toEqual([
      [1, "DEAD"],
      [2, "FAILED"],
      [3, "SUCCEEDED"],
    ]);
  });

  it("after the edit's run was skipped by a move away: the replay runs once, and the one-off stays active for its new time", async () => {
    const { job, due, dead } = await deadWhileMovedAwayRetrying();
    await moveTo(job, 2, due);
    const later = new Date(clock().getTime() + 1200 * SECOND);
    await moveTo(job, 3, later);
    expect(await runsCalled(job.jobId)).toEqual([]);
    expect(await attemptsOf(job.jobId, due)).toEqual([
      [1, "DEAD"],
      [2, "SKIPPED"],
    ]);

    const replayed = await replayDeadLetter(f.engine, job.tenantId, dead.runId);

    expect([replayed.run.attempt, replayed.run.rerun]).toEqual([3, undefined]);
    expect(await runsCalled(job.jobId)).toEqual([[due.toISOString(), 1]]);
    const after = await getTenantJob(f.engine, job.tenantId, job.jobId);
    expect([after.status, after.nextRunAt]).toEqual(["ACTIVE", later.toISOString()]);
  });
});
