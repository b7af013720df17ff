import { beforeEach, describe, expect, it } from "vitest";
import { claimDueEntry } from "../../shared/dispatch/claim.js";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import type { Engine } from "../../shared/engine.js";
import { editJob, pauseJob, resumeJob } from "../../shared/jobs/index.js";
import { getTenantJob } from "../../shared/jobs/queries.js";
import { listSetAsideEntries } from "../../shared/storage/set-aside.js";
import { useCancelledAttempt } from "../support/cancelled-attempt.js";
import { SECOND, useClaimRace } from "../support/claim-race.js";
import type { EngineFixture } from "../support/engine-fixture.js";

/**
 * Attacks on the writes that put a job's due entry over an entry of an older version of the job
 * (`putOverOlderDueEntry`: an edit's, a resume's, a recurring claim's next entry), where a
 * one-off's plain claimer died after its commit and left its entry: a pass that read the entry
 * left behind and is mid-claim when the write lands on it, in either form of the claim; and an
 * entry the job's pending occurrence moves off without a claim (a resume's next attempt).
 */

const race = useClaimRace({ oneOffClaimWrites: "plain" });
const {
  clock,
  claimOptions,
  seedOne,
  runsOf,
  withHooks,
  isRunPut,
  isEntryDelete,
  fixture,
  entriesOf,
} = race;
const { pausedWithRunCancelled, resumedUnclaimed, expectNextAttemptRunsOnce } =
  useCancelledAttempt(race);
let f: EngineFixture;
beforeEach(() => {
  f = fixture();
});

const engineWith = (claimWrites: "transaction" | "plain"): Engine => ({
  ...f.engine,
  settings: { ...f.engine.settings, oneOffClaimWrites: claimWrites },
});

/** The one-off claimed by a plain claimer that dies after its commit, before its entry's delete. */
async function claimAndDie(jobId: string, due: Date) {
  const now = clock();
  const { job, entry } = await seedOne(jobId, { runAt: due.toISOString() }, due, now);
  const { result } = await withHooks(
    [{ command: "DeleteItemCommand", when: isEntryDelete, fail: () => new Error("died") }],
    () => claimDueEntry(f.engine, entry, claimOptions(now)),
  );
  expect(result.outcome).toBe("claimed");
  return { job, entry };
}

describe.each(["transaction", "plain"] as const)(
  "a pass (%s claim) that read the entry a dead plain claimer left, mid-claim when a resume after paused edits writes over it",
  (claimWrites) => {
    it("the pass finds its entry rewritten or gone; the occurrence runs once, at the edited version, and no entry is left", async () => {
      const now = clock();
      const due = new Date(now.getTime() + 30 * SECOND);
      const away = new Date(now.getTime() + 10 * 60 * SECOND);
      const jobId = `mid-resume-${claimWrites}`;
      const { job, entry } = await claimAndDie(jobId, due);

      // The pass has read the leftover and put its run; before its commit, the job is paused,
      // edited away and back, and resumed: the resume's entry lands on the leftover's key.
      const { result, hooked } = await withHooks(
        [
          {
            command: claimWrites === "plain" ? "UpdateItemCommand" : "TransactWriteItemsCommand",
            when: (input) => !isRunPut(input),
            before: async () => {
              await pauseJob(f.engine, job.tenantId, job.jobId);
              await editJob(f.engine, job.tenantId, job.jobId, 1, {
                schedule: { runAt: away.toISOString() },
              });
              await editJob(f.engine, job.tenantId, job.jobId, 2, {
                schedule: { runAt: due.toISOString() },
              });
              await resumeJob(f.engine, job.tenantId, job.jobId);
            },
          },
        ],
        () => claimDueEntry(engineWith(claimWrites), entry, claimOptions(clock())),
      );

      expect(hooked).toBe(1);
      expect(["lost", "claimed", "stale"]).toContain(result.outcome);
      expect(await entriesOf(jobId)).toEqual([]);
      const after = await getTenantJob(f.engine, job.tenantId, job.jobId);
      expect([after.version, after.nextDueKey]).toEqual([3, null]);
      // One run of the occurrence, at the edited version (its message waits for `due`).
      expect((await runsOf(jobId)).map((r) => [r.scheduledFor, r.jobVersion, r.status])).toEqual([
        [due.toISOString(), 3, "QUEUED"],
      ]);
    });
  },
);

describe.each(["transaction", "plain"] as const)(
  "a pass (%s claim) that read the entry a dead plain claimer left, mid-claim when a recurring claim's next entry is written over it",
  (claimWrites) => {
    it("nothing is set aside, the job goes on from its next entry, and each occurrence up to it has one run", async () => {
      const now = clock();
      const start = new Date(Math.ceil(now.getTime() / SECOND) * SECOND + SECOND);
      const due = new Date(start.getTime() + 50 * SECOND);
      const jobId = `mid-next-${claimWrites}`;
      const { job, entry } = await claimAndDie(jobId, due);

      const { result, hooked } = await withHooks(
        [
          {
            command: claimWrites === "plain" ? "UpdateItemCommand" : "TransactWriteItemsCommand",
            when: (input) => !isRunPut(input),
            before: async () => {
              // The edit's fast path claims 50 occurrences and files its next entry at `due`.
              await editJob(f.engine, job.tenantId, job.jobId, 1, {
                schedule: { every: "PT1S", startAt: start.toISOString() },
              });
            },
          },
        ],
        () => claimDueEntry(engineWith(claimWrites), entry, claimOptions(clock())),
      );
      expect(hooked).toBe(1);
      expect(["lost", "claimed", "stale"]).toContain(result.outcome);

      const pass = await dispatchShard(f.engine, 0, "pass-after");
      expect(pass.outcome === "swept" ? pass.setAside : pass.outcome).toBe(0);
      expect(await listSetAsideEntries(f.engine, 0)).toEqual([]);
      const after = await getTenantJob(f.engine, job.tenantId, job.jobId);
      expect((await entriesOf(jobId)).map((e) => [e.key, e.jobVersion])).toEqual([
        [after.nextDueKey, 2],
      ]);
      const runs = await runsOf(jobId);
      const upTo = Date.parse(after.nextRunAt ?? "");
      expect(upTo).toBeGreaterThan(due.getTime());
      expect(runs.map((r) => [r.scheduledFor, r.jobVersion, r.status])).toEqual(
        Array.from({ length: (upTo - start.getTime()) / SECOND }, (_, i) => [
          new Date(start.getTime() + i * SECOND).toISOString(),
          2,
          "QUEUED",
        ]),
      );
    });
  },
);

/**
 * A one-off whose running run a pause cancelled, resumed: its pending entry is the run's next
 * attempt (attempt 2), which the resume's fast path failed to claim (throttled), left to the next
 * pass. Edits and resumes file a job's pending occurrence from `nextRunAt` at attempt 1.
 */
async function rerunPending(jobId: string) {
  const { job, due } = await pausedWithRunCancelled(jobId);
  await resumedUnclaimed(job);
  expect((await entriesOf(jobId)).map((e) => e.attempt)).toEqual([2]);
  return { job, due };
}

describe("a one-off's pending next attempt (a resume's, after a pause cancelled its run), then the next pass", () => {
  it("the next attempt runs, once (the cases below differ from this one by what comes before the pass)", async () => {
    const jobId = "rerun-pass";
    const { due } = await rerunPending(jobId);

    await dispatchShard(f.engine, 0, "pass-after-resume");

    await expectNextAttemptRunsOnce(jobId, due);
  });
});

describe("a one-off's pending next attempt (a resume's, after a pause cancelled its run), then a pause and a resume", () => {
  it("the next attempt still runs, once", async () => {
    const jobId = "rerun-pause-resume";
    const { job, due } = await rerunPending(jobId);

    await pauseJob(f.engine, job.tenantId, job.jobId);
    await resumeJob(f.engine, job.tenantId, job.jobId);
    await dispatchShard(f.engine, 0, "pass-after-resume");

    await expectNextAttemptRunsOnce(jobId, due);
  });
});

describe("a one-off's pending next attempt (a resume's, after a pause cancelled its run), then an edit that keeps the occurrence (its payload)", () => {
  it("the next attempt still runs, once", async () => {
    const jobId = "rerun-edit";
    const { job, due } = await rerunPending(jobId);

    // Before that pass, an edit that keeps the occurrence (its payload).
    const edited = await editJob(f.engine, job.tenantId, job.jobId, 1, {
      payload: { edited: true },
    });
    await dispatchShard(f.engine, 0, "pass-after-edit");

    expect(edited.version).toBe(2);
    await expectNextAttemptRunsOnce(jobId, due);
  });
});
