import { beforeEach, describe, expect, it } from "vitest";
import { cancelJob, deleteJob, pauseJob, resumeJob } from "../../shared/jobs/index.js";
import { useClaimRace } from "../support/claim-race.js";
import type { EngineFixture } from "../support/engine-fixture.js";
import { useOneOffMoves } from "../support/one-off-moves.js";

/**
 * A resume puts the next attempts of a one-off's retries a pause cancelled at occurrences it has
 * left (`retriesCancelledElsewhere`) as plain PutItems before its transaction: a job cancel or a
 * delete that commits and sweeps the one-off's runs between the resume's read and those puts does
 * not see them. The resume's transaction is then refused, and its puts stayed QUEUED in the
 * cancelled (or deleted) job's history until the reaper sent them to a worker that ended them.
 */

const race = useClaimRace({}, { fixturePer: "file" });
const { runsOf, fixture, withHooks, isRunPut } = race;
const { retryRunningAtOldTime, attemptsOf } = useOneOffMoves(race);
let f: EngineFixture;
beforeEach(() => {
  f = fixture();
});

/** Attempt 3, the resume's put, ended CANCELLED as the job cancel would have; attempt 2 runs on, asked to cancel. */
async function expectPutEndedCancelled(jobId: string, due: Date) {
  const third = (await runsOf(jobId)).find((r) => r.attempt === 3);
  expect([third?.status, third?.cancelledBy]).toEqual(["CANCELLED", "job-cancel"]);
  expect(await attemptsOf(jobId, due)).toEqual([
    [1, "FAILED"],
    [2, "RUNNING"],
    [3, "CANCELLED"],
  ]);
}

describe("a resume whose next attempt's put lands after a job cancel's or a delete's sweep", () => {
  it.each([
    ["cancel", cancelJob, "IllegalTransitionError"],
    ["delete", deleteJob, "JobNotFoundError"],
  ] as const)(
    "%s: the attempt put is ended CANCELLED by the resume, none left QUEUED",
    async (_, end, refusal) => {
      // Attempt 2, a retry at the time the one-off left, runs when a pause cancels it: the
      // resume puts attempt 3 there.
      const { job, due } = await retryRunningAtOldTime();
      await pauseJob(f.engine, job.tenantId, job.jobId, { running: "cancel" });

      const { result, hooked } = await withHooks(
        [
          {
            command: "PutItemCommand",
            when: isRunPut,
            before: async () => {
              await end(f.engine, job.tenantId, job.jobId);
            },
          },
        ],
        () => resumeJob(f.engine, job.tenantId, job.jobId).catch((error: unknown) => error),
      );
      expect(hooked).toBe(1);
      expect((result as Error).name).toBe(refusal);

      await expectPutEndedCancelled(job.jobId, due);
    },
  );

  it("a pause's check after a resume that landed meanwhile, its put after a job cancel's sweep: ended CANCELLED, none left QUEUED", async () => {
    const { job, due, retry } = await retryRunningAtOldTime();
    const isCancelRequest = (input: Record<string, unknown>) =>
      String(input.UpdateExpression).includes("cancelRequestedAt = :now");
    const { hooked } = await withHooks(
      [
        {
          command: "UpdateItemCommand",
          when: isCancelRequest,
          before: async () => {
            await resumeJob(f.engine, job.tenantId, job.jobId);
          },
        },
        {
          command: "PutItemCommand",
          when: isRunPut,
          before: async () => {
            await cancelJob(f.engine, job.tenantId, job.jobId);
          },
        },
      ],
      () => pauseJob(f.engine, job.tenantId, job.jobId, { running: "cancel" }),
    );
    expect(hooked).toBe(2);
    expect((await runsOf(job.jobId)).find((r) => r.runId === retry.runId)?.cancelledBy).toBe(
      "pause",
    );

    await expectPutEndedCancelled(job.jobId, due);
  });
});
