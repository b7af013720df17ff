import { TransactionConflictException } from "@aws-sdk/client-dynamodb";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { type ClaimResult, claimDueEntry } from "../../shared/dispatch/claim.js";
import { horizonOf } from "../../shared/dispatch/dispatcher.js";
import { sendClaimed } from "../../shared/dispatch/fast-path.js";
import { REAPER_SETTLE_MS, reap } from "../../shared/dispatch/reaper.js";
import type { JobContext } from "../../shared/execution/job-contract.js";
import { cancelJob, deleteJob } from "../../shared/jobs/index.js";
import type { DueEntry, Job, Run } from "../../shared/model.js";
import type { ScheduleSpec } from "../../shared/schedule/index.js";
import { createEngineFixture, type EngineFixture } from "../support/engine-fixture.js";
import { seedJobs } from "../support/seed.js";

/**
 * A claim that loses its entry after its run puts (`entry-gone`) ends the runs it put CANCELLED
 * when its job is cancelled or gone (shared/dispatch/claim.ts). What that ending meets: a delete,
 * a winner that sent the same runs, and contention on the runs it ends.
 */

const SECOND = 1000;
const LEASE_MS = 60 * SECOND;

let f: EngineFixture;
const time = { ms: Date.now() };
const clock = () => new Date(time.ms);
beforeEach(async () => {
  time.ms = Date.now();
  f = await createEngineFixture({
    settings: { shardCount: 1, maxShardCount: 1, leaseMs: LEASE_MS, misfireGraceMs: LEASE_MS },
    clock,
  });
});
afterEach(() => f.destroy());

const claimOptions = (now: Date) => ({
  now,
  horizonEnd: horizonOf(now, f.engine.settings.lookaheadMs).end,
});

async function seedOne(
  jobId: string,
  schedule: ScheduleSpec,
  due: Date,
  now: Date,
): Promise<{ job: Job; entry: DueEntry }> {
  const [job] = await seedJobs(f, [{ jobId, schedule, dueAt: due }], now);
  if (!job) throw new Error("not seeded");
  const [entry, ...more] = (await f.dueEntries()).filter((d) => d.jobId === jobId);
  if (!entry || more.length > 0) throw new Error(`expected one due entry for ${jobId}`);
  return { job, entry };
}

async function runsOf(jobId: string): Promise<Run[]> {
  return (await f.runs())
    .filter((r) => r.jobId === jobId)
    .sort((a, b) => a.scheduledFor.localeCompare(b.scheduledFor));
}

/**
 * Runs `before` once, ahead of the first request of `command` that `when` accepts; `fail` makes
 * that request throw what it returns instead of sending it (a fault the emulator cannot produce).
 */
async function withHook<T>(
  hooks: readonly {
    readonly command: string;
    readonly when?: (input: Record<string, unknown>) => boolean;
    readonly before?: () => Promise<void>;
    readonly fail?: () => Error;
  }[],
  work: () => Promise<T>,
): Promise<{ result: T; hooked: number }> {
  const name = "hook-claim-lost";
  const pending = [...hooks];
  let hooked = 0;
  f.engine.doc.middlewareStack.add(
    (next, context) => async (args) => {
      const input = args.input as Record<string, unknown>;
      const at = pending.findIndex(
        (h) => h.command === context.commandName && (h.when?.(input) ?? true),
      );
      const hook = at >= 0 ? pending.splice(at, 1)[0] : undefined;
      if (hook) {
        hooked++;
        await hook.before?.();
        if (hook.fail) throw hook.fail();
      }
      return next(args);
    },
    { step: "initialize", name },
  );
  try {
    return { result: await work(), hooked };
  } finally {
    f.engine.doc.middlewareStack.remove(name);
  }
}

const isRunPut = (input: Record<string, unknown>) => input.TableName === f.engine.tables.runs;
/** The claim's ending of a run it left (endRunAsSeen: conditioned on the run as seen). */
const isLeftRunEnding = (input: Record<string, unknown>) =>
  input.TableName === f.engine.tables.runs &&
  input.ConditionExpression === "#status = :was AND fence = :fence";

async function deliverAll(jobId: string, calls: Map<string, number>): Promise<void> {
  const counting = async (ctx: JobContext) => {
    calls.set(ctx.scheduledFor, (calls.get(ctx.scheduledFor) ?? 0) + 1);
    return { ok: true };
  };
  const deps = f.workerDeps("worker", { noop: counting });
  for (const received of await f.receiveAll(f.engine.queues.normal, { quietMs: 1500 })) {
    if (received.message.jobId === jobId) await f.process(deps, received);
  }
}

const pastDeadlineOf = (at: Date) => {
  time.ms = Math.max(time.ms, at.getTime() + LEASE_MS + REAPER_SETTLE_MS + 2 * SECOND);
};

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
    const { result, hooked } = await withHook(
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

    pastDeadlineOf(due);
    expect((await reap(f.engine)).resent).toBe(0);
    const calls = new Map<string, number>();
    await deliverAll("deleted", calls);
    expect(calls.size).toBe(0);
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
    const { result } = await withHook(
      [
        {
          command: "TransactWriteItemsCommand",
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
    const { result, hooked } = await withHook(
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
    const { job, entry } = await seedOne("failed-ending", { runAt: due.toISOString() }, due, now);
    let cancelled = false;
    const { result, hooked } = await withHook(
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
          fail: () => Object.assign(new Error("not authorized"), { name: "AccessDeniedException" }),
        },
      ],
      () => claimDueEntry(f.engine, entry, claimOptions(now)).catch((error: unknown) => error),
    );
    expect(hooked).toBe(2);
    expect(result).toEqual({ outcome: "lost" });
    expect((await runsOf("failed-ending")).map((r) => r.status)).toEqual(["QUEUED"]);

    pastDeadlineOf(due);
    expect((await reap(f.engine)).resent).toBe(1);
    const calls = new Map<string, number>();
    await deliverAll("failed-ending", calls);
    expect(calls.size).toBe(0);
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
    const { result, hooked } = await withHook(
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
          command: "TransactWriteItemsCommand",
          when: () => cancelled,
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
