import { DeleteCommand, PutCommand, TransactWriteCommand } from "@aws-sdk/lib-dynamodb";
import { beforeEach, describe, expect, it } from "vitest";
import type { OneOffClaimWrites } from "../../shared/config.js";
import { claimDueEntry } from "../../shared/dispatch/claim.js";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import { sendClaimed } from "../../shared/dispatch/fast-path.js";
import { reap } from "../../shared/dispatch/reaper.js";
import type { Engine } from "../../shared/engine.js";
import {
  cancelJob,
  deleteJob,
  editJob,
  pauseJob,
  resumeJob,
  triggerJob,
} from "../../shared/jobs/index.js";
import { getTenantJob } from "../../shared/jobs/queries.js";
import type { DueEntry } from "../../shared/model.js";
import { jobKey } from "../../shared/storage/items.js";
import { startRun } from "../../shared/storage/run-start.js";
import { queuedRun } from "../../shared/storage/runs.js";
import { listSetAsideEntries } from "../../shared/storage/set-aside.js";
import { useCancelledAttempt } from "../support/cancelled-attempt.js";
import {
  ONE_OFF_CLAIM_WRITES,
  type RequestHook,
  SECOND,
  useClaimRace,
} from "../support/claim-race.js";
import type { EngineFixture } from "../support/engine-fixture.js";

/**
 * A one-off's plain claim (storage/claim-plain.ts, `oneOffClaimWrites: "plain"`, this file's
 * fixture) attacked between its writes: the SDK sending a write again after it applied,
 * throttling, a claimer dying after its commit (never sending its run; then before the next pass a
 * pause, a cancel, a delete, a trigger, a pause and a resume, one that cancels its running run, edits
 * of its `runAt` away and back while active or paused, an edit to a schedule whose claim files its
 * next entry at the claimed time), an edit that keeps the occurrence; and an earlier version's
 * transaction claim beside this version's (a deploy under way, a rollback), which loses the
 * occurrence when it meets a plain commit before that claim's entry delete (docs/deploy.md), and
 * nothing when either claim commits between the other's run put and its commit, whichever form
 * this version's takes.
 */

const race = useClaimRace({ oneOffClaimWrites: "plain" });
const {
  clock,
  claimOptions,
  seedOne,
  runsOf,
  withHooks,
  isRunPut,
  isJobUpdate,
  isEntryDelete,
  deliverAll,
  pastDeadlineOf,
  expectNothingRunsPast,
  fixture,
  entriesOf,
  runsCalled,
} = race;
const { expectRunsOnceCancelledEnded } = useCancelledAttempt(race);
let f: EngineFixture;
beforeEach(() => {
  f = fixture();
});

type Input = Record<string, unknown>;

/** Overdue within the misfire grace: its run is sent with no delay, and runs. */
const overdue = (now: Date) => new Date(now.getTime() - 5 * SECOND);

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

/** What the earlier version's claim came to (its writeClaim's outcomes, as far as these cases go). */
type EarlierOutcome = "committed" | "job-moved" | "entry-gone" | "entry-rewritten";

/**
 * What a dispatcher or fast path of the version before plain claims sends for a one-off's entry
 * (main's shared/storage/claim.ts at ceef540, writeClaim): its run, planned from the entry, put
 * under its own token over a QUEUED unstarted run of the same version; then one transaction
 * deleting the entry at its version and updating the job still pointing at it. Its run put made,
 * this returns that transaction, so a case can let another claimer write in between. When the
 * transaction fails, that version reads the entry's condition first: entry gone or rewritten, it
 * leaves its run (its claimer then ends it only if the job is cancelled); the entry there and the
 * job's condition failed, it deletes the run it put (`OWN_UNTOUCHED_RUN`), reading nothing else.
 */
async function earlierVersionClaimPut(
  entry: DueEntry,
  now: Date,
): Promise<() => Promise<EarlierOutcome>> {
  const { doc, tables, settings } = f.engine;
  const { item: run } = queuedRun(
    {
      jobId: entry.jobId,
      tenantId: entry.tenantId,
      scheduledFor: new Date(entry.scheduledFor),
      dueAt: new Date(entry.dueAt),
      attempt: entry.attempt,
      priority: entry.priority,
      jobVersion: entry.jobVersion,
    },
    now,
    settings,
  );
  const runKey = { pk: run.pk, sk: run.sk };
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
  return async () => {
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
                ReturnValuesOnConditionCheckFailure: "ALL_OLD",
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
      const reasons = (error as { CancellationReasons?: { Code?: string; Item?: unknown }[] })
        .CancellationReasons;
      const [entryReason, jobReason] = reasons ?? [];
      if (entryReason?.Code === "ConditionalCheckFailed")
        return entryReason.Item ? "entry-rewritten" : "entry-gone";
      if (jobReason?.Code !== "ConditionalCheckFailed") throw error;
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
  };
}

/** The earlier version's claim, its run put and its transaction one after the other. */
const earlierVersionClaim = async (entry: DueEntry, now: Date): Promise<EarlierOutcome> =>
  (await earlierVersionClaimPut(entry, now))();

/**
 * Where an earlier version's claim puts its run beside this version's claim: before this claim's
 * run put, or after it (before this claim's commit). The later put carries its claimer's token, so
 * which claimer's failed claim could delete the run turns on it.
 */
const EARLIER_PUTS = ["before this claim's", "after this claim's"] as const;
const MIXED_ORDERS = ONE_OFF_CLAIM_WRITES.flatMap((claimWrites) =>
  EARLIER_PUTS.map((earlierPut) => [claimWrites, earlierPut] as const),
);

/**
 * A hook at this version's commit of a one-off's claim, as `claimWrites` sends it: the
 * transaction, or a plain claim's job update.
 */
const commitHook = (claimWrites: OneOffClaimWrites, before: () => Promise<void>): RequestHook =>
  claimWrites === "plain"
    ? { command: "UpdateItemCommand", when: isJobUpdate, before }
    : { command: "TransactWriteItemsCommand", before };

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
    let earlier: EarlierOutcome | undefined;
    const { result, hooked } = await withHooks(
      [
        {
          command: "DeleteItemCommand",
          when: isEntryDelete,
          before: async () => {
            earlier = await earlierVersionClaim(entry, now);
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

  it.for(MIXED_ORDERS)(
    "with oneOffClaimWrites %s, the earlier claim, its run put %s, commits between this claim's run put and its commit: this claim is lost, and the occurrence runs once",
    async ([claimWrites, earlierPut]) => {
      const now = clock();
      const due = overdue(now);
      const jobId = `mixed-earlier-first-${claimWrites}-${earlierPut.split(" ")[0]}`;
      const { entry } = await seedOne(jobId, { runAt: due.toISOString() }, due, now);
      let earlier: EarlierOutcome | undefined;
      let earlierTransaction: (() => Promise<EarlierOutcome>) | undefined;
      const hooks: RequestHook[] =
        earlierPut === "before this claim's"
          ? [
              {
                command: "PutItemCommand",
                when: isRunPut,
                before: async () => {
                  earlierTransaction = await earlierVersionClaimPut(entry, now);
                },
              },
              commitHook(claimWrites, async () => {
                earlier = await earlierTransaction?.();
              }),
            ]
          : [
              commitHook(claimWrites, async () => {
                earlier = await earlierVersionClaim(entry, now);
              }),
            ];
      const { result, hooked } = await withHooks(hooks, () =>
        claimDueEntry(engineWith(claimWrites), entry, claimOptions(now)),
      );
      expect(hooked).toBe(hooks.length);
      expect((await runsOf(jobId)).map((r) => r.status)).toEqual(["QUEUED"]);
      expect(earlier).toBe("committed");
      expect(result.outcome).toBe("lost");
      expect(await entriesOf(jobId)).toEqual([]);
      // The earlier claimer sends it; here the reaper does, at its deadline (a lease after the
      // claim, its due time being past), as after any claimer that died before its send.
      pastDeadlineOf(clock());
      expect((await reap(f.engine)).resent).toBe(1);
      expect(await runsCalled(jobId)).toEqual([[due.toISOString(), 1]]);
    },
  );

  it.for(MIXED_ORDERS)(
    "with oneOffClaimWrites %s, this claim commits between the earlier claim's run put (%s) and its transaction: the earlier claim finds the entry gone and leaves the run, which runs once",
    async ([claimWrites, earlierPut]) => {
      const now = clock();
      const due = overdue(now);
      const jobId = `mixed-this-first-${claimWrites}-${earlierPut.split(" ")[0]}`;
      const { entry } = await seedOne(jobId, { runAt: due.toISOString() }, due, now);
      let earlierTransaction: (() => Promise<EarlierOutcome>) | undefined;
      const earlierPutNow = async () => {
        earlierTransaction = await earlierVersionClaimPut(entry, now);
      };
      const hooks: RequestHook[] =
        earlierPut === "before this claim's" ? [] : [commitHook(claimWrites, earlierPutNow)];
      if (hooks.length === 0) await earlierPutNow();
      const { result, hooked } = await withHooks(hooks, () =>
        claimDueEntry(engineWith(claimWrites), entry, claimOptions(now)),
      );
      expect(hooked).toBe(hooks.length);
      const earlier = await earlierTransaction?.();

      expect(result.outcome).toBe("claimed");
      expect(earlier).toBe("entry-gone");
      expect(await entriesOf(jobId)).toEqual([]);
      // The committed claim's run (put over the earlier claim's, or under it): not deleted.
      expect((await runsOf(jobId)).map((r) => r.status)).toEqual(["QUEUED"]);
      if (result.outcome === "claimed") await sendClaimed(f.engine, result.runs);
      expect(await runsCalled(jobId)).toEqual([[due.toISOString(), 1]]);
      expect((await f.jobs()).find((j) => j.jobId === jobId)?.status).toBe("COMPLETED");
      // Nothing left for the reaper to send again, nor to run a second time.
      await expectNothingRunsPast(jobId, due);
    },
  );
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

describe("a one-off's claimer that dies after its commit, then a pause, edits of its runAt away and back while paused, and a resume", () => {
  it("the resume's entry is written over the entry left behind, and claimed: its occurrence has one run, as edited", async () => {
    const now = clock();
    // Ahead, so the entry left behind and the resume's are filed in its own minute, at one key.
    const due = new Date(now.getTime() + 30 * SECOND);
    const away = new Date(now.getTime() + 10 * 60 * SECOND);
    const { job, entry } = await seedOne("resume-back", { runAt: due.toISOString() }, due, now);
    const { result: first } = await withHooks(
      [{ command: "DeleteItemCommand", when: isEntryDelete, fail: () => new Error("died") }],
      () => claimDueEntry(f.engine, entry, claimOptions(now)),
    );
    expect(first.outcome).toBe("claimed");
    await pauseJob(f.engine, job.tenantId, job.jobId);
    await editJob(f.engine, job.tenantId, job.jobId, 1, {
      schedule: { runAt: away.toISOString() },
    });
    await editJob(f.engine, job.tenantId, job.jobId, 2, {
      schedule: { runAt: due.toISOString() },
    });

    const resumed = await resumeJob(f.engine, job.tenantId, job.jobId);

    expect([resumed.status, resumed.version]).toEqual(["ACTIVE", 3]);
    // Due inside the fast-path window, the resume's fast path claimed it: one run, at version 3.
    expect(await entriesOf("resume-back")).toEqual([]);
    expect((await runsOf("resume-back")).map((r) => [r.jobVersion, r.status])).toEqual([
      [3, "QUEUED"],
    ]);
  });
});

describe("a one-off's claimer that dies after its commit, then an edit to a schedule whose claim files its next entry at the claimed time", () => {
  it("the claim's next entry is written over the entry left behind: nothing is set aside, and the job goes on from it", async () => {
    const now = clock();
    // Every second from a whole second ahead: a claim queues 50 occurrences (its cap), and its next
    // entry is the 51st, at the one-off's claimed time.
    const start = new Date(Math.ceil(now.getTime() / SECOND) * SECOND + SECOND);
    const due = new Date(start.getTime() + 50 * SECOND);
    const { job, entry } = await seedOne("next-over", { runAt: due.toISOString() }, due, now);
    const { result: first } = await withHooks(
      [{ command: "DeleteItemCommand", when: isEntryDelete, fail: () => new Error("died") }],
      () => claimDueEntry(f.engine, entry, claimOptions(now)),
    );
    expect(first.outcome).toBe("claimed");

    const edited = await editJob(f.engine, job.tenantId, job.jobId, 1, {
      schedule: { every: "PT1S", startAt: start.toISOString() },
    });
    const pass = await dispatchShard(f.engine, 0, "pass-after-edit");

    expect(pass.outcome === "swept" ? pass.setAside : pass.outcome).toBe(0);
    expect(await listSetAsideEntries(f.engine, 0)).toEqual([]);
    // The edit's fast path claimed its first 50 occurrences and went on from its next entry, at
    // the claimed time: the job points at one entry of its version, and every occurrence from the
    // start up to it has one run at version 2, the one-off's run replaced by the same occurrence's.
    const job2 = await getTenantJob(f.engine, job.tenantId, job.jobId);
    expect(edited.version).toBe(2);
    expect(
      (await entriesOf("next-over")).map((e) => [e.key, e.scheduledFor, e.jobVersion]),
    ).toEqual([[job2.nextDueKey, job2.nextRunAt, 2]]);
    const runs = await runsOf("next-over");
    expect(runs.every((r) => r.jobVersion === 2 && r.status === "QUEUED")).toBe(true);
    const upTo = Date.parse(job2.nextRunAt ?? "");
    expect(upTo).toBeGreaterThan(due.getTime());
    expect(runs.map((r) => r.scheduledFor)).toEqual(
      Array.from({ length: (upTo - start.getTime()) / SECOND }, (_, i) =>
        new Date(start.getTime() + i * SECOND).toISOString(),
      ),
    );
  });
});

describe("a one-off's claimer that dies after its commit, then a lifecycle change that files no entry at its key", () => {
  it("a pause and a resume: the resume files nothing (its run is queued); the next pass is lost and removes the entry; the run runs once", async () => {
    const now = clock();
    const due = overdue(now);
    const { job, entry } = await seedOne("died-resumed", { runAt: due.toISOString() }, due, now);
    const { result: first } = await withHooks(
      [{ command: "DeleteItemCommand", when: isEntryDelete, fail: () => new Error("died") }],
      () => claimDueEntry(f.engine, entry, claimOptions(now)),
    );
    expect(first.outcome).toBe("claimed");
    await pauseJob(f.engine, job.tenantId, job.jobId);

    const resumed = await resumeJob(f.engine, job.tenantId, job.jobId);

    expect([resumed.status, resumed.nextRunAt, resumed.nextDueKey]).toEqual(["ACTIVE", null, null]);
    expect(await entriesOf("died-resumed")).toEqual([entry]);
    expect((await claimDueEntry(f.engine, entry, claimOptions(clock()))).outcome).toBe("lost");
    expect(await entriesOf("died-resumed")).toEqual([]);
    pastDeadlineOf(clock());
    expect((await reap(f.engine)).resent).toBe(1);
    expect(await runsCalled("died-resumed")).toEqual([[due.toISOString(), 1]]);
  });

  it("a trigger: its run and the occurrence's each run once, and the next pass removes the entry", async () => {
    const now = clock();
    const due = overdue(now);
    const { job, entry } = await seedOne("died-triggered", { runAt: due.toISOString() }, due, now);
    const { result: first } = await withHooks(
      [{ command: "DeleteItemCommand", when: isEntryDelete, fail: () => new Error("died") }],
      () => claimDueEntry(f.engine, entry, claimOptions(now)),
    );
    expect(first.outcome).toBe("claimed");

    const triggered = await triggerJob(f.engine, job.tenantId, job.jobId);

    expect(triggered.status).toBe("QUEUED");
    expect((await claimDueEntry(f.engine, entry, claimOptions(clock()))).outcome).toBe("lost");
    expect(await entriesOf("died-triggered")).toEqual([]);
    // The trigger sent its run; the reaper sends the occurrence's, which the dead claimer did not.
    const calls = new Map<string, number>();
    await deliverAll("died-triggered", calls);
    pastDeadlineOf(clock());
    expect((await reap(f.engine)).resent).toBe(1);
    await deliverAll("died-triggered", calls);
    expect(new Map(calls)).toEqual(
      new Map([
        [due.toISOString(), 1],
        [triggered.scheduledFor, 1],
      ]),
    );
  });

  it("a pause that cancels its running run, and a resume: its next attempt is filed at another key and runs once; the next pass removes the entry", async () => {
    const now = clock();
    const due = overdue(now);
    const { job, entry } = await seedOne("died-rerun", { runAt: due.toISOString() }, due, now);
    const { result: first } = await withHooks(
      [{ command: "DeleteItemCommand", when: isEntryDelete, fail: () => new Error("died") }],
      () => claimDueEntry(f.engine, entry, claimOptions(now)),
    );
    expect(first.outcome).toBe("claimed");
    const [queued] = await runsOf("died-rerun");
    if (!queued) throw new Error("the claim queued no run");
    expect((await startRun(f.engine, queued, "worker-a", clock())).kind).toBe("started");
    await pauseJob(f.engine, job.tenantId, job.jobId, { running: "cancel" });

    const resumed = await resumeJob(f.engine, job.tenantId, job.jobId);

    expect(resumed.status).toBe("ACTIVE");
    // Its fast path claimed attempt 2 (another key); the entry left behind is attempt 1's. That
    // claim recorded its own entry on the job, so the next pass finds attempt 1's run handled and
    // no claim of its entry recorded: an orphan, removed (stale), and no run of it deleted.
    expect(await entriesOf("died-rerun")).toEqual([entry]);
    expect((await claimDueEntry(f.engine, entry, claimOptions(clock()))).outcome).toBe("stale");
    expect(await entriesOf("died-rerun")).toEqual([]);
    expect(
      (await runsOf("died-rerun")).map((r) => [r.attempt, r.status, r.cancelledBy ?? null]),
    ).toEqual([
      [1, "RUNNING", "pause"],
      [2, "QUEUED", null],
    ]);
    await expectRunsOnceCancelledEnded("died-rerun", due, 2);
  });
});
