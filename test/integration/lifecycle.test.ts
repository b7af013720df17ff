import { DeleteCommand, PutCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { offsetClock } from "../../shared/clock.js";
import { IllegalTransitionError, VersionMismatchError } from "../../shared/errors.js";
import { cancelJob, createJob, editJob, pauseJob, resumeJob } from "../../shared/jobs/index.js";
import { getTenantJob } from "../../shared/jobs/queries.js";
import type { DueEntry } from "../../shared/model.js";
import { dueEntryKey } from "../../shared/storage/due-entries.js";
import { encodeDueEntry, encodeJob } from "../../shared/storage/items.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { seedJobs } from "../support/seed.js";

const MINUTE = 60_000;
const TENANT = "tenant-a";

describe("job lifecycle", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  it("pause removes the pending due entry; resume after a while applies the misfire policy", async () => {
    const now = new Date();
    const pending = new Date(Math.ceil((now.getTime() + 10 * MINUTE) / MINUTE) * MINUTE);
    const [job] = await seedJobs(
      f,
      [{ jobId: "paused1", schedule: { cron: "* * * * *", timezone: "UTC" }, dueAt: pending }],
      now,
    );
    if (!job) throw new Error("seed failed");
    const paused = await pauseJob(f.engine, TENANT, job.jobId);
    expect(paused.status).toBe("PAUSED");
    expect((await f.dueEntries()).filter((d) => d.jobId === job.jobId)).toEqual([]);
    expect(await pauseJob(f.engine, TENANT, job.jobId)).toMatchObject({ status: "PAUSED" });

    // Resumed 14 minutes on: the pending occurrence and the three after it are past the grace.
    const later = {
      ...f.engine,
      clock: offsetClock(pending.getTime() + 4 * MINUTE - Date.now() + 30_000),
    };
    const resumed = await resumeJob(later, TENANT, job.jobId);
    expect(resumed.status).toBe("ACTIVE");
    const runs = (await f.runs()).filter((r) => r.jobId === job.jobId);
    const missed = runs.filter((r) => Date.parse(r.scheduledFor) < pending.getTime() + 4 * MINUTE);
    // fire_once (the default): the latest missed occurrence runs, the three before it are SKIPPED.
    expect(missed.map((r) => [r.scheduledFor, r.status]).sort()).toEqual([
      [new Date(pending.getTime()).toISOString(), "SKIPPED"],
      [new Date(pending.getTime() + MINUTE).toISOString(), "SKIPPED"],
      [new Date(pending.getTime() + 2 * MINUTE).toISOString(), "SKIPPED"],
      [new Date(pending.getTime() + 3 * MINUTE).toISOString(), "QUEUED"],
    ]);
    const entries = (await f.dueEntries()).filter((d) => d.jobId === job.jobId);
    expect(entries).toHaveLength(1);
    expect((await getTenantJob(f.engine, TENANT, job.jobId)).nextRunAt).toBe(
      entries[0]?.scheduledFor,
    );
  });

  it("cancel stops future runs and marks queued ones CANCELLED", async () => {
    const { job } = await createJob(f.engine, testJob({ schedule: { every: "PT30S" } }));
    const queuedBefore = (await f.runs()).filter(
      (r) => r.jobId === job.jobId && r.status === "QUEUED",
    );
    expect(queuedBefore.length).toBeGreaterThan(5);
    const cancelled = await cancelJob(f.engine, TENANT, job.jobId);
    expect(cancelled).toMatchObject({ status: "CANCELLED", nextRunAt: null });
    const runs = (await f.runs()).filter((r) => r.jobId === job.jobId);
    expect(runs.every((r) => r.status === "CANCELLED" && r.reason === "job cancelled")).toBe(true);
    expect(runs).toHaveLength(queuedBefore.length);
    expect((await f.dueEntries()).filter((d) => d.jobId === job.jobId)).toEqual([]);
    await expect(resumeJob(f.engine, TENANT, job.jobId)).rejects.toBeInstanceOf(
      IllegalTransitionError,
    );
  });

  it("an edit planned from a version another edit moved on before its write is refused, and the other edit stands", async () => {
    const runAt = new Date(Date.now() + 60 * MINUTE).toISOString();
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { runAt }, payload: { by: "create" } }),
    );
    // Both edits read version 1; the first commits between the second's read and its write.
    const name = "editBetweenReadAndWrite";
    let interleaved = 0;
    f.engine.doc.middlewareStack.add(
      (next, context) => async (args) => {
        const writes = context.commandName?.startsWith("TransactWriteItems") === true;
        if (writes && interleaved === 0) {
          interleaved++;
          await editJob(f.engine, TENANT, job.jobId, 1, { payload: { by: "first" } });
        }
        return next(args);
      },
      { step: "initialize", name },
    );
    try {
      await expect(
        editJob(f.engine, TENANT, job.jobId, 1, { payload: { by: "second" } }),
      ).rejects.toBeInstanceOf(VersionMismatchError);
    } finally {
      f.engine.doc.middlewareStack.remove(name);
    }
    expect(interleaved).toBe(1);
    expect(await getTenantJob(f.engine, TENANT, job.jobId)).toMatchObject({
      version: 2,
      payload: { by: "first" },
    });
  });

  it("an edit that a claim of its pending entry overtook before its write plans again: the job's one due entry is the one it points at", async () => {
    const now = new Date();
    const due = new Date((Math.floor(now.getTime() / MINUTE) + 2) * MINUTE + 10_000);
    const [job] = await seedJobs(
      f,
      [
        {
          jobId: "edit-overtaken",
          schedule: { every: "PT10S", startAt: due.toISOString() },
          dueAt: due,
        },
      ],
      now,
    );
    if (!job) throw new Error("seed failed");
    const [pending] = (await f.dueEntries()).filter((d) => d.jobId === job.jobId);
    if (!pending) throw new Error("no due entry");
    // What a claim's commit does to the job: its entry deleted, the next one put (here in the same
    // minute's bucket, as a schedule of seconds files it) and the job pointed at that one.
    const nextAt = new Date(due.getTime() + 10_000);
    const next: DueEntry = {
      ...pending,
      key: dueEntryKey(job.jobId, nextAt, 1, now, f.engine.settings.shardCount),
      dueAt: nextAt.toISOString(),
      scheduledFor: nextAt.toISOString(),
    };
    expect(next.key.pk).toBe(pending.key.pk);
    const table = f.engine.tables.jobs;
    const name = "claimBetweenEditReadAndWrite";
    let interleaved = 0;
    f.engine.doc.middlewareStack.add(
      (send, context) => async (args) => {
        const writes = context.commandName?.startsWith("TransactWriteItems") === true;
        if (writes && interleaved === 0) {
          interleaved++;
          await f.engine.doc.send(new DeleteCommand({ TableName: table, Key: pending.key }));
          await f.engine.doc.send(new PutCommand({ TableName: table, Item: encodeDueEntry(next) }));
          await f.engine.doc.send(
            new PutCommand({
              TableName: table,
              Item: encodeJob({ ...job, nextDueKey: next.key, nextRunAt: next.scheduledFor }),
            }),
          );
        }
        return send(args);
      },
      { step: "initialize", name },
    );
    let edited: Awaited<ReturnType<typeof editJob>>;
    try {
      edited = await editJob(f.engine, TENANT, job.jobId, 1, { payload: { v: 2 } });
    } finally {
      f.engine.doc.middlewareStack.remove(name);
    }
    expect(interleaved).toBe(1);
    expect(edited.version).toBe(2);
    // The edit planned again from the job as the claim left it: the entry it filed is the job's
    // only one, and the one the job points at. Nothing is left at the claim's key.
    const entries = (await f.dueEntries()).filter((d) => d.jobId === job.jobId);
    expect(entries.map((d) => [d.key, d.jobVersion])).toEqual([[edited.nextDueKey, 2]]);
  });

  it("an edit bumps the version and moves the due entry; queued runs the new schedule lacks are SKIPPED", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({ type: "noop", schedule: { every: "PT10S" } }),
    );
    const oldEntry = (await f.dueEntries()).find((d) => d.jobId === job.jobId);
    await expect(
      editJob(f.engine, TENANT, job.jobId, 7, { payload: { v: 2 } }),
    ).rejects.toBeInstanceOf(VersionMismatchError);
    const edited = await editJob(f.engine, TENANT, job.jobId, 1, {
      schedule: {
        every: "PT1H",
        startAt: new Date(Date.parse(job.nextRunAt ?? "") + 3_600_000).toISOString(),
      },
      payload: { v: 2 },
    });
    expect(edited.version).toBe(2);
    expect(edited.payload).toEqual({ v: 2 });
    const entries = (await f.dueEntries()).filter((d) => d.jobId === job.jobId);
    expect(entries).toHaveLength(1);
    expect(entries[0]?.key).not.toEqual(oldEntry?.key);
    expect(entries[0]).toMatchObject({ jobVersion: 2, schedule: { every: "PT1H" } });
    expect(edited.nextRunAt).toBe(entries[0]?.scheduledFor);

    // The first claimed run (due within seconds) carries version 1, and the new schedule does not have it.
    const received = await f.nextDelivery(f.engine.queues.normal, job.jobId, 15_000);
    expect(received.message.jobVersion).toBe(1);
    await f.process(f.workerDeps("w"), received);
    const run = (await f.runs()).find(
      (r) => r.jobId === job.jobId && r.scheduledFor === received.message.scheduledFor,
    );
    expect(run).toMatchObject({
      status: "SKIPPED",
      reason: `job edited (version 1 → 2): ${received.message.scheduledFor} is not an occurrence of its new schedule`,
    });
  }, 30_000);
});
