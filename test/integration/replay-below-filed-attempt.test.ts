import { describe, expect, it } from "vitest";
import { NotReplayableError } from "../../shared/errors.js";
import type { JobHandler } from "../../shared/execution/job-contract.js";
import type { Job } from "../../shared/model.js";
import { useClaimRace } from "../support/claim-race.js";
import { deliveryOfRun } from "../support/engine-fixture.js";
import { useOneOffMoves } from "../support/one-off-moves.js";

/**
 * A one-off's attempt 1 that fails, its worker dying between the retry's put and the FAILED
 * ending, and then dies (DEAD) on its next delivery while the job is moved away: attempt 2, its
 * retry, still QUEUED. An edit back to that time takes attempt 2 back (SKIPPED) and files the
 * occurrence at attempt 3 (`oneOffAttempt`). A replay of the dead run before attempt 3's claim took
 * attempt 2, over its skipped retry (the replay's key), and both ran: the occurrence twice, under
 * one idempotency key, and the replay's success completed nothing. The replay is refused while the
 * attempt an edit filed has no run: it runs the occurrence. Racing the edit, whichever of the two
 * writes second sees the other: the replay's job write (no attempt filed past it) is refused, or
 * the edit's commit (the retry it took back still a retry) is planned again.
 */

const race = useClaimRace({}, { fixturePer: "file" });
const { withHook, isRunPut, runsOf } = race;
const { moveTo, attemptsOf, deadWithRetryLeft, transactionWith, expectRanOnce } =
  useOneOffMoves(race);

/**
 * Attempt 1 DEAD (its worker died between attempt 2's put and the FAILED ending, and its next
 * delivery died while an edit moved the job away, version 2), attempt 2 its retry, still QUEUED.
 */
const deadWithRetryQueued = () => deadWithRetryLeft((job, { away }) => moveTo(job, 1, away));

/** The replay refused, naming attempt 3, which the edit back filed and which runs. */
function expectRefusedForAttempt3(replayed: unknown) {
  expect(replayed).toBeInstanceOf(NotReplayableError);
  expect(String((replayed as NotReplayableError).context.why)).toContain("attempt 3");
}

const FILED_ATTEMPT_RAN: [number, string][] = [
  [1, "DEAD"],
  [2, "SKIPPED"],
  [3, "SUCCEEDED"],
];

/**
 * The replay, whole, just before the edit back's commit: it stands, the edit is planned again and
 * meets its run, which runs the occurrence, once.
 */
async function replayWithinEditBack(
  job: Job,
  due: Date,
  replay: () => Promise<void>,
  replayed: () => unknown,
) {
  const { hooked } = await withHook(
    "TransactWriteItemsCommand",
    replay,
    () => moveTo(job, 2, due),
    transactionWith("job"),
  );
  expect(hooked).toBe(1);
  expect(replayed()).not.toBeInstanceOf(Error);
  await expectRanOnce(job, due, [
    [1, "DEAD"],
    [2, "SUCCEEDED"],
  ]);
}

describe("a replay of a one-off's dead run after an edit back filed its occurrence at a later attempt", () => {
  it("is refused before that attempt's claim, and the filed attempt runs, once", async () => {
    const { job, due, replay, replayed } = await deadWithRetryQueued();
    // The edit back: attempt 2 taken back, attempt 3 filed; the replay lands before its claim.
    const { hooked } = await withHook(
      "PutItemCommand",
      replay,
      () => moveTo(job, 2, due),
      isRunPut,
    );
    expect(hooked).toBe(1);
    expectRefusedForAttempt3(replayed());
    await expectRanOnce(job, due, FILED_ATTEMPT_RAN);
  });

  // The replay read the job before the edit's commit (no attempt filed yet) and wrote after it:
  // its write over the skipped retry stood, and attempts 2 and 3 both ran.
  it("is refused when the edit commits between the replay's read of the job and its write", async () => {
    const { job, due, replay, replayed } = await deadWithRetryQueued();
    const { hooked } = await withHook(
      "TransactWriteItemsCommand",
      async () => {
        await moveTo(job, 2, due);
      },
      replay,
      transactionWith("runs"),
    );
    expect(hooked).toBe(1);
    expectRefusedForAttempt3(replayed());
    await expectRanOnce(job, due, FILED_ATTEMPT_RAN);
  });

  // The replay, whole, between the edit's take-back of attempt 2 and its commit: it put attempt 2
  // over the skipped retry, the edit then filed attempt 3, and both ran.
  it("stands when it lands between the edit's take-back and its commit: the edit, planned again, runs it", async () => {
    const { job, due, replay, replayed } = await deadWithRetryQueued();
    await replayWithinEditBack(job, due, replay, replayed);
  });

  // The retry skipped by its own worker (its predecessor dead) before the edit back read it: the
  // replay, whole, between that read and the edit's commit put attempt 2 over it, the edit then
  // filed attempt 3, and both ran.
  it("stands when it lands between an edit's read of a skipped retry and its commit: the edit, planned again, runs it", async () => {
    const { f, job, due, replay, replayed } = await deadWithRetryQueued();
    const retry = (await runsOf(job.jobId)).find((r) => r.attempt === 2);
    if (!retry) throw new Error("no retry");
    const unrun: JobHandler = async () => {
      throw new Error("the skipped retry ran");
    };
    await f.process(f.workerDeps("w2", { noop: unrun }), deliveryOfRun(f.engine, retry));
    expect(await attemptsOf(job.jobId, due)).toEqual([
      [1, "DEAD"],
      [2, "SKIPPED"],
    ]);
    await replayWithinEditBack(job, due, replay, replayed);
  });
});
