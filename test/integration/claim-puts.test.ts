import { PutCommand } from "@aws-sdk/lib-dynamodb";
import { beforeEach, describe, expect, it } from "vitest";
import { type ClaimResult, claimDueEntry } from "../../shared/dispatch/claim.js";
import { reap } from "../../shared/dispatch/reaper.js";
import { cancelJob, editJob, pauseJob, resumeJob } from "../../shared/jobs/index.js";
import type { DueEntry, Run } from "../../shared/model.js";
import { encodeJob } from "../../shared/storage/items.js";
import { queuedRun } from "../../shared/storage/runs.js";
import { ONE_OFF_CLAIM_WRITES, SECOND, useClaimRace } from "../support/claim-race.js";
import { dailyAwayFrom, type EngineFixture } from "../support/engine-fixture.js";

/**
 * A claim puts its QUEUED runs with plain conditional puts before the
 * transaction that moves the entry and the job on. What those puts leave
 * behind when the transaction then fails, or is never sent, and how each
 * occurrence still runs once: the dispatcher dies in between; another claimer
 * takes the entry; a pause, cancel or edit removes or rewrites it; a run is
 * already past QUEUED when the put comes.
 *
 * Every case runs under both forms of a one-off's claim (`oneOffClaimWrites`, named in its
 * title): a one-off's commit, where a case hooks it (`ONE_OFF_COMMIT`), is the transaction or,
 * plain, its job's update. A recurring job's claim is the transaction under both, so the
 * transactions its cases count are the same.
 */

const MINUTE = 60 * SECOND;

describe.each(ONE_OFF_CLAIM_WRITES)("claim puts with oneOffClaimWrites %s", (oneOffClaimWrites) => {
  const {
    clock,
    claimOptions,
    entryOf,
    seedOne,
    runsOf,
    withHook,
    isRunPut,
    isJobUpdate,
    ONE_OFF_COMMIT,
    deliverAll,
    pastDeadlineOf,
    expectNothingRunsPast,
    commandsSent,
    fixture,
  } = useClaimRace({ oneOffClaimWrites });
  let f: EngineFixture;
  beforeEach(() => {
    f = fixture();
  });

  const jobOf = async (jobId: string) => (await f.jobs()).find((j) => j.jobId === jobId);

  /** Counts the claim transactions sent while `work` runs. */
  async function countTransactions<T>(
    work: () => Promise<T>,
  ): Promise<{ result: T; sent: number }> {
    const { result, sent } = await commandsSent(work);
    return { result, sent: sent.filter((name) => name === "TransactWriteItemsCommand").length };
  }

  /** A claim whose dispatcher dies after its run puts, before its transaction is sent. */
  async function claimDyingBeforeTransaction(entry: DueEntry, now: Date): Promise<void> {
    await expect(
      withHook(
        "TransactWriteItemsCommand",
        () => Promise.reject(new Error("process died")),
        () => claimDueEntry(f.engine, entry, claimOptions(now)),
      ),
    ).rejects.toThrow("process died");
  }

  describe("a claim whose dispatcher dies between its run puts and its transaction", () => {
    it("leaves the entry and QUEUED runs; the next claim puts the same runs over them and commits", async () => {
      const now = clock();
      const due = new Date(now.getTime() + 20 * SECOND);
      const { entry } = await seedOne(
        "died",
        { every: "PT1M", startAt: due.toISOString() },
        due,
        now,
      );

      await claimDyingBeforeTransaction(entry, now);

      const left = await runsOf("died");
      expect(left.length).toBe(14);
      expect(left.every((r) => r.status === "QUEUED" && r.jobVersion === 1 && r.fence === 0)).toBe(
        true,
      );
      expect((await entryOf("died")).key).toEqual(entry.key);
      expect((await jobOf("died"))?.nextDueKey).toEqual(entry.key);

      const again = await claimDueEntry(f.engine, entry, claimOptions(now));

      expect(again.outcome).toBe("claimed");
      if (again.outcome !== "claimed") return;
      expect(again.runs.map((r) => r.scheduledFor)).toEqual(left.map((r) => r.scheduledFor));
      const after = await runsOf("died");
      expect(after.map((r) => [r.scheduledFor, r.status])).toEqual(
        left.map((r) => [r.scheduledFor, "QUEUED"]),
      );
      const job = await jobOf("died");
      expect(job?.nextRunAt).toBe(new Date(due.getTime() + 14 * MINUTE).toISOString());
      expect(job?.occurrencesQueued).toBe(14);
    });

    it("a run the reaper re-sent meanwhile and that ran is seen as handled by the next claim: it runs once", async () => {
      const now = clock();
      const due = new Date(now.getTime() - 5 * SECOND);
      const { entry } = await seedOne(
        "died-ran",
        { every: "PT1H", startAt: due.toISOString() },
        due,
        now,
      );
      await claimDyingBeforeTransaction(entry, now);

      // The run's deadline (a lease after it was put, as it was overdue) passes: the reaper
      // re-sends it, and a worker runs it.
      pastDeadlineOf(now);
      expect((await reap(f.engine)).resent).toBe(1);
      const calls = new Map<string, number>();
      await deliverAll("died-ran", calls);
      expect(calls.get(due.toISOString())).toBe(1);

      // The next pass claims the entry (late: fire_once runs its occurrence, which has run).
      const { result, sent } = await countTransactions(() =>
        claimDueEntry(f.engine, entry, claimOptions(clock())),
      );

      expect(result.outcome).toBe("claimed");
      expect(result.outcome === "claimed" && result.runs).toEqual([]);
      expect(sent).toBe(1);
      expect((await runsOf("died-ran")).map((r) => [r.scheduledFor, r.status])).toEqual([
        [due.toISOString(), "SUCCEEDED"],
      ]);
      expect((await jobOf("died-ran"))?.nextRunAt).toBe(
        new Date(due.getTime() + 60 * MINUTE).toISOString(),
      );
    });
  });

  describe("a claim that loses its entry to another claimer between its puts and its transaction", () => {
    it("the winner's puts go over the loser's same-version runs; the loser's run beyond the winner's reach is claimed by the next entry", async () => {
      const now = clock();
      const due = new Date(now.getTime() + 20 * SECOND);
      const { entry } = await seedOne(
        "raced",
        { every: "PT1M", startAt: due.toISOString() },
        due,
        now,
      );
      // The loser planned a minute later than the winner: its reach holds one occurrence more.
      const later = new Date(now.getTime() + MINUTE);
      let winner: ClaimResult | undefined;
      const { result: loser } = await withHook(
        "TransactWriteItemsCommand",
        async () => {
          winner = await claimDueEntry(f.engine, entry, claimOptions(now));
        },
        () => claimDueEntry(f.engine, entry, claimOptions(later)),
      );

      expect(loser.outcome).toBe("lost");
      expect(winner?.outcome).toBe("claimed");
      if (winner?.outcome !== "claimed" || winner.next === null) throw new Error("no winner");
      expect(winner.runs).toHaveLength(14);
      const runs = await runsOf("raced");
      // The loser's fifteenth run waits QUEUED, unsent, where the winner's next entry is.
      expect(runs).toHaveLength(15);
      expect(runs.at(-1)?.scheduledFor).toBe(winner.next.scheduledFor);

      const next = await claimDueEntry(f.engine, winner.next, claimOptions(later));

      expect(next.outcome).toBe("claimed");
      expect(next.outcome === "claimed" && next.runs.map((r) => r.scheduledFor)[0]).toBe(
        winner.next.scheduledFor,
      );
      const all = await runsOf("raced");
      expect(new Set(all.map((r) => r.scheduledFor)).size).toBe(all.length);
      expect(all.every((r) => r.status === "QUEUED" && r.jobVersion === 1)).toBe(true);
    });
  });

  describe("a claim whose put finds the occurrence handled", () => {
    const seedWithRun = async (jobId: string, run: (queued: Run) => Partial<Run>) => {
      const now = clock();
      const due = new Date(now.getTime() - 5 * SECOND);
      const { entry } = await seedOne(
        jobId,
        { every: "PT1H", startAt: due.toISOString() },
        due,
        now,
      );
      const queued = queuedRun(
        {
          jobId,
          tenantId: entry.tenantId,
          scheduledFor: due,
          dueAt: due,
          attempt: 1,
          priority: entry.priority,
          jobVersion: 1,
        },
        now,
        f.engine.settings,
      );
      await f.engine.doc.send(
        new PutCommand({
          TableName: f.engine.tables.runs,
          Item: { ...queued.item, ...run(queued.run) },
        }),
      );
      return { now, due, entry };
    };

    it("a run already RUNNING is reported by its put before any transaction is sent, and kept", async () => {
      const { now, entry } = await seedWithRun("running-already", () => ({
        status: "RUNNING",
        fence: 1,
        workerId: "another",
      }));

      const { result, sent } = await countTransactions(() =>
        claimDueEntry(f.engine, entry, claimOptions(now)),
      );

      expect(result.outcome).toBe("claimed");
      expect(result.outcome === "claimed" && result.runs).toEqual([]);
      // One transaction: the round that found the run sent none.
      expect(sent).toBe(1);
      expect((await runsOf("running-already")).map((r) => [r.status, r.fence])).toEqual([
        ["RUNNING", 1],
      ]);
    });

    it("a QUEUED run of the same version the reaper has re-sent is left to that message, not put again", async () => {
      const { now, entry } = await seedWithRun("resent-already", () => ({
        misfireFrom: clock().toISOString(),
      }));

      const result = await claimDueEntry(f.engine, entry, claimOptions(now));

      expect(result.outcome === "claimed" && result.runs).toEqual([]);
      const [run] = await runsOf("resent-already");
      expect(run?.misfireFrom).not.toBeNull();
    });
  });

  describe("a claim whose entry a pause, cancel or edit removes between its puts and its transaction", () => {
    it("pause: the reaper re-sends the left run, its worker parks it, and resume runs it once", async () => {
      const now = clock();
      const due = new Date(now.getTime() + 10 * SECOND);
      const { job, entry } = await seedOne("paused", { runAt: due.toISOString() }, due, now);
      const { result, hooked } = await withHook(
        ONE_OFF_COMMIT,
        async () => {
          await pauseJob(f.engine, job.tenantId, job.jobId);
        },
        () => claimDueEntry(f.engine, entry, claimOptions(now)),
        isJobUpdate,
      );
      expect(hooked).toBe(1);
      expect(result.outcome).toBe("lost");
      expect((await runsOf("paused")).map((r) => r.status)).toEqual(["QUEUED"]);

      await expectNothingRunsPast("paused", due, 1);
      expect(Object.keys((await jobOf("paused"))?.parkedRuns ?? {})).toHaveLength(1);

      // Resume sends the parked run, and claims the entry it puts back: the parked run is handled.
      await resumeJob(f.engine, job.tenantId, job.jobId);
      const calls = new Map<string, number>();
      await deliverAll("paused", calls);

      expect([...calls]).toEqual([[due.toISOString(), 1]]);
      expect((await runsOf("paused")).map((r) => [r.scheduledFor, r.status])).toEqual([
        [due.toISOString(), "SUCCEEDED"],
      ]);
      expect((await jobOf("paused"))?.status).toBe("COMPLETED");
    });

    it("cancel: the runs put after the cancel's sweep are ended CANCELLED by the claim that lost its entry, never sent", async () => {
      const now = clock();
      const due = new Date(now.getTime() + 10 * SECOND);
      const { job, entry } = await seedOne("cancelled", { runAt: due.toISOString() }, due, now);
      const { result, hooked } = await withHook(
        "PutItemCommand",
        async () => {
          await cancelJob(f.engine, job.tenantId, job.jobId);
        },
        () => claimDueEntry(f.engine, entry, claimOptions(now)),
        isRunPut,
      );
      expect(hooked).toBe(1);
      expect(result.outcome).toBe("lost");
      expect((await runsOf("cancelled")).map((r) => [r.status, r.reason, r.cancelledBy])).toEqual([
        ["CANCELLED", "job cancelled", "job-cancel"],
      ]);

      // Nothing is left for the reaper to send, nor for a worker to run.
      await expectNothingRunsPast("cancelled", due);
    });

    it("cancel of a recurring job: every run of the lost claim ends CANCELLED at once, none waits QUEUED for its due time", async () => {
      const now = clock();
      const due = new Date(now.getTime() + 10 * SECOND);
      const { job, entry } = await seedOne(
        "cancelled-recurring",
        { every: "PT10S", startAt: due.toISOString() },
        due,
        now,
      );
      const { result } = await withHook(
        "PutItemCommand",
        async () => {
          await cancelJob(f.engine, job.tenantId, job.jobId);
        },
        () => claimDueEntry(f.engine, entry, claimOptions(now)),
        isRunPut,
      );
      expect(result.outcome).toBe("lost");
      const runs = await runsOf("cancelled-recurring");
      expect(runs.length).toBeGreaterThan(1);
      expect(runs.filter((r) => r.status !== "CANCELLED").map((r) => r.runId)).toEqual([]);
    });

    it("a claim that loses its entry to another claimer while the job stays ACTIVE leaves the runs to the winner", async () => {
      const now = clock();
      const due = new Date(now.getTime() + 10 * SECOND);
      const { entry } = await seedOne("contended", { runAt: due.toISOString() }, due, now);
      const { result, hooked } = await withHook(
        ONE_OFF_COMMIT,
        async () => {
          await expect(claimDueEntry(f.engine, entry, claimOptions(now))).resolves.toMatchObject({
            outcome: "claimed",
          });
        },
        () => claimDueEntry(f.engine, entry, claimOptions(now)),
        isJobUpdate,
      );
      expect(hooked).toBe(1);
      expect(result.outcome).toBe("lost");
      expect((await runsOf("contended")).map((r) => r.status)).toEqual(["QUEUED"]);
    });

    it("edit: the new version's claim puts its runs over the old ones; the old version's runs the new schedule lacks are SKIPPED by their workers", async () => {
      const now = clock();
      const due = new Date(now.getTime() + 20 * SECOND);
      const { job, entry } = await seedOne(
        "edited",
        { every: "PT1M", startAt: due.toISOString() },
        due,
        now,
      );
      // Every two minutes from the same start: every other occurrence of the old schedule stays.
      const { result } = await withHook(
        "TransactWriteItemsCommand",
        async () => {
          await editJob(f.engine, job.tenantId, job.jobId, 1, {
            schedule: { every: "PT2M", startAt: due.toISOString() },
          });
        },
        () => claimDueEntry(f.engine, entry, claimOptions(now)),
      );
      expect(["lost", "claimed"]).toContain(result.outcome);

      const runs = await runsOf("edited");
      const even = (r: Run) => (Date.parse(r.scheduledFor) - due.getTime()) % (2 * MINUTE) === 0;
      // One item an occurrence; the new schedule's at version 2, the others left at version 1.
      expect(new Set(runs.map((r) => r.scheduledFor)).size).toBe(runs.length);
      expect(runs.filter(even).every((r) => r.jobVersion === 2 && r.status === "QUEUED")).toBe(
        true,
      );
      const old = runs.filter((r) => !even(r));
      expect(old.length).toBeGreaterThan(0);
      expect(old.every((r) => r.jobVersion === 1 && r.status === "QUEUED")).toBe(true);

      // The first old-only occurrence's deadline passes: re-sent, and its worker skips it.
      const [first] = old;
      if (!first) throw new Error("no old run");
      pastDeadlineOf(new Date(first.scheduledFor));
      expect((await reap(f.engine)).resent).toBeGreaterThan(0);
      const calls = new Map<string, number>();
      await deliverAll("edited", calls);

      expect(calls.get(first.scheduledFor)).toBeUndefined();
      const after = (await runsOf("edited")).find((r) => r.scheduledFor === first.scheduledFor);
      expect(after?.status).toBe("SKIPPED");
      expect(after?.reason).toMatch(/^job edited \(version 1 → 2\)/);
      for (const [, count] of calls) expect(count).toBe(1);
    });
  });

  describe("an edit's claim of what an outage left due, raced by a dispatcher's claim", () => {
    it("the edit's claim wins: the dispatcher's puts past the edit stay QUEUED, unsent, and their workers skip them once the reaper sends them; nothing runs twice", async () => {
      const now = clock();
      const due = new Date(now.getTime() - 5 * MINUTE);
      const { job, entry } = await seedOne(
        "outage",
        { every: "PT1M", startAt: due.toISOString() },
        due,
        now,
      );
      const daily = dailyAwayFrom(now);
      const { result } = await withHook(
        "TransactWriteItemsCommand",
        async () => {
          await editJob(f.engine, job.tenantId, job.jobId, 1, {
            schedule: daily.schedule,
          });
        },
        () => claimDueEntry(f.engine, entry, claimOptions(now)),
      );
      expect(result.outcome).toBe("lost");
      expect(await jobOf("outage")).toMatchObject({ version: 2, status: "ACTIVE" });

      const runs = await runsOf("outage");
      expect(new Set(runs.map((r) => r.scheduledFor)).size).toBe(runs.length);
      // Every occurrence due at the edit is decided once, by the edit's claim.
      const decided = runs.filter((r) => r.scheduledFor <= now.toISOString());
      expect(decided.map((r) => r.scheduledFor)).toEqual(
        Array.from({ length: 6 }, (_, k) => new Date(due.getTime() + k * MINUTE).toISOString()),
      );
      // The dispatcher's runs past the edit, put before it lost its entry: the edit's claim did not
      // reach them, so they wait unsent, as runs a claim left before an edit do.
      const left = runs.filter((r) => r.scheduledFor > now.toISOString());
      expect(left.length).toBeGreaterThan(0);
      expect(left.every((r) => r.status === "QUEUED" && r.jobVersion === 1)).toBe(true);
      const last = left.at(-1);
      if (!last) throw new Error("no left run");

      // The reaper sends them (and again the edit's runs, past their deadlines too).
      pastDeadlineOf(new Date(last.scheduledFor));
      expect((await reap(f.engine)).resent).toBeGreaterThanOrEqual(left.length);
      const calls = new Map<string, number>();
      await deliverAll("outage", calls);
      for (const [, count] of calls) expect(count).toBe(1);
      for (const run of left) expect(calls.has(run.scheduledFor)).toBe(false);
      const ended = (await runsOf("outage")).filter((r) => r.scheduledFor > now.toISOString());
      expect(ended.map((r) => r.status)).toEqual(left.map(() => "SKIPPED"));
      for (const run of ended) expect(run.reason).toMatch(/^job edited \(version 1 → 2\)/);
    });

    it("the dispatcher's claim wins: the edit's claim is lost, the edit applies to the job that claim left, and each occurrence has one run", async () => {
      const now = clock();
      const due = new Date(now.getTime() - 5 * MINUTE);
      const { job, entry } = await seedOne(
        "outage-won",
        { every: "PT1M", startAt: due.toISOString() },
        due,
        now,
      );
      const daily = dailyAwayFrom(now);
      let dispatcher: ClaimResult | undefined;
      const claimTransaction = (input: Record<string, unknown>) =>
        ((input.TransactItems as { Delete?: { Key?: { pk?: unknown } } }[] | undefined) ?? []).some(
          (item) => String(item.Delete?.Key?.pk).startsWith("DUE#"),
        );
      const { result: edited } = await withHook(
        "TransactWriteItemsCommand",
        async () => {
          dispatcher = await claimDueEntry(f.engine, entry, claimOptions(now));
        },
        () =>
          editJob(f.engine, job.tenantId, job.jobId, 1, {
            schedule: daily.schedule,
          }),
        claimTransaction,
      );
      expect(dispatcher?.outcome).toBe("claimed");
      expect(edited).toMatchObject({ version: 2, status: "ACTIVE" });
      expect(new Date(edited.nextRunAt ?? 0).getUTCHours()).toBe(daily.hour);

      const runs = await runsOf("outage-won");
      expect(new Set(runs.map((r) => r.scheduledFor)).size).toBe(runs.length);
      // The dispatcher's claim reached its 14 minutes: those runs were queued before the edit, and
      // meet its inFlight rule as any such run.
      expect(runs.every((r) => r.jobVersion === 1)).toBe(true);
      const dueAtEdit = Array.from({ length: 6 }, (_, k) =>
        new Date(due.getTime() + k * MINUTE).toISOString(),
      );
      expect(
        runs.filter((r) => r.scheduledFor <= now.toISOString()).map((r) => r.scheduledFor),
      ).toEqual(dueAtEdit);
    });
  });

  describe("a claim whose job no longer points at its entry", () => {
    it("deletes the runs it put, but not one another claimer has put over them since", async () => {
      const now = clock();
      const due = new Date(now.getTime() + 20 * SECOND);
      const { job, entry } = await seedOne(
        "moved",
        { every: "PT1M", startAt: due.toISOString() },
        due,
        now,
      );
      const secondAt = new Date(due.getTime() + MINUTE).toISOString();
      // Between the puts and the transaction, the job is pointed elsewhere, and another claimer's
      // put (its own token) replaces the run of the second occurrence.
      const { result } = await withHook(
        "TransactWriteItemsCommand",
        async () => {
          const [, second] = await runsOf("moved");
          if (second?.scheduledFor !== secondAt) throw new Error("no second run");
          const queued = queuedRun(
            {
              jobId: "moved",
              tenantId: job.tenantId,
              scheduledFor: new Date(secondAt),
              dueAt: new Date(secondAt),
              attempt: 1,
              priority: job.priority,
              jobVersion: 1,
            },
            now,
            f.engine.settings,
          );
          await f.engine.doc.send(
            new PutCommand({
              TableName: f.engine.tables.runs,
              Item: { ...queued.item, claimToken: "another-claim" },
            }),
          );
          const moved = { ...job, nextDueKey: { pk: entry.key.pk, sk: "elsewhere" } };
          await f.engine.doc.send(
            new PutCommand({ TableName: f.engine.tables.jobs, Item: encodeJob(moved) }),
          );
        },
        () => claimDueEntry(f.engine, entry, claimOptions(now)),
      );

      expect(result.outcome).toBe("stale");
      expect((await runsOf("moved")).map((r) => r.scheduledFor)).toEqual([secondAt]);
      expect((await f.dueEntries()).filter((d) => d.jobId === "moved")).toEqual([]);
    });
  });
});
