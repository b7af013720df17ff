import { describe, expect, it } from "vitest";
import { NotReplayableError } from "../../shared/errors.js";
import { editJob, pauseJob, resumeJob } from "../../shared/jobs/index.js";
import { getTenantJob } from "../../shared/jobs/queries.js";
import type { Job } from "../../shared/model.js";
import { useClaimRace } from "../support/claim-race.js";
import { useOneOffMoves } from "../support/one-off-moves.js";

/**
 * A paused one-off given its time back by an edit while its attempt 1 still ran, its retry
 * (attempt 2) QUEUED: the edit filed the occurrence at attempt 1, the retry under way. Attempt 1
 * then dies (DEAD), so the retry will not run. The resume takes it back (SKIPPED), or reads it so
 * on a plan again, and files the occurrence at attempt 3 (`pendingOccurrence`); a replay of the
 * dead run takes attempt 2, over the skipped retry (its key). Racing, whichever of the two writes
 * second sees the other: the replay's job write (no attempt filed past it, `notFiledPast`) is
 * refused, or the resume's commit (the retry still a retry, `stillARetry`) is planned again, and
 * the occurrence runs once, not as both attempts under one idempotency key.
 */

const race = useClaimRace({}, { fixturePer: "file" });
const { fixture, withHook, withHooks } = race;
const { moveTo, attemptsOf, deadWithRetryLeft, transactionWith, expectRanOnce } =
  useOneOffMoves(race);

/**
 * Attempt 1 DEAD (its worker died between attempt 2's put and the FAILED ending; its next delivery
 * died while the job was moved away, paused, and moved back), attempt 2 its retry, still QUEUED;
 * the job PAUSED for that time, its occurrence filed at attempt 1 (the retry was under way).
 */
async function pausedDeadWithRetryQueued() {
  const f = fixture();
  const dead = await deadWithRetryLeft(async (job, { due, away }) => {
    await moveTo(job, 1, away);
    const paused = await pauseJob(f.engine, job.tenantId, job.jobId);
    await moveTo(paused, paused.version, due);
  });
  const paused = await getTenantJob(f.engine, dead.job.tenantId, dead.job.jobId);
  expect([paused.status, paused.nextRunAt, paused.oneOffAttempt]).toEqual([
    "PAUSED",
    dead.due.toISOString(),
    undefined,
  ]);
  const resume = async () => {
    await resumeJob(f.engine, dead.job.tenantId, dead.job.jobId);
  };
  return { ...dead, resume };
}

/** The replay stood, and the resume, planned again, left the occurrence to it: run once, as attempt 2. */
async function expectReplayRanIt(job: Job, due: Date, replayed: unknown) {
  expect(replayed).not.toBeInstanceOf(Error);
  await expectRanOnce(job, due, [
    [1, "DEAD"],
    [2, "SUCCEEDED"],
  ]);
}

describe("a replay of a paused one-off's dead run racing its resume, which files the occurrence after the dead run's retry", () => {
  it("is refused when the resume commits between the replay's read of the job and its write", async () => {
    const { job, due, replay, resume, replayed } = await pausedDeadWithRetryQueued();
    const { hooked } = await withHook(
      "TransactWriteItemsCommand",
      resume,
      replay,
      transactionWith("runs"),
    );
    expect(hooked).toBe(1);
    expect(replayed()).toBeInstanceOf(NotReplayableError);
    expect(String((replayed() as NotReplayableError).context.why)).toContain("attempt 3");
    await expectRanOnce(job, due, [
      [1, "DEAD"],
      [2, "SKIPPED"],
      [3, "SUCCEEDED"],
    ]);
  });

  it("stands when it lands between the resume's take-back of the retry and its commit: the resume, planned again, runs it", async () => {
    const { job, due, replay, resume, replayed } = await pausedDeadWithRetryQueued();
    const { hooked } = await withHook(
      "TransactWriteItemsCommand",
      replay,
      resume,
      transactionWith("job"),
    );
    expect(hooked).toBe(1);
    await expectReplayRanIt(job, due, replayed());
  });

  // The resume's first plan took the retry back and its commit was refused (an edit of the job's
  // name landed first): the plan again reads the retry SKIPPED, and files attempt 3 after it.
  it("stands when it lands between a resume's read of the retry it skipped and its commit: the resume, planned again, runs it", async () => {
    const { f, job, due, replay, resume, replayed } = await pausedDeadWithRetryQueued();
    let renamed = false;
    const rename = async () => {
      const paused = await getTenantJob(f.engine, job.tenantId, job.jobId);
      await editJob(f.engine, job.tenantId, job.jobId, paused.version, { name: "renamed" });
      renamed = true;
    };
    const isJobTransaction = transactionWith("job");
    const { hooked } = await withHooks(
      [
        { command: "TransactWriteItemsCommand", when: isJobTransaction, before: rename },
        {
          command: "TransactWriteItemsCommand",
          when: (input) => renamed && isJobTransaction(input),
          before: async () => {
            expect(await attemptsOf(job.jobId, due)).toEqual([
              [1, "DEAD"],
              [2, "SKIPPED"],
            ]);
            await replay();
          },
        },
      ],
      resume,
    );
    expect(hooked).toBe(2);
    await expectReplayRanIt(job, due, replayed());
  });
});
