import { describe, expect, it } from "vitest";
import { reap } from "../../shared/dispatch/reaper.js";
import { JobError } from "../../shared/execution/job-contract.js";
import { nextAttempt } from "../../shared/execution/next-attempt.js";
import { cancelRun } from "../../shared/jobs/index.js";
import { getTenantJob } from "../../shared/jobs/queries.js";
import type { Job } from "../../shared/model.js";
import { finishRun } from "../../shared/storage/run-finish.js";
import { getRun } from "../../shared/storage/run-reads.js";
import { ONE_OFF_CLAIM_WRITES, useClaimRace } from "../support/claim-race.js";
import { deliveryOfRun } from "../support/engine-fixture.js";
import { RAN_AT_ATTEMPT_3, useOneOffMoves } from "../support/one-off-moves.js";

/**
 * A one-off's retry at a time the one-off left fails while an API cancel of it is asked: its
 * worker puts its next attempt first (QUEUED), then its FAILED ending is refused on the cancel and
 * it takes that attempt back (SKIPPED). An edit back to that time, whose read of the runs there came
 * before that put, files the occurrence at the same attempt; its claim's put landing after the
 * worker's put found the key taken, took the occurrence for handled, and left the job ACTIVE with
 * nothing pending: the one-off never ran, and never completed. The claim of an occurrence filed
 * again takes over such a next attempt, which never ran and never will (`OWN_RETRY_NEVER_RUN`):
 * SKIPPED, or still QUEUED as put. Still QUEUED under an edit's entry naming no run, the older job
 * version let the claim replace it before too (coverage); under one naming the cancelled run
 * (`retryOf`, fence 0: its start written when asked to cancel), it did not.
 */

type Input = Record<string, unknown>;

describe.each(ONE_OFF_CLAIM_WRITES)(
  "an edit back racing a cancelled retry's own next attempt (oneOffClaimWrites %s)",
  (oneOffClaimWrites) => {
    const race = useClaimRace({ oneOffClaimWrites });
    const { clock, fixture, withHooks, isRunPut, runsCalled } = race;
    const { retryAtOldTime, retryRunningAtOldTime, moveTo, attemptsOf } = useOneOffMoves(race);

    /** The worker's FAILED ending of a run (refused here: the run was asked to cancel). */
    const isFailedEnding = (input: Input) =>
      input.TableName === fixture().engine.tables.runs &&
      String(input.UpdateExpression).includes("finishedAt") &&
      JSON.stringify(input.ExpressionAttributeValues).includes('"FAILED"');

    const current = (job: Job) => getTenantJob(fixture().engine, job.tenantId, job.jobId);

    /**
     * A hook holding the edit's claim at its run's put until `release` (`claimReached` once there),
     * and one releasing it at attempt 2's FAILED ending, after attempt 3's put and before its
     * take-back, and waiting for `edit` (the claim) to end.
     */
    function claimHeldAtPut() {
      let atClaim: () => void = () => undefined;
      const claimReached = new Promise<void>((resolve) => {
        atClaim = resolve;
      });
      let release: () => void = () => undefined;
      const gate = new Promise<void>((resolve) => {
        release = resolve;
      });
      const claimHeld = {
        command: "PutItemCommand",
        before: async () => {
          atClaim();
          await gate;
        },
        when: isRunPut,
      };
      const releasedAtEnding = (edit: () => Promise<unknown>) => ({
        command: "UpdateItemCommand",
        before: async () => {
          release();
          await edit();
        },
        when: isFailedEnding,
      });
      return { claimHeld, claimReached, release, releasedAtEnding };
    }

    /** Delivered (the reaper's re-sends too), attempt 3 runs once, and completes the one-off. */
    async function occurrenceRanOnce(job: Job, due: Date) {
      const f = fixture();
      race.pastDeadlineOf(clock());
      await reap(f.engine);
      const called = (await runsCalled(job.jobId)).filter(([at]) => at === due.toISOString());
      const attempts = await attemptsOf(job.jobId, due);
      expect({ attempts, status: (await current(job)).status, called: called.length }).toEqual({
        attempts: RAN_AT_ATTEMPT_3,
        status: "COMPLETED",
        called: 1,
      });
    }

    it.each([
      ["taken back before the claim's put", false],
      ["still QUEUED at the claim's put, taken back after", true],
    ] as const)(
      "the failure's own attempt 3, put between the edit's read and its claim, %s: the occurrence runs once",
      async (_, claimBeforeTakeBack) => {
        const f = fixture();
        const { job, due, retry } = await retryAtOldTime();
        const { claimHeld, claimReached, release, releasedAtEnding } = claimHeldAtPut();
        let edit: Promise<unknown> = Promise.resolve();
        // Attempt 2 runs: asked to cancel through the API, the edit back committed (its claim
        // held at its run's put), it fails retryably: its worker puts attempt 3.
        const failing = async () => {
          await cancelRun(f.engine, job.tenantId, job.jobId, retry.runId);
          edit = moveTo(job, 2, due);
          await claimReached;
          throw new JobError("flaky", { retryable: true });
        };
        // The claim goes on once attempt 3 is put, before the refused ending takes it back.
        const claimAtEnding = releasedAtEnding(() => edit);
        const deps = f.workerDeps("w", { noop: failing });
        const { hooked } = await withHooks(
          claimBeforeTakeBack ? [claimHeld, claimAtEnding] : [claimHeld],
          () =>
            f.process(
              { ...deps, engine: { ...f.engine, random: () => 0 } },
              deliveryOfRun(f.engine, retry),
            ),
        );
        expect(hooked).toBe(claimBeforeTakeBack ? 2 : 1);
        if (!claimBeforeTakeBack) {
          expect(await attemptsOf(job.jobId, due)).toEqual([
            [1, "FAILED"],
            [2, "CANCELLED"],
            [3, "SKIPPED"],
          ]);
          release();
        }
        await edit;
        await occurrenceRanOnce(job, due);
      },
    );

    it("attempt 2 asked to cancel while its start is written (the edit's attempt 3 names it), its failure's attempt 3 still QUEUED at the claim's put: the occurrence runs once", async () => {
      const f = fixture();
      const { job, due, retry } = await retryRunningAtOldTime();
      await cancelRun(f.engine, job.tenantId, job.jobId, retry.runId);
      const held = await getRun(f.engine, retry);
      if (!held) throw new Error("attempt 2 is gone");
      const { claimHeld, claimReached, releasedAtEnding } = claimHeldAtPut();
      let edit: Promise<unknown> = Promise.resolve();
      const now = clock();
      // worker-a's failure of attempt 2, as its worker writes it: attempt 3 put, then the ending.
      const { ending } = nextAttempt(f.engine, await current(job), held, 3, now, now);
      const { hooked } = await withHooks([claimHeld, releasedAtEnding(() => edit)], async () => {
        edit = moveTo(job, 2, due);
        await claimReached;
        const failed = { status: "FAILED", ran: true, tracked: false, retry: ending } as const;
        const refused = await finishRun(f.engine, held, failed, now).catch((e: unknown) => e);
        expect(String(refused)).toContain("RunCancelledError");
        await edit;
      });
      expect(hooked).toBe(2);
      await occurrenceRanOnce(job, due);
    });
  },
);
