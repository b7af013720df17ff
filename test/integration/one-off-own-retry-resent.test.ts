import { describe, expect, it } from "vitest";
import { claimDueEntry } from "../../shared/dispatch/claim.js";
import { reap } from "../../shared/dispatch/reaper.js";
import { getTenantJob } from "../../shared/jobs/queries.js";
import type { Job } from "../../shared/model.js";
import { ONE_OFF_CLAIM_WRITES, useClaimRace } from "../support/claim-race.js";
import { RAN_AT_ATTEMPT_3, useOneOffMoves } from "../support/one-off-moves.js";

/**
 * A one-off's retry (attempt 2) at a time the one-off left is cancelled through the API while it
 * runs; an edit back to that time files the occurrence at attempt 3 (`oneOffAttempt`), its fast-path
 * claim failing (the dispatcher claims it later). Attempt 2 then fails: its worker puts its own
 * attempt 3 (QUEUED, naming attempt 2 under its start's fence), its FAILED ending is refused on the
 * cancel, and its take-back of attempt 3 fails too (best effort). The reaper re-sends that attempt 3
 * at its deadline, before the dispatcher's claim: a worker of it must not end the one-off unrun,
 * and the occurrence runs once, whichever of the re-sent message and the claim comes first.
 */

describe.each(ONE_OFF_CLAIM_WRITES)(
  "a cancelled retry's own next attempt re-sent before an edit back's claim (oneOffClaimWrites %s)",
  (oneOffClaimWrites) => {
    const race = useClaimRace({ oneOffClaimWrites });
    const { clock, fixture, runsCalled, entryOf, claimOptions } = race;
    const { retryAtOldTime, attemptsOf, cancelledAndMovedBack } = useOneOffMoves(race);

    const current = (job: Job) => getTenantJob(fixture().engine, job.tenantId, job.jobId);

    it.each([
      ["delivered before the claim", true],
      ["delivered after the claim", false],
    ] as const)(
      "re-sent attempt 3 %s: the occurrence runs once and completes the one-off",
      async (_, deliveredFirst) => {
        const f = fixture();
        const { job, due, retry } = await retryAtOldTime();
        const hooked = await cancelledAndMovedBack(job, due, retry, true);
        expect(hooked).toBe(2);
        expect(await attemptsOf(job.jobId, due)).toEqual([
          [1, "FAILED"],
          [2, "CANCELLED"],
          [3, "QUEUED"],
        ]);
        const entry = await entryOf(job.jobId);
        expect([entry.scheduledFor, entry.attempt]).toEqual([due.toISOString(), 3]);

        race.pastDeadlineOf(clock());
        expect((await reap(f.engine)).resent).toBe(1);
        let called = 0;
        const deliver = async () => {
          const calls = (await runsCalled(job.jobId)).filter(([at]) => at === due.toISOString());
          called += calls.reduce((sum, [, count]) => sum + count, 0);
        };
        if (deliveredFirst) await deliver();
        await claimDueEntry(f.engine, entry, claimOptions(clock()));
        await deliver();
        race.pastDeadlineOf(clock());
        await reap(f.engine);
        await deliver();
        expect({
          attempts: await attemptsOf(job.jobId, due),
          status: (await current(job)).status,
          called,
        }).toEqual({
          attempts: RAN_AT_ATTEMPT_3,
          status: "COMPLETED",
          called: 1,
        });
      },
    );
  },
);
