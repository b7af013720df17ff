import { describe, expect, it } from "vitest";
import { NotReplayableError } from "../../shared/errors.js";
import { JobError, type JobHandler } from "../../shared/execution/job-contract.js";
import { processRun } from "../../shared/execution/worker.js";
import { createJob, replayDeadLetter } from "../../shared/jobs/index.js";
import { getTenantJob } from "../../shared/jobs/queries.js";
import type { Job } from "../../shared/model.js";
import { SECOND, useClaimRace } from "../support/claim-race.js";
import { deliveryOfRun, testJob } from "../support/engine-fixture.js";
import { dyingAtFailedEnding } from "../support/faults.js";
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

const race = useClaimRace();
const { clock, fixture, withHook, isRunPut, runsCalled } = race;
const { moveTo, attemptsOf } = useOneOffMoves(race);

/**
 * Attempt 1 DEAD (its worker died between attempt 2's put and the FAILED ending, and its next
 * delivery died while an edit moved the job away, version 2), attempt 2 its retry, still QUEUED.
 */
async function deadWithRetryQueued() {
  const f = fixture();
  const due = new Date(clock().getTime() - 5 * SECOND);
  const away = new Date(clock().getTime() + 600 * SECOND);
  const { job } = await createJob(
    f.engine,
    testJob({
      schedule: { runAt: due.toISOString() },
      policies: {
        ...testJob().policies,
        retry: { maxAttempts: 3, initialDelayMs: 1000, maxDelayMs: 1000 },
      },
    }),
  );
  const [first] = await race.runsOf(job.jobId);
  if (!first) throw new Error("the create queued no run");

  // Attempt 1 fails; its worker dies between attempt 2's put and the FAILED ending.
  const dying = dyingAtFailedEnding(f.engine);
  const flaky: JobHandler = async () => {
    throw new JobError("flaky", { retryable: true });
  };
  try {
    await expect(
      processRun(
        { ...f.workerDeps("dies", { noop: flaky }, 100), engine: dying.engine },
        deliveryOfRun(f.engine, first),
      ),
    ).rejects.toThrow("process died");
  } finally {
    dying.destroy();
  }
  // Delivered again, it dies while an edit moves the job away (version 2).
  const dies: JobHandler = async () => {
    await moveTo(job, 1, away);
    throw new JobError("bad request", { retryable: false });
  };
  await f.process(f.workerDeps("w", { noop: dies }), deliveryOfRun(f.engine, first));
  expect(await attemptsOf(job.jobId, due)).toEqual([
    [1, "DEAD"],
    [2, "QUEUED"],
  ]);
  let replayed: unknown;
  const replay = async () => {
    replayed = await replayDeadLetter(f.engine, job.tenantId, first.runId).catch(
      (error: unknown) => error,
    );
  };
  return { f, job, due, replay, replayed: () => replayed };
}

/** A transaction that writes a run (a replay's) or updates the job (an edit's commit). */
const transactionWith = (table: "runs" | "job") => (input: Record<string, unknown>) =>
  (
    (input.TransactItems as
      | { Put?: { TableName?: string }; Update?: { Key?: { pk?: unknown } } }[]
      | undefined) ?? []
  ).some((item) =>
    table === "runs"
      ? item.Put?.TableName === fixture().engine.tables.runs
      : String(item.Update?.Key?.pk).startsWith("JOB#"),
  );

/** The occurrence ran once, as the last of `attempts`, and completed its one-off. */
async function expectRanOnce(job: Job, due: Date, attempts: [number, string][]) {
  expect(await runsCalled(job.jobId)).toEqual([[due.toISOString(), 1]]);
  expect(await attemptsOf(job.jobId, due)).toEqual(attempts);
  expect((await getTenantJob(fixture().engine, job.tenantId, job.jobId)).status).toBe("COMPLETED");
}

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
    const retry = (await race.runsOf(job.jobId)).find((r) => r.attempt === 2);
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
