import { PutCommand, UpdateCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConcurrentUpdateError } from "../../shared/errors.js";
import { createJob, deleteJob, editJob, replayDeadLetter } from "../../shared/jobs/index.js";
import type { Job } from "../../shared/model.js";
import { REPLAY_TRIES } from "../../shared/storage/dead-letter-replay.js";
import { deadLetterPk, jobKey, ONE_OFF_BELOW_MOST } from "../../shared/storage/items.js";
import { getJob, getRun } from "../../shared/storage/run-reads.js";
import { startRun } from "../../shared/storage/run-start.js";
import {
  createEngineFixture,
  type EngineFixture,
  firstAttemptAt,
  testJob,
} from "../support/engine-fixture.js";
import { runEndings } from "../support/held-runs.js";

/**
 * Attacks on a one-off's floor (`oneOffFrom`): a pause with running: "cancel", a job cancel and a
 * delete read the one-off's runs from its floor on, so a run of it that can still run below the
 * floor is one they miss: it runs on after its job was cancelled or deleted.
 */

const HOUR_MS = 3_600_000;

let f: EngineFixture;
beforeAll(async () => {
  f = await createEngineFixture();
});
afterAll(() => f.destroy());

/** A dead run of the job's occurrence at `at`, written straight into the table. */
async function deadRunAt(job: Job, at: Date): Promise<string> {
  const { run, item } = firstAttemptAt(f.engine, job, at);
  const finishedAt = new Date(at.getTime() + 1000).toISOString();
  await f.engine.doc.send(
    new PutCommand({
      TableName: f.engine.tables.runs,
      Item: {
        ...item,
        status: "DEAD",
        finishedAt,
        error: "handler failed",
        deadPk: deadLetterPk(job.tenantId),
        deadSk: `${finishedAt}#${run.runId}`,
      },
    }),
  );
  return run.runId;
}

/**
 * A recurring job whose runs of two and three hours ago died, then edited into a one-off an hour
 * ahead: its floor is the time of that edit, after both.
 */
async function oneOffWithDeadLettersFromBefore() {
  const { job } = await createJob(f.engine, testJob());
  const now = f.engine.clock().getTime();
  const twoHoursAgo = new Date(now - 2 * HOUR_MS);
  const threeHoursAgo = new Date(now - 3 * HOUR_MS);
  const deadRunId = await deadRunAt(job, twoHoursAgo);
  const olderDeadRunId = await deadRunAt(job, threeHoursAgo);
  const runAt = new Date(now + HOUR_MS).toISOString();
  const edited = await editJob(f.engine, job.tenantId, job.jobId, job.version, {
    schedule: { runAt },
  });
  return { job: edited, deadRunId, olderDeadRunId, threeHoursAgo };
}

/** Runs `change` once, just before the first request `matches` names goes out. */
function beforeRequest(
  matches: (command: string, input: string) => boolean,
  change: () => Promise<unknown>,
) {
  const name = "changeBeforeRequest";
  let ran = false;
  f.engine.doc.middlewareStack.add(
    (next, context) => async (args) => {
      if (!ran && matches(context.commandName ?? "", JSON.stringify(args.input))) {
        ran = true;
        await change();
      }
      return next(args);
    },
    { step: "initialize", name },
  );
  return { ran: () => ran, remove: () => f.engine.doc.middlewareStack.remove(name) };
}

/** A replay of `deadRunId`, started by a worker: RUNNING under a live lease. */
async function replayRunning(tenantId: string, deadRunId: string) {
  const { run } = await replayDeadLetter(f.engine, tenantId, deadRunId);
  expect((await startRun(f.engine, run, "worker-a", f.engine.clock())).kind).toBe("started");
  return run;
}

const ENDINGS = runEndings(() => f.engine);

describe("a replay of a dead run from before its job became a one-off", () => {
  it.each(ENDINGS)(
    "running: %s asks it to cancel",
    async (_, end) => {
      const { job, deadRunId } = await oneOffWithDeadLettersFromBefore();
      const replay = await replayRunning(job.tenantId, deadRunId);
      await end(job);
      expect((await getRun(f.engine, replay))?.cancelRequestedAt ?? null).not.toBeNull();
    },
    30_000,
  );

  it.each(ENDINGS)(
    "made and started between the read and the write of %s: asked to cancel",
    async (_, end) => {
      const { job, deadRunId } = await oneOffWithDeadLettersFromBefore();
      let replayId = "";
      // The job's ending write (a transaction, or the delete's mark of a completed job) is the
      // first to the jobs table naming its status as read; the replay lands just before it.
      const hook = beforeRequest(
        (command, input) =>
          (command === "TransactWriteItemsCommand" || command === "UpdateItemCommand") &&
          input.includes(":seenStatus"),
        async () => {
          replayId = (await replayRunning(job.tenantId, deadRunId)).runId;
        },
      );
      try {
        await end(job);
      } finally {
        hook.remove();
      }
      expect(hook.ran()).toBe(true);
      const replay = (await f.runs()).find((r) => r.runId === replayId);
      expect(replay?.cancelRequestedAt ?? null).not.toBeNull();
    },
    30_000,
  );

  it("made and started between the read and the mark of a completed one-off's delete: asked to cancel", async () => {
    const { job, deadRunId } = await oneOffWithDeadLettersFromBefore();
    // Completed (its own occurrence ran), written straight into the table.
    await f.engine.doc.send(
      new UpdateCommand({
        TableName: f.engine.tables.jobs,
        Key: jobKey(job.jobId),
        UpdateExpression: "SET #status = :completed, nextRunAt = :null, nextDueKey = :null",
        ExpressionAttributeNames: { "#status": "status" },
        ExpressionAttributeValues: { ":completed": "COMPLETED", ":null": null },
      }),
    );
    let replayId = "";
    const hook = beforeRequest(
      (command, input) => command === "UpdateItemCommand" && input.includes("deleteRequestedAt"),
      async () => {
        replayId = (await replayRunning(job.tenantId, deadRunId)).runId;
      },
    );
    try {
      await deleteJob(f.engine, job.tenantId, job.jobId);
    } finally {
      hook.remove();
    }
    expect(hook.ran()).toBe(true);
    const replay = (await f.runs()).find((r) => r.runId === replayId);
    expect(replay?.cancelRequestedAt ?? null).not.toBeNull();
  }, 30_000);

  it("replayed while a replay of an older one is kept below the floor: both replayed, both kept", async () => {
    const { job, deadRunId, olderDeadRunId, threeHoursAgo } =
      await oneOffWithDeadLettersFromBefore();
    const hook = beforeRequest(
      (command, input) => command === "TransactWriteItemsCommand" && input.includes(deadRunId),
      () => replayDeadLetter(f.engine, job.tenantId, olderDeadRunId),
    );
    try {
      await replayDeadLetter(f.engine, job.tenantId, deadRunId);
    } finally {
      hook.remove();
    }
    expect(hook.ran()).toBe(true);
    const replayed = (await f.runs()).filter((r) => r.jobId === job.jobId && r.attempt === 2);
    expect(replayed).toHaveLength(2);
    // Both occurrences kept on the job, each read on its own; its floor left where the edit put it.
    const after = await getJob(f.engine, job.jobId);
    expect(new Set(after?.oneOffBelow)).toEqual(new Set(replayed.map((r) => r.scheduledFor)));
    expect(after?.oneOffBelow).toContain(threeHoursAgo.toISOString());
    expect(after?.oneOffFrom).toBe(job.oneOffFrom);
  }, 30_000);
});

describe("a replay whose job's floor keeps changing under it", () => {
  it("gives up after a few tries, answering a concurrent update and writing nothing", async () => {
    const { job, deadRunId } = await oneOffWithDeadLettersFromBefore();
    // Before each of the replay's transactions, another writer keeps one more occurrence below
    // the floor (as a replay of another dead run would): the replay's condition on the
    // occurrences it read fails every time, up to CHANGES times.
    const CHANGES = 6;
    let changes = 0;
    const name = "keepsChangingTheFloor";
    f.engine.doc.middlewareStack.add(
      (next, context) => async (args) => {
        if (
          changes < CHANGES &&
          context.commandName === "TransactWriteItemsCommand" &&
          JSON.stringify(args.input).includes(deadRunId)
        ) {
          changes += 1;
          const kept = new Date(f.engine.clock().getTime() - 5 * HOUR_MS + changes * 60_000);
          await f.engine.doc.send(
            new UpdateCommand({
              TableName: f.engine.tables.jobs,
              Key: jobKey(job.jobId),
              UpdateExpression:
                "SET oneOffBelow = list_append(if_not_exists(oneOffBelow, :none), :kept)",
              ExpressionAttributeValues: { ":none": [], ":kept": [kept.toISOString()] },
            }),
          );
        }
        return next(args);
      },
      { step: "initialize", name },
    );
    const replayed = replayDeadLetter(f.engine, job.tenantId, deadRunId).finally(() =>
      f.engine.doc.middlewareStack.remove(name),
    );
    await expect(replayed).rejects.toBeInstanceOf(ConcurrentUpdateError);
    expect(changes).toBe(REPLAY_TRIES);
    const dead = (await f.runs()).find((r) => r.runId === deadRunId);
    expect(dead?.status).toBe("DEAD");
    expect(dead?.replayedBy ?? null).toBeNull();
    expect((await f.runs()).filter((r) => r.jobId === job.jobId && r.attempt === 2)).toEqual([]);
  }, 30_000);
});

describe("replays below the floor past the occurrences a one-off keeps (ONE_OFF_BELOW_MOST)", () => {
  it.each(ENDINGS)(
    "each running: %s asks every one to cancel",
    async (_, end) => {
      const { job } = await createJob(f.engine, testJob());
      const now = f.engine.clock().getTime();
      // Oldest first: the last, past those kept, lowers the floor above the ones kept.
      const times = Array.from(
        { length: ONE_OFF_BELOW_MOST + 1 },
        (_, i) => new Date(now - 3 * HOUR_MS + i * 60_000),
      );
      const deadRunIds: string[] = [];
      for (const at of times) deadRunIds.push(await deadRunAt(job, at));
      const oneOff = await editJob(f.engine, job.tenantId, job.jobId, job.version, {
        schedule: { runAt: new Date(now + HOUR_MS).toISOString() },
      });
      const replays = [];
      for (const deadRunId of deadRunIds)
        replays.push(await replayRunning(job.tenantId, deadRunId));
      const lowered = await getJob(f.engine, job.jobId);
      expect(lowered?.oneOffBelow).toEqual(times.slice(0, -1).map((at) => at.toISOString()));
      expect(lowered?.oneOffFrom).toBe(times.at(-1)?.toISOString());
      await end(oneOff);
      for (const replay of replays)
        expect((await getRun(f.engine, replay))?.cancelRequestedAt ?? null).not.toBeNull();
    },
    30_000,
  );
});
