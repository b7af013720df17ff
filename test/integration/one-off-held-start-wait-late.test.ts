import { describe, expect, it } from "vitest";
import { claimDueEntry } from "../../shared/dispatch/claim.js";
import { cancelRun, editJob, pauseJob, resumeJob } from "../../shared/jobs/index.js";
import { getTenantJob } from "../../shared/jobs/queries.js";
import type { Run } from "../../shared/model.js";
import { ONE_OFF_CLAIM_WRITES, SECOND, useClaimRace } from "../support/claim-race.js";
import { deliveryOfRun } from "../support/engine-fixture.js";
import { useOneOffMoves } from "../support/one-off-moves.js";

/** The deployment's grace at its floor (docs/deploy.md, `misfireGraceSeconds`). */
const GRACE_MS = 10 * SECOND;

/**
 * A one-off (misfire `skip`, the grace at its floor of 10 s) whose run's start a worker holds
 * unwritten (it reads QUEUED, fence 0) while the one-off is moved away and the run is cancelled
 * through the API, and an edit then moves the one-off back to that time (or, the job paused
 * meanwhile, a resume after it): the occurrence is filed at attempt 2, whose worker waits until
 * 11 s past the cancel (`heldStartLearnsBy`), for attempt 1's handler may run on until its first
 * write. That wait is the scheduler's, not lateness: the wait's requeue writes attempt 2's start,
 * so its next delivery is a start after an earlier one (`startedBefore`) and runs, though more
 * than the grace after its time. An attempt 2 already past the grace at its first delivery is
 * judged late there, before any wait, and skipped.
 */
describe.each(ONE_OFF_CLAIM_WRITES)(
  "a one-off's occurrence filed again after an API cancel of its held start (oneOffClaimWrites %s)",
  (oneOffClaimWrites) => {
    const race = useClaimRace(
      { oneOffClaimWrites, misfireGraceMs: GRACE_MS },
      { fixturePer: "file" },
    );
    const { clock, time, fixture, seedOne, claimOptions, runsOf } = race;
    const { attemptsOf } = useOneOffMoves(race);

    const attempt = async (jobId: string, n: number): Promise<Run> => {
      const run = (await runsOf(jobId)).find((r) => r.attempt === n);
      if (!run) throw new Error(`no attempt ${n}`);
      return run;
    };

    /**
     * The one-off due a second ago, its attempt 1 delivered to a handler that, its start held
     * unwritten, has the one-off moved away, attempt 1 cancelled and the one-off moved back (with
     * `by` "resume", all while paused, and then resumed): then attempt 2 is delivered
     * `secondAfterMs` after the cancel, while attempt 1's handler still runs.
     */
    async function refiledWhileHeld(
      jobId: string,
      secondAfterMs: number,
      by: "edit back" | "resume" = "edit back",
    ) {
      const f = fixture();
      const now = clock();
      const due = new Date(now.getTime() - SECOND);
      const { job, entry } = await seedOne(jobId, { runAt: due.toISOString() }, due, now, "skip");
      expect((await claimDueEntry(f.engine, entry, claimOptions(now))).outcome).toBe("claimed");
      const first = await attempt(jobId, 1);
      let called = 0;
      const second = async () => {
        called++;
        return { ok: true };
      };
      const deliverAttempt2 = async () =>
        f.process(
          f.workerDeps("worker-b", { noop: second }),
          deliveryOfRun(f.engine, await attempt(jobId, 2)),
        );
      let cancelledAt = 0;
      const moveAt = async (at: Date) => {
        const { version } = await getTenantJob(f.engine, job.tenantId, jobId);
        await editJob(f.engine, job.tenantId, jobId, version, {
          schedule: { runAt: at.toISOString() },
        });
      };
      const held = async () => {
        expect(await attempt(jobId, 1)).toMatchObject({ status: "QUEUED", fence: 0 });
        if (by === "resume") await pauseJob(f.engine, job.tenantId, jobId);
        await moveAt(new Date(now.getTime() + 600 * SECOND));
        expect((await cancelRun(f.engine, job.tenantId, jobId, first.runId)).status).toBe(
          "CANCELLED",
        );
        cancelledAt = clock().getTime();
        await moveAt(due);
        if (by === "resume") await resumeJob(f.engine, job.tenantId, jobId);
        expect(await attemptsOf(jobId, due)).toEqual([
          [1, "CANCELLED"],
          [2, "QUEUED"],
        ]);
        time.ms = cancelledAt + secondAfterMs;
        await deliverAttempt2();
        return { ok: true };
      };
      await f.process(f.workerDeps("worker-a", { noop: held }), deliveryOfRun(f.engine, first));
      /** The occurrence's attempts, attempt 2's reason, its handler's calls and the job's status. */
      const outcome = async () => ({
        attempts: await attemptsOf(jobId, due),
        reason: (await attempt(jobId, 2)).reason,
        called,
        status: (await getTenantJob(f.engine, job.tenantId, jobId)).status,
      });
      return { job, due, cancelledAt, deliverAttempt2, called: () => called, outcome };
    }

    it.each([
      ["an edit back", "edit back"],
      ["a resume", "resume"],
    ] as const)(
      "filed by %s and delivered on time, it waits out the held start and then runs, past the grace from its time",
      async (_, by) => {
        const { job, due, cancelledAt, deliverAttempt2, called, outcome } = await refiledWhileHeld(
          `held-wait-runs-${by.replace(" ", "-")}`,
          SECOND,
          by,
        );
        expect(called()).toBe(0);
        expect(await attempt(job.jobId, 2)).toMatchObject({
          status: "QUEUED",
          reason: expect.stringContaining("was cancelled unstarted"),
          dueAt: new Date(cancelledAt + 11 * SECOND).toISOString(),
        });

        // Its recheck, 12.5 s after its time: more than the grace, all of it the hold's.
        time.ms = cancelledAt + 11.5 * SECOND;
        expect(time.ms - due.getTime()).toBeGreaterThan(GRACE_MS);
        await deliverAttempt2();
        expect(await outcome()).toEqual({
          attempts: [
            [1, "CANCELLED"],
            [2, "SUCCEEDED"],
          ],
          reason: null,
          called: 1,
          status: "COMPLETED",
        });
      },
    );

    it("delivered past the grace, while the hold still lasts, it is skipped as late", async () => {
      // 10.5 s after its time, 9.5 s after the cancel: the hold lasts to 11 s.
      const { outcome } = await refiledWhileHeld("held-wait-late", 9.5 * SECOND);
      expect(await outcome()).toEqual({
        attempts: [
          [1, "CANCELLED"],
          [2, "SKIPPED"],
        ],
        reason: "misfire: started 11 s late, past the 10 s grace; policy skip",
        called: 0,
        status: "COMPLETED",
      });
    });
  },
);
