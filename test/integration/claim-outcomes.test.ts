import { PutCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { claimDueEntry } from "../../shared/dispatch/claim.js";
import { dispatchShard, type PassResult } from "../../shared/dispatch/dispatcher.js";
import type { DueEntry, Job } from "../../shared/model.js";
import { METRICS } from "../../shared/observability.js";
import { dueEntryKey } from "../../shared/storage/due-entries.js";
import { encodeDueEntry, encodeJob } from "../../shared/storage/items.js";
import { requeueRun } from "../../shared/storage/run-requeue.js";
import { startRun } from "../../shared/storage/run-start.js";
import { listSetAsideEntries } from "../../shared/storage/set-aside.js";
import { createEngineFixture, type EngineFixture } from "../support/engine-fixture.js";
import { seedJobs } from "../support/seed.js";

/**
 * What a claim does when one of its transaction's conditions fails, for the
 * conditions no other suite fails on its own: the job no longer pointing at
 * the entry (an orphan), an orphan rewritten while it is removed, and a next
 * entry whose key is taken.
 */

const SECOND = 1000;
const MINUTE = 60 * SECOND;

function swept(pass: PassResult) {
  if (pass.outcome !== "swept") throw new Error(`pass ended ${pass.outcome}`);
  return pass;
}

describe("a claim whose transaction fails a condition", () => {
  let f: EngineFixture;
  const time = { ms: Math.floor(Date.now() / MINUTE) * MINUTE + 30 * SECOND };
  beforeAll(async () => {
    f = await createEngineFixture({
      settings: { shardCount: 1, maxShardCount: 1 },
      clock: () => new Date(time.ms),
    });
  });
  afterAll(() => f.destroy());

  const putJob = (job: Job) =>
    f.engine.doc.send(new PutCommand({ TableName: f.engine.tables.jobs, Item: encodeJob(job) }));
  const putEntry = (entry: DueEntry) =>
    f.engine.doc.send(
      new PutCommand({ TableName: f.engine.tables.jobs, Item: encodeDueEntry(entry) }),
    );
  const entryOf = async (jobId: string) => {
    const [entry] = (await f.dueEntries()).filter((d) => d.jobId === jobId);
    if (!entry) throw new Error(`no due entry for ${jobId}`);
    return entry;
  };
  /** The job's pointer moved elsewhere (as a pause and an edit leave it): its entry is an orphan. */
  const elsewhere = (job: Job): Job => ({
    ...job,
    nextDueKey: { pk: job.nextDueKey?.pk ?? "", sk: "elsewhere" },
  });

  it("an entry its job no longer points at is removed and counted as stale; nothing runs", async () => {
    const now = new Date(time.ms);
    const due = new Date(now.getTime() - 10 * SECOND);
    const [job] = await seedJobs(
      f,
      [{ jobId: "orphaned", schedule: { runAt: due.toISOString() }, dueAt: due }],
      now,
    );
    if (!job) throw new Error("not seeded");
    await putJob(elsewhere(job));
    const stale = f.metrics.sum(METRICS.staleDueEntries);

    const result = await claimDueEntry(f.engine, await entryOf("orphaned"), {
      now,
      horizonEnd: new Date(now.getTime() + MINUTE),
    });

    expect(result.outcome).toBe("stale");
    expect((await f.dueEntries()).filter((d) => d.jobId === "orphaned")).toEqual([]);
    expect((await f.runs()).filter((r) => r.jobId === "orphaned")).toEqual([]);
    expect(f.metrics.sum(METRICS.staleDueEntries)).toBe(stale + 1);
  });

  it("an orphan rewritten while it is removed (its job points at it again) is claimed as it is now", async () => {
    const now = new Date(time.ms);
    const due = new Date(now.getTime() - 10 * SECOND);
    const [job] = await seedJobs(
      f,
      [{ jobId: "rewritten", schedule: { runAt: due.toISOString() }, dueAt: due }],
      now,
    );
    if (!job) throw new Error("not seeded");
    const read = await entryOf("rewritten");
    await putJob(elsewhere(job));
    // Between the failed claim and the orphan's removal, an edit rewrites the entry under the same
    // key at version 2 and points the job at it again.
    const name = "rewriteBeforeOrphanDelete";
    let rewrites = 0;
    f.engine.doc.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName?.startsWith("DeleteItem") && rewrites === 0) {
          rewrites++;
          await putEntry({ ...read, jobVersion: 2, priority: "high" });
          await putJob({ ...job, version: 2, priority: "high" });
        }
        return next(args);
      },
      { step: "initialize", name },
    );
    let result: Awaited<ReturnType<typeof claimDueEntry>>;
    try {
      result = await claimDueEntry(f.engine, read, {
        now,
        horizonEnd: new Date(now.getTime() + MINUTE),
      });
    } finally {
      f.engine.doc.middlewareStack.remove(name);
    }

    expect(rewrites).toBe(1);
    expect(result.outcome).toBe("claimed");
    const runs = (await f.runs()).filter((r) => r.jobId === "rewritten");
    expect(runs.map((r) => [r.scheduledFor, r.status, r.jobVersion, r.priority])).toEqual([
      [due.toISOString(), "QUEUED", 2, "high"],
    ]);
    expect((await f.dueEntries()).filter((d) => d.jobId === "rewritten")).toEqual([]);
  });

  it("a claimer that lost the entry leaves alone the run the winner queued, started and put back to wait", async () => {
    const now = new Date(time.ms);
    const due = new Date(now.getTime() - 10 * SECOND);
    await seedJobs(
      f,
      [
        {
          jobId: "waits-after-claim",
          schedule: { every: "PT1H", startAt: due.toISOString() },
          dueAt: due,
        },
      ],
      now,
    );
    const read = await entryOf("waits-after-claim");
    const options = { now, horizonEnd: new Date(now.getTime() + MINUTE) };
    expect((await claimDueEntry(f.engine, read, options)).outcome).toBe("claimed");
    const [queued] = (await f.runs()).filter((r) => r.jobId === "waits-after-claim");
    if (!queued) throw new Error("the claim queued no run");
    const started = await startRun(f.engine, queued, "worker-a", now);
    if (started.kind !== "started") throw new Error(`not started: ${started.kind}`);
    // Its overlap made it wait: QUEUED again, under the fence its start took.
    await requeueRun(
      f.engine,
      started.run,
      "waits for the run ahead",
      new Date(now.getTime() + SECOND),
    );

    // A claimer that read the same entry before the winner deleted it puts its runs now.
    expect((await claimDueEntry(f.engine, read, options)).outcome).toBe("lost");

    const runs = (await f.runs()).filter((r) => r.jobId === "waits-after-claim");
    expect(runs.map((r) => [r.runId, r.status, r.fence, r.workerId, r.reason])).toEqual([
      [queued.runId, "QUEUED", started.run.fence, "worker-a", "waits for the run ahead"],
    ]);
  });

  it("a next entry whose key is taken fails the claim: the entry is set aside, the others are claimed", async () => {
    time.ms += 10 * MINUTE;
    const now = new Date(time.ms);
    const due = new Date(now.getTime() - 10 * SECOND);
    const next = new Date(due.getTime() + 60 * MINUTE);
    await seedJobs(
      f,
      [
        {
          jobId: "taken-next",
          schedule: { every: "PT1H", startAt: due.toISOString() },
          dueAt: due,
        },
        { jobId: "beside-taken", schedule: { runAt: due.toISOString() }, dueAt: due },
      ],
      now,
    );
    const claimed = await entryOf("taken-next");
    // A leftover already sits where the claim puts the job's next entry.
    const leftover: DueEntry = {
      ...claimed,
      key: dueEntryKey("taken-next", next, 1, now, f.engine.settings.shardCount),
      dueAt: next.toISOString(),
      scheduledFor: next.toISOString(),
    };
    await putEntry(leftover);

    const pass = swept(await dispatchShard(f.engine, 0, "pass-taken"));

    expect([pass.setAside, pass.failed]).toEqual([1, 0]);
    const aside = await listSetAsideEntries(f.engine, 0);
    expect(aside.filter((a) => a.entry.jobId === "taken-next").map((a) => a.entry.key)).toEqual([
      claimed.key,
    ]);
    const runs = await f.runs();
    expect(runs.filter((r) => r.jobId === "taken-next")).toEqual([]);
    expect(runs.filter((r) => r.jobId === "beside-taken").map((r) => r.status)).toEqual(["QUEUED"]);
    // The job still points at the entry it had: nothing of the failed claim was written.
    const job = (await f.jobs()).find((j) => j.jobId === "taken-next");
    expect(job?.nextDueKey).toEqual(claimed.key);
  });
});
