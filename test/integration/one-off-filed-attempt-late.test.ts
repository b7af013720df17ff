import { describe, expect, it } from "vitest";
import { claimDueEntry } from "../../shared/dispatch/claim.js";
import { reap } from "../../shared/dispatch/reaper.js";
import { getTenantJob } from "../../shared/jobs/queries.js";
import type { Run } from "../../shared/model.js";
import { ONE_OFF_CLAIM_WRITES, SECOND, useClaimRace } from "../support/claim-race.js";
import { deliveryOfRun } from "../support/engine-fixture.js";
import { useOneOffMoves } from "../support/one-off-moves.js";

/**
 * A one-off (misfire `skip`) whose retry (attempt 2) at a time it left is cancelled through the
 * API while it runs, and an edit back to that time files the occurrence at attempt 3. Attempt 3's
 * message is lost, the reaper re-sends it (lateness counts from there), and a worker starts it
 * more than the grace after that re-send. Un-raced, attempt 3 is the claim's (`rerun`): it stands
 * in for the occurrence's first attempt and is judged late so, and skipped, completing the one-off.
 * Raced (0a9b40b): attempt 2 failed, its own attempt 3 put before the edit's claim (which failed),
 * left QUEUED (its take-back failed), and re-sent by the reaper before the claim. Both paths end
 * the same: the filed occurrence started too late is skipped, and the one-off completes.
 */

describe.each(ONE_OFF_CLAIM_WRITES)(
  "a one-off's occurrence filed at attempt 3 after an API cancel, started past the grace after its re-send (oneOffClaimWrites %s)",
  (oneOffClaimWrites) => {
    const race = useClaimRace({ oneOffClaimWrites });
    const { clock, time, fixture, entryOf, claimOptions, runsOf } = race;
    const { failedOnce, attemptsOf, cancelledAndMovedBack } = useOneOffMoves(race);

    const attempt = async (jobId: string, n: number): Promise<Run> => {
      const run = (await runsOf(jobId)).find((r) => r.attempt === n);
      if (!run) throw new Error(`no attempt ${n}`);
      return run;
    };

    it.each([
      ["the claim's attempt 3 (no race)", false],
      ["the failure's own attempt 3, re-sent before the claim", true],
    ] as const)("%s is skipped as late and completes the one-off", async (_, raced) => {
      const f = fixture();
      const { job, due } = await failedOnce(0, { moveAway: true, misfire: "skip" });
      const retry = await attempt(job.jobId, 2);
      const hooked = await cancelledAndMovedBack(job, due, retry, raced);
      expect(hooked).toBe(raced ? 2 : 0);
      expect(await attemptsOf(job.jobId, due)).toEqual([
        [1, "FAILED"],
        [2, "CANCELLED"],
        [3, "QUEUED"],
      ]);
      // Attempt 3's message is lost (never delivered): the reaper re-sends it at its deadline.
      race.pastDeadlineOf(clock());
      expect((await reap(f.engine)).resent).toBe(1);
      expect((await attempt(job.jobId, 3)).misfireFrom).not.toBeNull();
      // The re-sent message reaches a worker past the grace after the re-send.
      time.ms = clock().getTime() + f.engine.settings.misfireGraceMs + 5 * SECOND;
      let called = 0;
      const counting = f.workerDeps("w2", {
        noop: async () => {
          called++;
          return { ok: true };
        },
      });
      await f.process(counting, deliveryOfRun(f.engine, await attempt(job.jobId, 3)));
      if (raced) {
        const entry = await entryOf(job.jobId);
        await claimDueEntry(f.engine, entry, claimOptions(clock()));
      }
      expect({
        attempts: await attemptsOf(job.jobId, due),
        status: (await getTenantJob(f.engine, job.tenantId, job.jobId)).status,
        called,
      }).toEqual({
        attempts: [
          [1, "FAILED"],
          [2, "CANCELLED"],
          [3, "SKIPPED"],
        ],
        status: "COMPLETED",
        called: 0,
      });
    });
  },
);
