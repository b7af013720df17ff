import { describe, expect, it } from "vitest";
import type { JobContext } from "../../shared/execution/job-contract.js";
import { cancelRun } from "../../shared/jobs/index.js";
import { getTenantJob } from "../../shared/jobs/queries.js";
import type { Run } from "../../shared/model.js";
import { ONE_OFF_CLAIM_WRITES, SECOND, useClaimRace } from "../support/claim-race.js";
import { deliveryOfRun } from "../support/engine-fixture.js";
import { withHeartbeatsHeld } from "../support/faults.js";
import { RAN_AT_ATTEMPT_3, useOneOffMoves } from "../support/one-off-moves.js";

/**
 * A one-off's retry (attempt 2) at a time the one-off left runs with its start held unwritten (it
 * reads QUEUED, fence 0): an API cancel then ends it CANCELLED at once while its handler runs on
 * until its first write, and an edit back to that time files the occurrence at attempt 3, which
 * its fast-path claim queues and sends. Attempt 3's worker must not run its handler beside
 * attempt 2's: two handlers of one occurrence at once. It runs once attempt 2's worker has had its
 * first write (where it learns of the cancel) and completes the one-off. That first write failed
 * twice (not on the cancel), attempt 2's handler is stopped there, and attempt 3 runs after it.
 */
describe.each(ONE_OFF_CLAIM_WRITES)(
  "an edit back after an API cancel of a retry whose start is held unwritten (oneOffClaimWrites %s)",
  (oneOffClaimWrites) => {
    const race = useClaimRace({ oneOffClaimWrites }, { fixturePer: "file" });
    const { clock, time, fixture, runsOf } = race;
    const { retryAtOldTime, moveTo, attemptsOf } = useOneOffMoves(race);

    const attempt = async (jobId: string, n: number): Promise<Run> => {
      const run = (await runsOf(jobId)).find((r) => r.attempt === n);
      if (!run) throw new Error(`no attempt ${n}`);
      return run;
    };

    it("attempt 3 waits while attempt 2's handler may still run, then runs once", async () => {
      const f = fixture();
      const { job, due, retry } = await retryAtOldTime();
      let firstRunning = false;
      let beside = 0;
      let called = 0;
      const second = async () => {
        called++;
        if (firstRunning) beside++;
        return { ok: true };
      };
      const deliverAttempt3 = async () =>
        f.process(
          f.workerDeps("worker-b", { noop: second }),
          deliveryOfRun(f.engine, await attempt(job.jobId, 3)),
        );
      const first = async () => {
        firstRunning = true;
        expect(await attempt(job.jobId, 2)).toMatchObject({ status: "QUEUED", fence: 0 });
        const cancelled = await cancelRun(f.engine, job.tenantId, job.jobId, retry.runId);
        expect(cancelled.status).toBe("CANCELLED");
        await moveTo(job, 2, due);
        expect(await attemptsOf(job.jobId, due)).toContainEqual([3, "QUEUED"]);
        await deliverAttempt3();
        firstRunning = false;
        return { ok: true };
      };
      await f.process(f.workerDeps("worker-a", { noop: first }), deliveryOfRun(f.engine, retry));
      expect(beside).toBe(0);

      // Attempt 3 waited; past any first write attempt 2's worker could still owe, it runs.
      expect(called).toBe(0);
      time.ms = clock().getTime() + 60 * SECOND;
      await deliverAttempt3();
      expect({
        attempts: await attemptsOf(job.jobId, due),
        status: (await getTenantJob(f.engine, job.tenantId, job.jobId)).status,
        called,
        beside,
      }).toEqual({
        attempts: RAN_AT_ATTEMPT_3,
        status: "COMPLETED",
        called: 1,
        beside: 0,
      });
    });

    // The held start's first write fails, and again when tried (the store throttled it: not the
    // cancel's refusal). Attempt 3's worker, 12 s after the cancel, takes the first write attempt
    // 2 owed as made: attempt 2's handler must have stopped there (it honours its signal).
    it("attempt 2's first write failing twice (not on the cancel) stops its handler; attempt 3 runs once", async () => {
      const f = fixture();
      const { job, due, retry } = await retryAtOldTime();
      const held = withHeartbeatsHeld(f.engine);
      held.hold();
      let firstSignal: AbortSignal | undefined;
      let beside = 0;
      let called = 0;
      const second = async () => {
        called++;
        if (firstSignal !== undefined && !firstSignal.aborted) beside++;
        return { ok: true };
      };
      let firstDone: Promise<void> = Promise.resolve();
      const first = (ctx: JobContext) => {
        firstSignal = ctx.signal;
        firstDone = (async () => {
          const cancelled = await cancelRun(f.engine, job.tenantId, job.jobId, retry.runId);
          expect(cancelled.status).toBe("CANCELLED");
          // The held start's first write, and the worker's next try of it: refused by the store,
          // not by the cancel (a second beat comes 10 s after the first in production).
          while (held.injected.count < 2) await new Promise((r) => setTimeout(r, 5));
          await moveTo(job, 2, due);
          expect(await attemptsOf(job.jobId, due)).toContainEqual([3, "QUEUED"]);
          time.ms = clock().getTime() + 12 * SECOND;
          await f.process(
            f.workerDeps("worker-b", { noop: second }),
            deliveryOfRun(f.engine, await attempt(job.jobId, 3)),
          );
          firstSignal = undefined;
        })();
        return firstDone.then(() => ({ ok: true }));
      };
      try {
        await f.process(
          { ...f.workerDeps("worker-a", { noop: first }, 20), engine: held.engine },
          deliveryOfRun(f.engine, retry),
        );
        await firstDone;
      } finally {
        held.destroy();
      }
      expect({
        attempts: await attemptsOf(job.jobId, due),
        status: (await getTenantJob(f.engine, job.tenantId, job.jobId)).status,
        called,
        beside,
      }).toEqual({ attempts: RAN_AT_ATTEMPT_3, status: "COMPLETED", called: 1, beside: 0 });
    });
  },
);
