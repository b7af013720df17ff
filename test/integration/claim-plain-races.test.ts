import { DeleteCommand, GetCommand, PutCommand, TransactWriteCommand } from "@aws-sdk/lib-dynamodb";
import { beforeEach, describe, expect, it } from "vitest";
import type { OneOffClaimWrites } from "../../shared/config.js";
import { claimDueEntry } from "../../shared/dispatch/claim.js";
import { sendClaimed } from "../../shared/dispatch/fast-path.js";
import { reap } from "../../shared/dispatch/reaper.js";
import type { Engine } from "../../shared/engine.js";
import { cancelJob, deleteJob, editJob, pauseJob } from "../../shared/jobs/index.js";
import { runSortKey } from "../../shared/keys.js";
import type { DueEntry } from "../../shared/model.js";
import { jobKey, jobPk } from "../../shared/storage/items.js";
import { SECOND, useClaimRace } from "../support/claim-race.js";
import type { EngineFixture } from "../support/engine-fixture.js";

/**
 * A one-off's plain claim (storage/claim-plain.ts, `oneOffClaimWrites: "plain"`, this file's
 * fixture) attacked between its writes: the SDK sending a write again after it applied,
 * throttling, a claimer dying after its commit (never sending its run, or a pause or a cancel
 * before the next pass), an edit that keeps the occurrence; and an earlier version's transaction
 * claim beside this version's (a deploy under way, a rollback), which loses the occurrence beside a
 * plain claim and nothing beside this version's transaction, the default (docs/deploy.md).
 */

const {
  clock,
  claimOptions,
  seedOne,
  runsOf,
  withHooks,
  isJobUpdate,
  isEntryDelete,
  deliverAll,
  pastDeadlineOf,
  fixture,
} = useClaimRace({ oneOffClaimWrites: "plain" });
let f: EngineFixture;
beforeEach(() => {
  f = fixture();
});

type Input = Record<string, unknown>;

const entriesOf = async (jobId: string) => (await f.dueEntries()).filter((d) => d.jobId === jobId);

/** Overdue within the misfire grace: its run is sent with no delay, and runs. */
const overdue = (now: Date) => new Date(now.getTime() - 5 * SECOND);

async function runsCalled(jobId: string): Promise<[string, number][]> {
  const calls = new Map<string, number>();
  await deliverAll(jobId, calls);
  return [...calls];
}

/**
 * While `work` runs, the first request of `command` that `when` accepts is sent twice, the
 * first answer dropped: the SDK sending it again after DynamoDB applied it and the answer was lost.
 */
async function withFirstAnswerLost<T>(
  command: string,
  when: (input: Input) => boolean,
  work: () => Promise<T>,
): Promise<{ result: T; resent: number }> {
  const name = "firstAnswerLost";
  let resent = 0;
  f.engine.doc.middlewareStack.add(
    (next, context) => async (args) => {
      if (resent > 0 || context.commandName !== command || !when(args.input as Input))
        return next(args);
      resent++;
      await next(args);
      return next(args);
    },
    { step: "initialize", name },
  );
  try {
    return { result: await work(), resent };
  } finally {
    f.engine.doc.middlewareStack.remove(name);
  }
}

/** The fixture's engine with a one-off's claims written as `claimWrites` says. */
const engineWith = (claimWrites: OneOffClaimWrites): Engine => ({
  ...f.engine,
  settings: { ...f.engine.settings, oneOffClaimWrites: claimWrites },
});

/**
 * What a dispatcher or fast path of the version before plain claims sends for a one-off's entry
 * (main's shared/storage/claim.ts, writeClaim): its run's put under its own token, over a QUEUED
 * unstarted run of the same version, then one transaction deleting the entry at its version and
 * updating the job still pointing at it; when the job's condition fails with the entry there, it
 * deletes the runs it put (`OWN_UNTOUCHED_RUN`), reading nothing else.
 */
async function earlierVersionClaim(entry: DueEntry): Promise<"committed" | "job-moved"> {
  const { doc, tables } = f.engine;
  const runKey = { pk: jobPk(entry.jobId), sk: runSortKey(entry.scheduledFor, entry.attempt) };
  const { Item: run } = await doc.send(
    new GetCommand({ TableName: tables.runs, Key: runKey, ConsistentRead: true }),
  );
  if (!run) throw new Error("the earlier claim puts the same run: expected it there");
  const token = "earlier-version-claim";
  await doc.send(
    new PutCommand({
      TableName: tables.runs,
      Item: { ...run, claimToken: token },
      ConditionExpression:
        "attribute_not_exists(pk) OR (#status = :queued AND (jobVersion < :jobVersion OR (jobVersion = :jobVersion AND fence = :unstarted AND (attribute_not_exists(misfireFrom) OR attribute_type(misfireFrom, :null)))))",
      ExpressionAttributeNames: { "#status": "status" },
      ExpressionAttributeValues: {
        ":queued": "QUEUED",
        ":jobVersion": entry.jobVersion,
        ":unstarted": 0,
        ":null": "NULL",
      },
    }),
  );
  try {
    await doc.send(
      new TransactWriteCommand({
        TransactItems: [
          {
            Delete: {
              TableName: tables.jobs,
              Key: entry.key,
              ConditionExpression: "attribute_exists(pk) AND jobVersion = :jobVersion",
              ExpressionAttributeValues: { ":jobVersion": entry.jobVersion },
            },
          },
          {
            Update: {
              TableName: tables.jobs,
              Key: jobKey(entry.jobId),
              ConditionExpression:
                "#status = :active AND nextDueKey.pk = :pk AND nextDueKey.sk = :sk",
              UpdateExpression:
                "SET nextRunAt = :null, nextDueKey = :null, occurrencesQueued = :queued REMOVE catchUpCount, catchUpOf",
              ExpressionAttributeNames: { "#status": "status" },
              ExpressionAttributeValues: {
                ":active": "ACTIVE",
                ":pk": entry.key.pk,
                ":sk": entry.key.sk,
                ":null": null,
                ":queued": 1,
              },
            },
          },
        ],
      }),
    );
    return "committed";
  } catch (error) {
    const reasons = (error as { CancellationReasons?: { Code?: string }[] }).CancellationReasons;
    if (reasons?.[0]?.Code !== "None" || reasons[1]?.Code !== "ConditionalCheckFailed") throw error;
    await doc.send(
      new DeleteCommand({
        TableName: tables.runs,
        Key: runKey,
        ConditionExpression:
          "claimToken = :token AND #status = :queued AND fence = :unstarted AND (attribute_not_exists(misfireFrom) OR attribute_type(misfireFrom, :null))",
        ExpressionAttributeNames: { "#status": "status" },
        ExpressionAttributeValues: {
          ":token": token,
          ":queued": "QUEUED",
          ":unstarted": 0,
          ":null": "NULL",
        },
      }),
    );
    return "job-moved";
  }
}

describe("a one-off's plain claim whose write the SDK sent again after it applied", () => {
  it("the job's update: it finds its own claim recorded, commits, removes the entry, and the occurrence runs once", async () => {
    const now = clock();
    const due = overdue(now);
    const { entry } = await seedOne("resent-commit", { runAt: due.toISOString() }, due, now);
    const { result, resent } = await withFirstAnswerLost("UpdateItemCommand", isJobUpdate, () =>
      claimDueEntry(f.engine, entry, claimOptions(now)),
    );
    expect(resent).toBe(1);
    expect(result.outcome).toBe("claimed");
    expect(await entriesOf("resent-commit")).toEqual([]);
    expect((await runsOf("resent-commit")).map((r) => r.status)).toEqual(["QUEUED"]);
    if (result.outcome === "claimed") await sendClaimed(f.engine, result.runs);
    expect(await runsCalled("resent-commit")).toEqual([[due.toISOString(), 1]]);
  });

  it("the entry's delete: the claim stands, and the occurrence runs once", async () => {
    const now = clock();
    const due = overdue(now);
    const { entry } = await seedOne("resent-delete", { runAt: due.toISOString() }, due, now);
    const { result, resent } = await withFirstAnswerLost("DeleteItemCommand", isEntryDelete, () =>
      claimDueEntry(f.engine, entry, claimOptions(now)),
    );
    expect(resent).toBe(1);
    expect(result.outcome).toBe("claimed");
    expect(await entriesOf("resent-delete")).toEqual([]);
    if (result.outcome === "claimed") await sendClaimed(f.engine, result.runs);
    expect(await runsCalled("resent-delete")).toEqual([[due.toISOString(), 1]]);
  });
});

describe("a one-off's plain claim throttled", () => {
  it("at the job's update, three times: it is sent again and commits", async () => {
    const now = clock();
    const due = overdue(now);
    const { entry } = await seedOne("throttled", { runAt: due.toISOString() }, due, now);
    const throttled = () =>
      Object.assign(new Error("throttled"), { name: "ProvisionedThroughputExceededException" });
    const hook = { command: "UpdateItemCommand", when: isJobUpdate, fail: throttled };
    const { result, hooked } = await withHooks([hook, hook, hook], () =>
      claimDueEntry(f.engine, entry, claimOptions(now)),
    );
    expect(hooked).toBe(3);
    expect(result.outcome).toBe("claimed");
    expect(await entriesOf("throttled")).toEqual([]);
  });
});

describe("a one-off's claimer that dies after its commit, before its entry's delete", () => {
  it("then a pause: the next pass removes the entry, and the run stays for its worker to park", async () => {
    const now = clock();
    const due = overdue(now);
    const { job, entry } = await seedOne("died-paused", { runAt: due.toISOString() }, due, now);
    const { result: first } = await withHooks(
      [{ command: "DeleteItemCommand", when: isEntryDelete, fail: () => new Error("died") }],
      () => claimDueEntry(f.engine, entry, claimOptions(now)),
    );
    expect(first.outcome).toBe("claimed");
    await pauseJob(f.engine, job.tenantId, job.jobId);

    const next = await claimDueEntry(f.engine, entry, claimOptions(clock()));

    expect(next.outcome).toBe("lost");
    expect(await entriesOf("died-paused")).toEqual([]);
    expect((await runsOf("died-paused")).map((r) => r.status)).toEqual(["QUEUED"]);
  });

  it("then a cancel: the next pass removes the entry, and nothing runs", async () => {
    const now = clock();
    const due = overdue(now);
    const { job, entry } = await seedOne("died-cancelled", { runAt: due.toISOString() }, due, now);
    const { result: first } = await withHooks(
      [{ command: "DeleteItemCommand", when: isEntryDelete, fail: () => new Error("died") }],
      () => claimDueEntry(f.engine, entry, claimOptions(now)),
    );
    expect(first.outcome).toBe("claimed");
    await cancelJob(f.engine, job.tenantId, job.jobId);

    const next = await claimDueEntry(f.engine, entry, claimOptions(clock()));

    expect(next.outcome).toBe("lost");
    expect(await entriesOf("died-cancelled")).toEqual([]);
    expect((await runsOf("died-cancelled")).map((r) => r.status)).toEqual(["CANCELLED"]);
    pastDeadlineOf(due);
    expect(await runsCalled("died-cancelled")).toEqual([]);
  });
});

describe("a one-off's claimer that dies after its commit, then a delete of its job", () => {
  it("the next pass removes the entry as an orphan, and nothing runs", async () => {
    const now = clock();
    const due = overdue(now);
    const { job, entry } = await seedOne("died-deleted", { runAt: due.toISOString() }, due, now);
    const { result: first } = await withHooks(
      [{ command: "DeleteItemCommand", when: isEntryDelete, fail: () => new Error("died") }],
      () => claimDueEntry(f.engine, entry, claimOptions(now)),
    );
    expect(first.outcome).toBe("claimed");
    await deleteJob(f.engine, job.tenantId, job.jobId);

    expect((await claimDueEntry(f.engine, entry, claimOptions(clock()))).outcome).toBe("stale");
    expect(await entriesOf("died-deleted")).toEqual([]);
    pastDeadlineOf(clock());
    await reap(f.engine);
    expect(await runsCalled("died-deleted")).toEqual([]);
  });
});

describe("a one-off's plain commit sent again by the SDK after a pause landed on the applied one", () => {
  it("finds its own claim recorded on the paused job: committed, the entry removed", async () => {
    const now = clock();
    const due = overdue(now);
    const { job, entry } = await seedOne("resent-paused", { runAt: due.toISOString() }, due, now);
    const name = "pauseBeforeResend";
    let resent = 0;
    f.engine.doc.middlewareStack.add(
      (next, context) => async (args) => {
        if (
          resent > 0 ||
          context.commandName !== "UpdateItemCommand" ||
          !isJobUpdate(args.input as Input)
        )
          return next(args);
        resent++;
        await next(args);
        await pauseJob(f.engine, job.tenantId, job.jobId);
        return next(args);
      },
      { step: "initialize", name },
    );
    try {
      const result = await claimDueEntry(f.engine, entry, claimOptions(now));
      expect(resent).toBe(1);
      expect(result.outcome).toBe("claimed");
    } finally {
      f.engine.doc.middlewareStack.remove(name);
    }
    expect(await entriesOf("resent-paused")).toEqual([]);
    expect((await runsOf("resent-paused")).map((r) => r.status)).toEqual(["QUEUED"]);
  });
});

describe("a one-off's claimer that dies after its commit and never sends its run", () => {
  it("the next pass is lost and removes the entry; the reaper sends the run at its deadline, and it runs once", async () => {
    const now = clock();
    const due = overdue(now);
    const { entry } = await seedOne("died-unsent", { runAt: due.toISOString() }, due, now);
    const { result: first } = await withHooks(
      [{ command: "DeleteItemCommand", when: isEntryDelete, fail: () => new Error("died") }],
      () => claimDueEntry(f.engine, entry, claimOptions(now)),
    );
    expect(first.outcome).toBe("claimed");

    expect((await claimDueEntry(f.engine, entry, claimOptions(clock()))).outcome).toBe("lost");
    expect(await entriesOf("died-unsent")).toEqual([]);

    // Its deadline counts from its claim (its due time was past): a lease after now.
    pastDeadlineOf(clock());
    expect((await reap(f.engine)).resent).toBe(1);
    expect(await runsCalled("died-unsent")).toEqual([[due.toISOString(), 1]]);
  });
});

describe("an edit that keeps a one-off's occurrence, between its claim's run put and the job's update", () => {
  it("its fast path claims the rewritten entry; the first claim is lost, and the occurrence runs once, as edited", async () => {
    const now = clock();
    const due = overdue(now);
    const { job, entry } = await seedOne("edit-kept", { runAt: due.toISOString() }, due, now);
    const { result, hooked } = await withHooks(
      [
        {
          command: "UpdateItemCommand",
          when: isJobUpdate,
          before: async () => {
            await editJob(f.engine, job.tenantId, job.jobId, 1, { payload: { edited: true } });
          },
        },
      ],
      () => claimDueEntry(f.engine, entry, claimOptions(now)),
    );
    expect(hooked).toBe(1);
    expect(result.outcome).toBe("lost");
    expect(await entriesOf("edit-kept")).toEqual([]);
    expect((await runsOf("edit-kept")).map((r) => [r.jobVersion, r.status])).toEqual([
      [2, "QUEUED"],
    ]);
    expect(await runsCalled("edit-kept")).toEqual([[due.toISOString(), 1]]);
  });
});

describe("an earlier version's transaction claim beside this version's claim of a one-off (a deploy, a rollback)", () => {
  it("with plain claims on, the earlier claim's transaction meets the plain commit before the entry's delete and deletes the committed run: the occurrence is lost (why plain claims wait for no earlier version running, docs/deploy.md)", async () => {
    const now = clock();
    const due = overdue(now);
    const { entry } = await seedOne("mixed-plain", { runAt: due.toISOString() }, due, now);
    let earlier: string | undefined;
    const { result, hooked } = await withHooks(
      [
        {
          command: "DeleteItemCommand",
          when: isEntryDelete,
          before: async () => {
            earlier = await earlierVersionClaim(entry);
          },
        },
      ],
      () => claimDueEntry(engineWith("plain"), entry, claimOptions(now)),
    );
    expect(hooked).toBe(1);
    expect(earlier).toBe("job-moved");
    expect(result.outcome).toBe("claimed");
    expect(await entriesOf("mixed-plain")).toEqual([]);
    // The hazard the setting gates: the committed claim's run deleted by the earlier claimer.
    expect((await runsOf("mixed-plain")).map((r) => r.status)).toEqual([]);
  });

  it("with plain claims off (the default), the earlier claim commits between this claim's run put and its transaction: this claim is lost, and the occurrence runs once", async () => {
    const now = clock();
    const due = overdue(now);
    const { entry } = await seedOne("mixed-earlier-first", { runAt: due.toISOString() }, due, now);
    let earlier: string | undefined;
    // At this claim's commit, whichever form it takes: the transaction, or a plain claim's entry
    // delete (after its commit: the hazard above). Only this claim's first is hooked, not the
    // earlier claim's own requests.
    let earlierSent = false;
    const earlierClaim = async () => {
      earlierSent = true;
      earlier = await earlierVersionClaim(entry);
    };
    const { result, hooked } = await withHooks(
      [
        { command: "TransactWriteItemsCommand", when: () => !earlierSent, before: earlierClaim },
        {
          command: "DeleteItemCommand",
          when: (input) => !earlierSent && isEntryDelete(input),
          before: earlierClaim,
        },
      ],
      () => claimDueEntry(engineWith("transaction"), entry, claimOptions(now)),
    );
    expect(hooked).toBe(1);
    expect((await runsOf("mixed-earlier-first")).map((r) => r.status)).toEqual(["QUEUED"]);
    expect(earlier).toBe("committed");
    expect(result.outcome).toBe("lost");
    expect(await entriesOf("mixed-earlier-first")).toEqual([]);
    // The earlier claimer sends it; here the reaper does, at its deadline (a lease after the
    // claim, its due time being past), as after any claimer that died before its send.
    pastDeadlineOf(clock());
    expect((await reap(f.engine)).resent).toBe(1);
    expect(await runsCalled("mixed-earlier-first")).toEqual([[due.toISOString(), 1]]);
  });
});

describe("a one-off's claimer that dies after its commit, then edits of its runAt away and back", () => {
  it("the edit back to the claimed occurrence's time is written over the entry left behind, and claimed", async () => {
    const now = clock();
    const due = new Date(now.getTime() + 30 * SECOND);
    const away = new Date(now.getTime() + 10 * 60 * SECOND);
    const { job, entry } = await seedOne("edit-back", { runAt: due.toISOString() }, due, now);
    const { result: first } = await withHooks(
      [{ command: "DeleteItemCommand", when: isEntryDelete, fail: () => new Error("died") }],
      () => claimDueEntry(f.engine, entry, claimOptions(now)),
    );
    expect(first.outcome).toBe("claimed");

    await editJob(f.engine, job.tenantId, job.jobId, 1, {
      schedule: { runAt: away.toISOString() },
    });
    const back = await editJob(f.engine, job.tenantId, job.jobId, 2, {
      schedule: { runAt: due.toISOString() },
    });

    expect(back.version).toBe(3);
    // Due inside the fast-path window, the edit's fast path claimed it: one run, at version 3.
    expect(await entriesOf("edit-back")).toEqual([]);
    expect(
      (await runsOf("edit-back"))
        .filter((r) => r.scheduledFor === due.toISOString())
        .map((r) => [r.jobVersion, r.status]),
    ).toEqual([[3, "QUEUED"]]);
  });
});
