import { UpdateCommand } from "@aws-sdk/lib-dynamodb";
import { describe, expect, it, type TestContext } from "vitest";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import type { Engine } from "../../shared/engine.js";
import { shardLeaseKey } from "../../shared/storage/items.js";
import { acquireShardLease, releaseShardLease } from "../../shared/storage/lease.js";
import { oneShardJob, skewed } from "../support/one-shard-job.js";

/**
 * `lateLeft` is trusted only beside the release that wrote it (`leaseUntil` equal to it): a pass of
 * the code before it (a deploy under way, a rollback) and a pass that fails (releaseShardLease) end
 * with leaseUntil = now, so a pass whose clock is ahead after one of those doubts its clock again
 * and leaves an occurrence still in the real future for the next pass. The control: the same
 * sequence with a new-code pass in between leaves it too.
 */
const MINUTE = 60_000;

/** A pass of the code before b22e3c6 on the right clock that claims nothing: its endPass write. */
async function oldCodePass(engine: Engine, shard: number): Promise<void> {
  const now = engine.clock();
  const lease = await acquireShardLease(engine, shard, "old-code", now);
  if (lease === null) throw new Error("lease held");
  await engine.doc.send(
    new UpdateCommand({
      TableName: engine.tables.jobs,
      Key: shardLeaseKey(shard),
      ConditionExpression: "fence = :fence AND #owner = :owner",
      UpdateExpression:
        "SET watermark = :minute, sweepFrom = :sweepFrom, leaseUntil = :now, released = :true " +
        "REMOVE scanFrom, scanBefore, scanLeftFrom",
      ExpressionAttributeNames: { "#owner": "owner" },
      ExpressionAttributeValues: {
        ":minute": lease.watermark,
        ":sweepFrom": lease.sweepFrom,
        ":now": engine.clock().toISOString(),
        ":true": true,
        ":fence": lease.fence,
        ":owner": lease.owner,
      },
    }),
  );
}

/** A new-code pass on the right clock that fails after taking the lease: its release. */
async function failedPass(engine: Engine, shard: number): Promise<void> {
  const lease = await acquireShardLease(engine, shard, "failing", engine.clock());
  if (lease === null) throw new Error("lease held");
  await releaseShardLease(engine, lease, engine.clock());
}

async function skippedAfter(
  between: ((engine: Engine, shard: number) => Promise<unknown>) | null,
  onTestFinished: TestContext["onTestFinished"],
) {
  // An hourly skip job due in 8.5 minutes: past a right pass's horizon (5 minutes).
  const startAt = new Date(Math.ceil((Date.now() + 8.5 * MINUTE) / 1000) * 1000);
  const { f, job, shard } = await oneShardJob(
    onTestFinished,
    { every: "PT1H", startAt: startAt.toISOString() },
    "skip",
  );
  await dispatchShard(f.engine, shard, "right");
  // A host 10 minutes ahead: in doubt, it leaves the entry (lateLeft recorded).
  const ahead = await dispatchShard(skewed(f.engine, 10 * MINUTE), shard, "ahead-1");
  expect(ahead).toMatchObject({ outcome: "swept", lateLeft: 1 });
  // A pass on the right clock between.
  if (between === null) await dispatchShard(f.engine, shard, "right-new");
  else await between(f.engine, shard);
  // The host 10 minutes ahead again: it reads 10 minutes past the last pass's time.
  await dispatchShard(skewed(f.engine, 10 * MINUTE), shard, "ahead-2");
  return (await f.runs())
    .filter((run) => run.jobId === job.jobId && run.status === "SKIPPED")
    .map((run) => run.scheduledFor);
}

describe.concurrent("a pass 10 minutes ahead after a right pass that follows one that left entries", () => {
  it("leaves the occurrence in the real future when the pass between is the new code's (control)", async ({
    onTestFinished,
  }) => {
    expect(await skippedAfter(null, onTestFinished)).toEqual([]);
  }, 60_000);

  it("leaves the occurrence in the real future when the pass between is the old code's (deploy skew)", async ({
    onTestFinished,
  }) => {
    expect(await skippedAfter(oldCodePass, onTestFinished)).toEqual([]);
  }, 60_000);

  it("leaves the occurrence in the real future when the pass between failed (released)", async ({
    onTestFinished,
  }) => {
    expect(await skippedAfter(failedPass, onTestFinished)).toEqual([]);
  }, 60_000);
});
