import { describe, expect, it } from "vitest";
import { reap } from "../../shared/dispatch/reaper.js";
import { cancelRun, pauseJob, resumeJob } from "../../shared/jobs/index.js";
import { getTenantJob } from "../../shared/jobs/queries.js";
import type { Job } from "../../shared/model.js";
import { sweepExpired } from "../../shared/storage/expiry-sweep.js";
import { recordRunOnJob } from "../../shared/storage/run-on-job.js";
import { getRun } from "../../shared/storage/run-reads.js";
import { ONE_OFF_CLAIM_WRITES, useClaimRace } from "../support/claim-race.js";
import { deliveryOfRun } from "../support/engine-fixture.js";
import { useOneOffMoves } from "../support/one-off-moves.js";

/**
 * A one-off's retry at a time the one-off left, cancelled through the API while it runs; an edit
 * back to that time files the occurrence at the next attempt, which waits for the cancelled one to
 * end. The cancelled attempt's ending, landing between the edit and the claim of that next
 * attempt, found the job ACTIVE and the one-off of its occurrence, and completed it: the claim
 * found its entry orphaned and the one-off at its time never ran. An ending completes a one-off
 * only from the attempt its occurrence was filed at (`oneOffAttempt`): the edit's, or a resume's;
 * a later filing of another time, or of that time at attempt 1, completes from attempt 1 again.
 */

const DAY = 86_400_000;

describe.each(ONE_OFF_CLAIM_WRITES)(
  "an earlier attempt's ending while a later attempt is pending (oneOffClaimWrites %s)",
  (oneOffClaimWrites) => {
    const race = useClaimRace({ oneOffClaimWrites });
    const { clock, fixture, withHook, isRunPut, runsCalled } = race;
    const { retryRunningAtOldTime, moveTo, attemptsOf } = useOneOffMoves(race);

    /** Attempt 2 asked to cancel through the API while it runs, its worker's lease lapsed since. */
    async function cancelledRetry() {
      const f = fixture();
      const { job, due, retry } = await retryRunningAtOldTime();
      const asked = await cancelRun(f.engine, job.tenantId, job.jobId, retry.runId);
      expect([asked.status, asked.cancelledBy]).toEqual(["RUNNING", "api"]);
      // worker-a's lease lapses: a delivery of attempt 2 ends it CANCELLED, as asked.
      race.pastDeadlineOf(clock());
      const deliverRetry = async () => {
        await f.process(f.workerDeps("w", {}), deliveryOfRun(f.engine, retry));
      };
      return { job, due, retry, deliverRetry };
    }

    /** Attempt 3 is QUEUED with the job ACTIVE; delivered, it runs once and completes the job. */
    async function attempt3RunsOnce(job: Job, due: Date) {
      const f = fixture();
      expect(await attemptsOf(job.jobId, due)).toEqual([
        [1, "FAILED"],
        [2, "CANCELLED"],
        [3, "QUEUED"],
      ]);
      expect((await getTenantJob(f.engine, job.tenantId, job.jobId)).status).toBe("ACTIVE");
      expect((await runsCalled(job.jobId)).filter(([at]) => at === due.toISOString())).toEqual([
        [due.toISOString(), 1],
      ]);
      race.pastDeadlineOf(clock());
      await reap(f.engine);
      expect(await runsCalled(job.jobId)).toEqual([]);
      expect(await attemptsOf(job.jobId, due)).toEqual([
        [1, "FAILED"],
        [2, "CANCELLED"],
        [3, "SUCCEEDED"],
      ]);
      expect((await getTenantJob(f.engine, job.tenantId, job.jobId)).status).toBe("COMPLETED");
    }

    /** The job's runs delivered (the reaper's re-sends too): `at`'s attempt 1 runs once, and completes it. */
    async function firstAttemptCompletes(job: Job, at: Date) {
      const f = fixture();
      race.pastDeadlineOf(clock());
      await reap(f.engine);
      expect((await runsCalled(job.jobId)).filter(([when]) => when === at.toISOString())).toEqual([
        [at.toISOString(), 1],
      ]);
      expect(await attemptsOf(job.jobId, at)).toEqual([[1, "SUCCEEDED"]]);
      expect((await getTenantJob(f.engine, job.tenantId, job.jobId)).status).toBe("COMPLETED");
    }

    it.each([
      ["ended by its worker in that gap, as asked", false],
      ["ended before the edit, a repeat delivery of it in that gap (its repair)", true],
    ] as const)(
      "the API-cancelled attempt 2, %s: the job stays ACTIVE until attempt 3 runs, once",
      async (_, endedBefore) => {
        const { job, due, deliverRetry } = await cancelledRetry();
        if (endedBefore) await deliverRetry();
        // The edit back files the occurrence at attempt 3 and claims it at once: the delivery
        // lands between the edit's commit and that claim's put of attempt 3.
        const { hooked } = await withHook(
          "PutItemCommand",
          deliverRetry,
          () => moveTo(job, 2, due),
          isRunPut,
        );
        expect(hooked).toBe(1);
        await attempt3RunsOnce(job, due);
      },
    );

    it("paused, given its time back and resumed: attempt 2 ending between the resume's commit and its claim leaves the job ACTIVE", async () => {
      const f = fixture();
      const { job, due, deliverRetry } = await cancelledRetry();
      const paused = await pauseJob(f.engine, job.tenantId, job.jobId);
      await moveTo(job, paused.version, due);
      const { hooked } = await withHook(
        "PutItemCommand",
        deliverRetry,
        () => resumeJob(f.engine, job.tenantId, job.jobId),
        isRunPut,
      );
      expect(hooked).toBe(1);
      await attempt3RunsOnce(job, due);
    });

    it("attempt 2's ending written on a completion decided before the edit back: the job's write refuses it", async () => {
      const f = fixture();
      const { job, due, retry, deliverRetry } = await cancelledRetry();
      await deliverRetry();
      await moveTo(job, 2, due);
      const ended = await getRun(f.engine, retry);
      if (!ended) throw new Error("attempt 2 is gone");
      expect(ended.status).toBe("CANCELLED");
      // As a worker that read the job before the edit and took the one-off for its occurrence's.
      await recordRunOnJob(f.engine, ended, {
        status: "CANCELLED",
        ran: false,
        tracked: false,
        completesJob: true,
      });
      await attempt3RunsOnce(job, due);
    });

    it("given its time back and then a new time: that time's first attempt completes it", async () => {
      const { job, due, deliverRetry } = await cancelledRetry();
      await moveTo(job, 2, due);
      const later = new Date(clock().getTime() - 1000);
      await moveTo(job, 3, later);
      await deliverRetry();
      await firstAttemptCompletes(job, later);
    });

    it("paused, given its time back, and resumed once its runs there expired: the first attempt the resume files completes it", async () => {
      const f = fixture();
      const { job, due } = await cancelledRetry();
      const paused = await pauseJob(f.engine, job.tenantId, job.jobId);
      await moveTo(job, paused.version, due);
      // A pause past the retention: DynamoDB's TTL has deleted the runs at that time.
      race.time.ms += 2 * f.engine.settings.retentionDays * DAY;
      await sweepExpired(f.engine, clock());
      expect(await attemptsOf(job.jobId, due)).toEqual([]);
      await resumeJob(f.engine, job.tenantId, job.jobId);
      await firstAttemptCompletes(job, due);
    });
  },
);
