import { GetCommand } from "@aws-sdk/lib-dynamodb";
import { beforeEach, describe, expect, it } from "vitest";
import type { OneOffClaimWrites } from "../../shared/config.js";
import { type ClaimResult, claimDueEntry } from "../../shared/dispatch/claim.js";
import { sendClaimed } from "../../shared/dispatch/fast-path.js";
import { reap } from "../../shared/dispatch/reaper.js";
import type { Engine } from "../../shared/engine.js";
import { editJob } from "../../shared/jobs/index.js";
import { jobKey } from "../../shared/storage/items.js";
import { SECOND, useClaimRace } from "../support/claim-race.js";
import type { EngineFixture } from "../support/engine-fixture.js";
import { seedJobs } from "../support/seed.js";

/**
 * With plain claims on (`oneOffClaimWrites: "plain"`, this file's fixture), a one-off's claim is
 * plain writes (storage/claim-plain.ts): its runs' puts, the job's update (the commit, recording
 * the claimed entry) and the entry's delete, with no transaction. A second claimer of the same
 * entry, or a claimer that dies between the commit and the delete, still runs the occurrence once.
 * With them off, the deployment's default, the claim is the transaction.
 */

const {
  clock,
  claimOptions,
  entryOf,
  seedOne,
  runsOf,
  withHooks,
  isJobUpdate,
  ONE_OFF_COMMIT,
  isEntryDelete,
  commandsSent,
  pastDeadlineOf,
  fixture,
  entriesOf,
  runsCalled,
} = useClaimRace({ oneOffClaimWrites: "plain" });
let f: EngineFixture;
beforeEach(() => {
  f = fixture();
});

async function jobItemOf(jobId: string): Promise<Record<string, unknown> | undefined> {
  const { Item } = await f.engine.doc.send(
    new GetCommand({ TableName: f.engine.tables.jobs, Key: jobKey(jobId), ConsistentRead: true }),
  );
  return Item;
}

/** The fixture's engine with a one-off's claims written as `claimWrites` says. */
const engineWith = (claimWrites: OneOffClaimWrites): Engine => ({
  ...f.engine,
  settings: { ...f.engine.settings, oneOffClaimWrites: claimWrites },
});

describe("a one-off's claim", () => {
  it("with plain claims on, sends no transaction: its run's put, the job's update and the entry's delete", async () => {
    const now = clock();
    const due = new Date(now.getTime() + 10 * SECOND);
    const { entry } = await seedOne("plain", { runAt: due.toISOString() }, due, now);

    const { result, sent } = await commandsSent(() =>
      claimDueEntry(engineWith("plain"), entry, claimOptions(now)),
    );

    expect(result.outcome).toBe("claimed");
    expect(sent.filter((name) => name === "TransactWriteItemsCommand")).toEqual([]);
    expect(sent).toEqual(
      expect.arrayContaining(["PutItemCommand", "UpdateItemCommand", "DeleteItemCommand"]),
    );
    expect(await entriesOf("plain")).toEqual([]);
    const job = await jobItemOf("plain");
    expect([job?.status, job?.nextDueKey, job?.nextRunAt]).toEqual(["ACTIVE", null, null]);
    expect(job?.claimedEntry).toMatchObject({ ...entry.key, jobVersion: entry.jobVersion });
    expect((await runsOf("plain")).map((r) => r.status)).toEqual(["QUEUED"]);
  });

  it("with plain claims off (the default), is the transaction of the entry's delete and the job's update", async () => {
    const now = clock();
    const due = new Date(now.getTime() + 10 * SECOND);
    const { entry } = await seedOne("transaction", { runAt: due.toISOString() }, due, now);

    const { result, sent } = await commandsSent(() =>
      claimDueEntry(engineWith("transaction"), entry, claimOptions(now)),
    );

    expect(result.outcome).toBe("claimed");
    // From its run's put on (before it, the shard count is recorded once a process).
    expect(sent.slice(sent.indexOf("PutItemCommand"))).toEqual([
      "PutItemCommand",
      "TransactWriteItemsCommand",
    ]);
    expect(await entriesOf("transaction")).toEqual([]);
    const job = await jobItemOf("transaction");
    expect([job?.status, job?.nextDueKey, job?.nextRunAt]).toEqual(["ACTIVE", null, null]);
    // No claim recorded: an earlier version's claimer reads the job as it always has.
    expect(job?.claimedEntry).toBeUndefined();
    expect((await runsOf("transaction")).map((r) => r.status)).toEqual(["QUEUED"]);
  });
});

/** Overdue within the misfire grace: its run is sent with no delay, and runs. */
const overdue = (now: Date) => new Date(now.getTime() - 5 * SECOND);

describe("a one-off's claimer that dies between the job's update and the entry's delete", () => {
  it("leaves the entry; the next pass removes it, leaves the runs to the committed claim, and the occurrence runs once", async () => {
    const now = clock();
    const due = overdue(now);
    const { entry } = await seedOne("died-after", { runAt: due.toISOString() }, due, now);

    const { result: first } = await withHooks(
      [
        {
          command: "DeleteItemCommand",
          when: isEntryDelete,
          fail: () => new Error("process died"),
        },
      ],
      () => claimDueEntry(f.engine, entry, claimOptions(now)),
    );
    expect(first.outcome).toBe("claimed");
    expect((await entryOf("died-after")).key).toEqual(entry.key);

    const next = await claimDueEntry(f.engine, entry, claimOptions(clock()));

    expect(next.outcome).toBe("lost");
    expect(await entriesOf("died-after")).toEqual([]);
    expect((await runsOf("died-after")).map((r) => r.status)).toEqual(["QUEUED"]);
    if (first.outcome === "claimed") await sendClaimed(f.engine, first.runs);
    expect(await runsCalled("died-after")).toEqual([[due.toISOString(), 1]]);
  });
});

describe("two claimers of a one-off's entry", () => {
  it("the second's update meets the first's commit before the first deletes the entry: it removes the entry and keeps the runs, which run once", async () => {
    const now = clock();
    const due = overdue(now);
    const { entry } = await seedOne("raced-delete", { runAt: due.toISOString() }, due, now);
    let second: ClaimResult | undefined;
    const { result: first, hooked } = await withHooks(
      [
        {
          command: "DeleteItemCommand",
          when: isEntryDelete,
          before: async () => {
            second = await claimDueEntry(f.engine, entry, claimOptions(now));
          },
        },
      ],
      () => claimDueEntry(f.engine, entry, claimOptions(now)),
    );

    expect(hooked).toBe(1);
    expect(first.outcome).toBe("claimed");
    expect(second?.outcome).toBe("lost");
    expect(await entriesOf("raced-delete")).toEqual([]);
    expect((await runsOf("raced-delete")).map((r) => r.status)).toEqual(["QUEUED"]);
    if (first.outcome === "claimed") await sendClaimed(f.engine, first.runs);
    expect(await runsCalled("raced-delete")).toEqual([[due.toISOString(), 1]]);
  });

  it("the second puts its run over the first's after the first committed: it keeps it (not its to delete), and the occurrence runs once", async () => {
    const now = clock();
    const due = overdue(now);
    const { entry } = await seedOne("raced-put", { runAt: due.toISOString() }, due, now);
    let first: ClaimResult | undefined;
    // The second claimer's put is the last on the run (its token), then the first commits.
    const { result: second, hooked } = await withHooks(
      [
        {
          command: ONE_OFF_COMMIT,
          when: isJobUpdate,
          before: async () => {
            first = await claimDueEntry(f.engine, entry, claimOptions(now));
          },
        },
      ],
      () => claimDueEntry(f.engine, entry, claimOptions(now)),
    );
    expect(hooked).toBe(1);
    expect(first?.outcome).toBe("claimed");
    expect(second.outcome).toBe("lost");
    expect((await runsOf("raced-put")).map((r) => r.status)).toEqual(["QUEUED"]);
    if (first?.outcome === "claimed") await sendClaimed(f.engine, first.runs);
    expect(await runsCalled("raced-put")).toEqual([[due.toISOString(), 1]]);
  });
});

describe("an edit of a one-off between its claim's run put and the job's update", () => {
  it("moves the job on: the claim is lost, its run is left to the reaper and its worker, which skips it", async () => {
    const now = clock();
    const due = new Date(now.getTime() + 10 * SECOND);
    const later = new Date(now.getTime() + 20 * SECOND);
    const { job, entry } = await seedOne("edited-once", { runAt: due.toISOString() }, due, now);
    const { result, hooked } = await withHooks(
      [
        {
          command: ONE_OFF_COMMIT,
          when: isJobUpdate,
          before: async () => {
            await editJob(f.engine, job.tenantId, job.jobId, 1, {
              schedule: { runAt: later.toISOString() },
            });
          },
        },
      ],
      () => claimDueEntry(f.engine, entry, claimOptions(now)),
    );
    expect(hooked).toBe(1);
    expect(result.outcome).toBe("lost");
    // The edit removed the entry and claimed its new occurrence at once (the fast path).
    expect(await entriesOf("edited-once")).toEqual([]);
    expect(
      (await runsOf("edited-once")).map((r) => [r.scheduledFor, r.jobVersion, r.status]),
    ).toEqual([
      [due.toISOString(), 1, "QUEUED"],
      [later.toISOString(), 2, "QUEUED"],
    ]);

    // The old run's deadline passes (not the new one's): the reaper sends it, its worker skips it.
    pastDeadlineOf(due);
    expect((await reap(f.engine)).resent).toBe(1);
    expect(await runsCalled("edited-once")).toEqual([]);
    expect((await runsOf("edited-once")).map((r) => r.status)).toEqual(["SKIPPED", "QUEUED"]);
  });
});

describe("a recurring-shaped claim (a transaction) of a one-off's entry that a plain claim committed", () => {
  it("reads the claim recorded on the job when its job condition fails with the entry still there: lost, the entry removed", async () => {
    const now = clock();
    // Late by 30 s: within the grace for the first claimer, past it for the second (a minute on).
    const due = new Date(now.getTime() - 30 * SECOND);
    await seedJobs(
      f,
      [
        {
          jobId: "skip-raced",
          schedule: { runAt: due.toISOString() },
          dueAt: due,
          misfire: "skip",
        },
      ],
      now,
    );
    const entry = await entryOf("skip-raced");
    let second: ClaimResult | undefined;
    const { result: first, hooked } = await withHooks(
      [
        {
          command: "DeleteItemCommand",
          when: isEntryDelete,
          before: async () => {
            // Past the grace, `skip` records the occurrence SKIPPED: a transaction, not plain writes.
            second = await claimDueEntry(
              f.engine,
              entry,
              claimOptions(new Date(now.getTime() + 60 * SECOND)),
            );
          },
        },
      ],
      () => claimDueEntry(f.engine, entry, claimOptions(now)),
    );

    expect(hooked).toBe(1);
    expect(first.outcome).toBe("claimed");
    expect(second?.outcome).toBe("lost");
    expect(await entriesOf("skip-raced")).toEqual([]);
    expect((await runsOf("skip-raced")).map((r) => r.status)).toEqual(["QUEUED"]);
  });
});
