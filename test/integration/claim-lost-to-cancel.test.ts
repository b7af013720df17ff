import { TransactionConflictException } from "@aws-sdk/client-dynamodb";
import { beforeEach, describe, expect, it } from "vitest";
import { type ClaimResult, claimDueEntry } from "../../shared/dispatch/claim.js";
import { sendClaimed } from "../../shared/dispatch/fast-path.js";
import { reap } from "../../shared/dispatch/reaper.js";
import { cancelJob, deleteJob } from "../../shared/jobs/index.js";
import { ONE_OFF_CLAIM_WRITES, SECOND, useClaimRace } from "../support/claim-race.js";
import type { EngineFixture } from "../support/engine-fixture.js";

/**
 * A claim that loses its entry after its run puts (`entry-gone`) ends the runs it put CANCELLED
 * when its job is cancelled or gone (shared/dispatch/claim.ts). What that ending meets: a delete,
 * a winner that sent the same runs, and contention on the runs it ends. Every case runs under both
 * forms of a one-off's claim (`oneOffClaimWrites`, named in its title): a one-off's commit is the
 * transaction or, plain, its job's update; a recurring job's claim is the transaction under both.
 */

describe.each(ONE_OFF_CLAIM_WRITES)(
  "claims lost to a cancel with oneOffClaimWrites %s",
  (oneOffClaimWrites) => {
    const {
      clock,
      claimOptions,
      seedOne,
      runsOf,
      withHooks,
      isRunPut,
      isJobUpdate,
      ONE_OFF_COMMIT,
      deliverAll,
      pastDeadlineOf,
      expectNothingRunsPast,
      fixture,
    } = useClaimRace({ oneOffClaimWrites });
    let f: EngineFixture;
    beforeEach(() => {
      f = fixture();
    });

    /** The claim's ending of a run it left (endRunAsSeen: conditioned on the run as seen). */
    const isLeftRunEnding = (input: Record<string, unknown>) =>
      input.TableName === f.engine.tables.runs &&
      input.ConditionExpression === "#status = :was AND fence = :fence";

    describe("a claim that loses its entry to a cancel or a delete", () => {
      it("delete (cancel, then the job's removal) before the transaction: the runs it put end CANCELLED, none is sent", async () => {
        const now = clock();
        const due = new Date(now.getTime() + 10 * SECOND);
        const { job, entry } = await seedOne(
          "deleted",
          { every: "PT10S", startAt: due.toISOString() },
          due,
          now,
        );
        const { result, hooked } = await withHooks(
          [
            {
              command: "PutItemCommand",
              when: isRunPut,
              before: () => deleteJob(f.engine, job.tenantId, job.jobId),
            },
          ],
          () => claimDueEntry(f.engine, entry, claimOptions(now)),
        );
        expect(hooked).toBe(1);
        expect(result.outcome).toBe("lost");
        expect((await f.jobs()).map((j) => j.jobId)).not.toContain("deleted");
        const runs = await runsOf("deleted");
        expect(runs.length).toBeGreaterThan(1);
        expect(runs.filter((r) => r.status !== "CANCELLED").map((r) => r.runId)).toEqual([]);

        await expectNothingRunsPast("deleted", due);
      });

      it("another claimer wins and sends the runs, then a cancel: the loser's ending finds them ended by the sweep, and none runs", async () => {
        const now = clock();
        const due = new Date(now.getTime() + 10 * SECOND);
        const { job, entry } = await seedOne(
          "won-then-cancelled",
          { runAt: due.toISOString() },
          due,
          now,
        );
        let winner: ClaimResult | undefined;
        const { result } = await withHooks(
          [
            {
              command: ONE_OFF_COMMIT,
              when: isJobUpdate,
              before: async () => {
                winner = await claimDueEntry(f.engine, entry, claimOptions(now));
                if (winner.outcome === "claimed") await sendClaimed(f.engine, winner.runs);
                await cancelJob(f.engine, job.tenantId, job.jobId);
              },
            },
          ],
          () => claimDueEntry(f.engine, entry, claimOptions(now)),
        );
        expect(winner?.outcome).toBe("claimed");
        expect(result.outcome).toBe("lost");
        const calls = new Map<string, number>();
        await deliverAll("won-then-cancelled", calls);
        expect(calls.size).toBe(0);
        expect(
          (await runsOf("won-then-cancelled")).map((r) => [r.status, r.reason, r.cancelledBy]),
        ).toEqual([["CANCELLED", "job cancelled", "job-cancel"]]);
      });

      it("a TransactionConflict on an ending of a left run is tried again: the claim is lost, every run ends CANCELLED", async () => {
        const now = clock();
        const due = new Date(now.getTime() + 10 * SECOND);
        const { job, entry } = await seedOne(
          "contended-ending",
          { every: "PT10S", startAt: due.toISOString() },
          due,
          now,
        );
        let cancelled = false;
        let armed = false;
        const { result, hooked } = await withHooks(
          [
            {
              command: "PutItemCommand",
              when: isRunPut,
              before: async () => {
                await cancelJob(f.engine, job.tenantId, job.jobId);
                cancelled = true;
              },
            },
            // Armed by the claim's transaction, after the cancel's (whose sweep ends runs alike).
            {
              command: "TransactWriteItemsCommand",
              when: () => cancelled,
              before: async () => {
                armed = true;
              },
            },
            {
              command: "UpdateItemCommand",
              when: (input) => armed && isLeftRunEnding(input),
              fail: () =>
                new TransactionConflictException({
                  message: "Transaction is ongoing for the item",
                  $metadata: {},
                }),
            },
          ],
          () => claimDueEntry(f.engine, entry, claimOptions(now)).catch((error: unknown) => error),
        );
        expect(hooked).toBe(3);
        expect(result).toEqual({ outcome: "lost" });
        const runs = await runsOf("contended-ending");
        expect(runs.length).toBeGreaterThan(1);
        expect(runs.filter((r) => r.status !== "CANCELLED").map((r) => r.runId)).toEqual([]);
      });
      it("an ending of a left run that fails for good leaves that run to the reaper: the claim is still lost, and its worker cancels it", async () => {
        const now = clock();
        const due = new Date(now.getTime() + 10 * SECOND);
        const { job, entry } = await seedOne(
          "failed-ending",
          { runAt: due.toISOString() },
          due,
          now,
        );
        let cancelled = false;
        const { result, hooked } = await withHooks(
          [
            {
              command: "PutItemCommand",
              when: isRunPut,
              before: async () => {
                await cancelJob(f.engine, job.tenantId, job.jobId);
                cancelled = true;
              },
            },
            {
              command: "UpdateItemCommand",
              when: (input) => cancelled && isLeftRunEnding(input),
              fail: () =>
                Object.assign(new Error("not authorized"), { name: "AccessDeniedException" }),
            },
          ],
          () => claimDueEntry(f.engine, entry, claimOptions(now)).catch((error: unknown) => error),
        );
        expect(hooked).toBe(2);
        expect(result).toEqual({ outcome: "lost" });
        expect((await runsOf("failed-ending")).map((r) => r.status)).toEqual(["QUEUED"]);

        await expectNothingRunsPast("failed-ending", due, 1);
        expect((await runsOf("failed-ending")).map((r) => [r.status, r.reason])).toEqual([
          ["CANCELLED", "job cancelled"],
        ]);
      });
      it("a left run the reaper re-sent before the claim ends it (misfireFrom set) ends CANCELLED once, and its message runs nothing", async () => {
        const now = clock();
        const due = new Date(now.getTime() + 10 * SECOND);
        const { job, entry } = await seedOne("resent-left", { runAt: due.toISOString() }, due, now);
        let cancelled = false;
        let resent = 0;
        const { result, hooked } = await withHooks(
          [
            {
              command: "PutItemCommand",
              when: isRunPut,
              before: async () => {
                await cancelJob(f.engine, job.tenantId, job.jobId);
                cancelled = true;
              },
            },
            {
              command: ONE_OFF_COMMIT,
              when: (input) => cancelled && isJobUpdate(input),
              before: async () => {
                pastDeadlineOf(due);
                resent = (await reap(f.engine)).resent;
              },
            },
          ],
          () => claimDueEntry(f.engine, entry, claimOptions(now)),
        );
        expect(hooked).toBe(2);
        expect(resent).toBe(1);
        expect(result.outcome).toBe("lost");
        const calls = new Map<string, number>();
        await deliverAll("resent-left", calls);
        expect(calls.size).toBe(0);
        expect((await runsOf("resent-left")).map((r) => [r.status, r.reason, r.fence])).toEqual([
          ["CANCELLED", "job cancelled", 0],
        ]);
      });
    });
  },
);
