import { describe, expect, it } from "vitest";
import { claimDueEntry } from "../../shared/dispatch/claim.js";
import { JobError } from "../../shared/execution/job-contract.js";
import { cancelRun, createJob, pauseJob, resumeJob } from "../../shared/jobs/index.js";
import { getTenantJob } from "../../shared/jobs/queries.js";
import type { Job, Run } from "../../shared/model.js";
import { ValidationError } from "../../shared/validation.js";
import { ONE_OFF_CLAIM_WRITES, SECOND, useClaimRace } from "../support/claim-race.js";
import { deliveryOfRun, testJob } from "../support/engine-fixture.js";
import { useOneOffMoves } from "../support/one-off-moves.js";

/**
 * An edit that gives a one-off back a `runAt` whose run, read under way, ends between the edit's
 * read of it and the edit's commit: skipped by its worker as an occurrence the job no longer has,
 * SUCCEEDED, DEAD, or cancelled through the API. Filed at attempt 1 as read, its claim found that
 * attempt's run handled: the one-off stayed ACTIVE with nothing pending. The edit's commit is
 * conditioned on the run it read still under way; refused, it reads again and decides as an edit
 * after that ending does: the next attempt, or a refusal of a time whose run succeeded.
 */

type Input = Record<string, unknown>;

describe.each(ONE_OFF_CLAIM_WRITES)(
  "an edit back to a one-off's time whose run ends before the edit commits (oneOffClaimWrites %s)",
  (oneOffClaimWrites) => {
    const race = useClaimRace({ oneOffClaimWrites }, { fixturePer: "file" });
    const { clock, fixture, withHook, runsCalled } = race;
    const { moveTo, attemptsOf, failedOnce, retryEntryOf } = useOneOffMoves(race);

    /** The edit's commit: a transaction that updates a job. */
    const isEditCommit = (input: Input) =>
      ((input.TransactItems as { Update?: { Key?: Input } }[] | undefined) ?? []).some((item) =>
        String(item.Update?.Key?.pk).startsWith("JOB#"),
      );

    /** A one-off due 5 s ago, its attempt 1 QUEUED by its create: the job, its time, that run. */
    async function oneOffQueued(retryable = true) {
      const due = new Date(clock().getTime() - 5 * SECOND);
      const { job } = await createJob(
        fixture().engine,
        testJob({
          schedule: { runAt: due.toISOString() },
          ...(retryable
            ? {}
            : {
                policies: {
                  ...testJob().policies,
                  retry: { maxAttempts: 1, initialDelayMs: 1000, maxDelayMs: 1000 },
                },
              }),
        }),
      );
      const [run] = (await race.runsOf(job.jobId)).filter(
        (r) => r.scheduledFor === due.toISOString(),
      );
      if (!run) throw new Error("the create queued no run");
      return { job, due, run };
    }

    const away = () => new Date(clock().getTime() + 600 * SECOND);

    /** The edit back to `due` (from version 2), `between` its read and its commit: its job or error. */
    async function editBack(job: Job, due: Date, between: () => Promise<void>) {
      const { result, hooked } = await withHook(
        "TransactWriteItemsCommand",
        between,
        () => moveTo(job, 2, due).catch((error: unknown) => error),
        isEditCommit,
      );
      expect(hooked).toBe(1);
      return result;
    }

    /**
     * Attempt 1 delivered to a worker whose handler moves the job away (version 2) and then waits
     * for `end`, which it returns or throws: the delivery under way, and `ended`, which lets it go
     * and waits for its worker's ending.
     */
    async function runningMovedAway(job: Job, run: Run, outcome: () => unknown) {
      const f = fixture();
      let moved: () => void = () => undefined;
      const movedAway = new Promise<void>((resolve) => {
        moved = resolve;
      });
      let release: () => void = () => undefined;
      const released = new Promise<void>((resolve) => {
        release = resolve;
      });
      const handler = async () => {
        await moveTo(job, 1, away());
        moved();
        await released;
        return outcome();
      };
      const delivered = f.process(
        f.workerDeps("w", { noop: handler }),
        deliveryOfRun(f.engine, run),
      );
      await movedAway;
      return {
        ended: async () => {
          release();
          await delivered;
        },
      };
    }

    /** The job's runs delivered: attempt 2 at `due` runs once, and completes the job. */
    async function attempt2RunsOnce(job: Job, due: Date, first: string) {
      const f = fixture();
      expect((await getTenantJob(f.engine, job.tenantId, job.jobId)).status).toBe("ACTIVE");
      expect(await runsCalled(job.jobId)).toEqual([[due.toISOString(), 1]]);
      expect(await attemptsOf(job.jobId, due)).toEqual([
        [1, first],
        [2, "SUCCEEDED"],
      ]);
      expect((await getTenantJob(f.engine, job.tenantId, job.jobId)).status).toBe("COMPLETED");
    }

    it("attempt 1, QUEUED, skipped by its worker as an occurrence the job no longer has: attempt 2 runs, once", async () => {
      const f = fixture();
      const { job, due, run } = await oneOffQueued();
      await moveTo(job, 1, away());
      const skip = async () => {
        await f.process(f.workerDeps("w", {}), deliveryOfRun(f.engine, run));
      };
      expect(await editBack(job, due, skip)).toMatchObject({ version: 3 });
      await attempt2RunsOnce(job, due, "SKIPPED");
    });

    it("attempt 1, QUEUED, cancelled through the API: attempt 2 runs, once", async () => {
      const f = fixture();
      const { job, due, run } = await oneOffQueued();
      await moveTo(job, 1, away());
      const cancel = async () => {
        await cancelRun(f.engine, job.tenantId, job.jobId, run.runId);
      };
      expect(await editBack(job, due, cancel)).toMatchObject({ version: 3 });
      // Cancelled QUEUED, attempt 1 may be under way with its start held unwritten: attempt 2
      // waits out that start's first write (within a heartbeat of the cancel, at most 10 s).
      race.time.ms = clock().getTime() + 12 * SECOND;
      await attempt2RunsOnce(job, due, "CANCELLED");
    });

    it("attempt 1, running while moved away, DEAD: attempt 2 runs, once", async () => {
      const { job, due, run } = await oneOffQueued(false);
      const { ended } = await runningMovedAway(job, run, () => {
        throw new JobError("bad request", { retryable: false });
      });
      expect(await editBack(job, due, ended)).toMatchObject({ version: 3 });
      await attempt2RunsOnce(job, due, "DEAD");
    });

    it("attempt 1 FAILED while moved away, its retry an entry, claimed and run at the old time: the edit is refused, as after that success", async () => {
      const f = fixture();
      const { job, due } = await failedOnce(0.99, { moveAway: true });
      const retry = await retryEntryOf(job.jobId);
      const runRetry = async () => {
        race.time.ms = Date.parse(retry.dueAt) + 5 * SECOND;
        expect((await claimDueEntry(f.engine, retry, race.claimOptions(clock()))).outcome).toBe(
          "claimed",
        );
        const queued = (await race.runsOf(job.jobId)).find((r) => r.attempt === 2);
        if (!queued) throw new Error("the retry's claim queued no run");
        await f.process(f.workerDeps("w", {}), deliveryOfRun(f.engine, queued));
      };
      await expectEditBackRefused(job, due, runRetry, [
        [1, "FAILED"],
        [2, "SUCCEEDED"],
      ]);
    });

    /**
     * Attempt 1 running while the job is moved away, paused, and given its time back (met under
     * way: attempt 1); the resume, `between` its read and its commit, lets the run end.
     */
    async function resumedAsRunEnds(outcome: () => unknown, retryable = true) {
      const f = fixture();
      const { job, due, run } = await oneOffQueued(retryable);
      const { ended } = await runningMovedAway(job, run, outcome);
      const paused = await pauseJob(f.engine, job.tenantId, job.jobId);
      await moveTo(job, paused.version, due);
      const { hooked } = await withHook(
        "TransactWriteItemsCommand",
        ended,
        () => resumeJob(f.engine, job.tenantId, job.jobId),
        isEditCommit,
      );
      expect(hooked).toBe(1);
      return { job, due };
    }

    it("paused and given its time back, attempt 1 DEAD between the resume's read and its commit: attempt 2 runs, once", async () => {
      const { job, due } = await resumedAsRunEnds(() => {
        throw new JobError("bad request", { retryable: false });
      }, false);
      await attempt2RunsOnce(job, due, "DEAD");
    });

    it("paused and given its time back, attempt 1 SUCCEEDED between the resume's read and its commit: the resume completes the job", async () => {
      const f = fixture();
      const { job, due } = await resumedAsRunEnds(() => ({ ok: true }));
      expect((await getTenantJob(f.engine, job.tenantId, job.jobId)).status).toBe("COMPLETED");
      expect(await attemptsOf(job.jobId, due)).toEqual([[1, "SUCCEEDED"]]);
    });

    it("attempt 1, running while moved away, SUCCEEDED: the edit is refused, as after that success", async () => {
      const { job, due, run } = await oneOffQueued();
      const { ended } = await runningMovedAway(job, run, () => ({ ok: true }));
      await expectEditBackRefused(job, due, ended, [[1, "SUCCEEDED"]]);
    });

    /**
     * The edit back to `due`, `between` its read and its commit, is refused (that time's run
     * succeeded), and the job keeps its new time; the runs at `due` are `attempts`.
     */
    async function expectEditBackRefused(
      job: Job,
      due: Date,
      between: () => Promise<void>,
      attempts: unknown[],
    ) {
      const f = fixture();
      expect(await editBack(job, due, between)).toBeInstanceOf(ValidationError);
      const kept = await getTenantJob(f.engine, job.tenantId, job.jobId);
      // Version 2: the move away's, the edit back unwritten.
      expect([kept.status, kept.version]).toEqual(["ACTIVE", 2]);
      expect(await attemptsOf(job.jobId, due)).toEqual(attempts);
    }
  },
);
