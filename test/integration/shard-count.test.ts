import { DeleteCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { offsetClock } from "../../shared/clock.js";
import { REAPER_SETTLE_MS, reap } from "../../shared/dispatch/reaper.js";
import { tickOnce } from "../../shared/dispatch/tick.js";
import { readTickShards, shardOfDispatcherEvent } from "../../shared/dispatch/tick-shards.js";
import type { Engine } from "../../shared/engine.js";
import { createJob } from "../../shared/jobs/index.js";
import { shardOf } from "../../shared/keys.js";
import type { ScheduleSpec } from "../../shared/schedule/types.js";
import { shardHighWaterKey } from "../../shared/storage/items.js";
import { readShardHighWater } from "../../shared/storage/shard-high-water.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { scanTable } from "../support/namespace.js";
import { dueEntriesAbove, liveRunsAbove } from "../support/shard-runbook.js";

/** The shard count a stage was deployed with (`-c shardCount=4`). */
const DEPLOYED = 4;
/** A later `cdk deploy` of the same stage that did not repeat `-c shardCount`: the default. */
const REDEPLOYED = 2;
const HOUR_MS = 3_600_000;

/** The same tables under the settings of a deploy with `shards` shards, its clock `offsetMs` on. */
function deployedWith(engine: Engine, shards: number, offsetMs = 0): Engine {
  return {
    ...engine,
    settings: { ...engine.settings, shardCount: shards, maxShardCount: shards },
    clock: offsetClock(offsetMs),
  };
}

/** A job created under the fixture's settings whose shard the redeployed count does not reach. */
async function jobAboveRedeployedCount(
  f: EngineFixture,
  schedule: { runAt: string },
): Promise<string> {
  for (;;) {
    const { job } = await createJob(f.engine, testJob({ schedule }));
    if (shardOf(job.jobId, DEPLOYED) >= REDEPLOYED) return job.jobId;
  }
}

let f: EngineFixture;
beforeAll(async () => {
  f = await createEngineFixture({ settings: { shardCount: DEPLOYED, maxShardCount: DEPLOYED } });
});
afterAll(() => f.destroy());

describe("a deploy that leaves out the shard count a stage was deployed with", () => {
  it("still dispatches the jobs filed in the shards the new count leaves out", async () => {
    // A one-off an hour ahead, filed in a shard the redeployed count does not reach.
    const runAt = new Date(Date.now() + HOUR_MS).toISOString();
    const jobId = await jobAboveRedeployedCount(f, { runAt });
    // The same tables, an hour later, under the settings of the deploy that left the count out.
    const redeployed = deployedWith(f.engine, REDEPLOYED, HOUR_MS - 60_000);
    const { passes } = await tickOnce(redeployed, "tick-after-redeploy");
    expect(passes.map((pass) => pass.shard)).toEqual([0, 1, 2, 3]);
    const runs = (await f.runs()).filter((run) => run.jobId === jobId);
    expect(runs.map((run) => run.status)).toEqual(["QUEUED"]);
  });

  it("still re-sends a lost run filed in an in-flight partition the new count leaves out", async () => {
    const lost = await createEngineFixture({
      settings: { shardCount: DEPLOYED, maxShardCount: DEPLOYED },
    });
    try {
      // Due now: the create claims it at once (the fast path) and sends it; the queue loses it.
      const jobId = await jobAboveRedeployedCount(lost, { runAt: new Date().toISOString() });
      await lost.purge();
      const [run] = (await lost.runs()).filter((r) => r.jobId === jobId);
      expect(run?.status).toBe("QUEUED");
      const pastDeadline = new Date(
        Date.parse(run?.dueAt ?? "") + lost.engine.settings.leaseMs + REAPER_SETTLE_MS + 1_000,
      );
      const redeployed = deployedWith(lost.engine, REDEPLOYED);
      const reaped = await reap(redeployed, { now: pastDeadline });
      // Every job the search created lost its message; the one above the new count is among them.
      expect(reaped.resent).toBe((await lost.runs()).length);
      const delivery = await lost.nextDelivery(lost.engine.queues.normal, jobId);
      expect(delivery.message).toMatchObject({ scheduledFor: run?.scheduledFor, attempt: 1 });
    } finally {
      await lost.destroy();
    }
  });
});

describe("the shard high-water mark", () => {
  it("rises with the first filing and the first tick under a higher count, and never falls", async () => {
    const marked = await createEngineFixture({
      settings: { shardCount: REDEPLOYED, maxShardCount: REDEPLOYED },
    });
    try {
      // The first create of a process records the count it files under, before any tick.
      await createJob(marked.engine, testJob({ schedule: { runAt: "2099-01-01T00:00:00Z" } }));
      expect((await readShardHighWater(marked.engine, [])).highWater).toBe(REDEPLOYED);
      // A tick under a raised count raises it.
      await tickOnce(deployedWith(marked.engine, DEPLOYED), "tick-raised");
      const raised = await markItem(marked.engine);
      expect(raised?.shardCount).toBe(DEPLOYED);
      // A tick under a lowered count passes over the shards above and writes nothing.
      const lowered = deployedWith(marked.engine, REDEPLOYED, 60_000);
      expect((await readTickShards(lowered, lowered.clock())).count).toBe(DEPLOYED);
      await tickOnce(lowered, "tick-lowered");
      expect(await markItem(marked.engine)).toEqual(raised);
    } finally {
      await marked.destroy();
    }
  });
});

/**
 * docs/deploy.md ("Deploy") on a count lowered on purpose: the tick passes over the shards above
 * until the mark is deleted, which is safe once its two counts (due entries `DUE#<minute>#<shard>`
 * with shard at or above the new count; queued or running runs whose `inflightPk` names one of
 * those shards) are 0. A recurring job's chain moves below the new count at its next claim; a one-off's
 * entry stays above until it is due. Once the mark is deleted, the next tick records the deployed
 * count and passes over its shards alone. The counts are the runbook's (test/support/shard-runbook.ts).
 */
describe("docs/deploy.md's runbook for lowering the shard count", () => {
  async function createdAbove(engine: Engine, schedule: ScheduleSpec): Promise<string> {
    for (;;) {
      const { job } = await createJob(engine, testJob({ schedule }));
      if (shardOf(job.jobId, DEPLOYED) >= REDEPLOYED) return job.jobId;
    }
  }

  it("counts a one-off's entry above the new count until it is due, and once the counts are 0 a deleted mark comes back at the new count", async () => {
    const stage = await createEngineFixture({
      settings: { shardCount: DEPLOYED, maxShardCount: DEPLOYED },
    });
    try {
      const start = new Date(Math.ceil((Date.now() + HOUR_MS) / 60_000) * 60_000);
      const recurring = await createdAbove(stage.engine, {
        every: "PT1H",
        startAt: start.toISOString(),
      });
      await createdAbove(stage.engine, {
        runAt: new Date(start.getTime() + 2 * HOUR_MS).toISOString(),
      });
      expect(await dueEntriesAbove(stage.engine, REDEPLOYED)).toBe(2);

      // Redeployed with the lower count: a tick at the recurring job's first occurrence.
      const offset = start.getTime() - Date.now() - 60_000;
      const first = await tickOnce(deployedWith(stage.engine, REDEPLOYED, offset), "tick-1");
      expect(first.passes.map((pass) => pass.shard)).toEqual([0, 1, 2, 3]);
      const recurringEntries = (await scanTable(stage.engine.doc, stage.engine.tables.jobs)).filter(
        (item) => String(item.pk).startsWith("DUE#") && item.jobId === recurring,
      );
      expect(recurringEntries.map((item) => Number(String(item.pk).split("#")[2]))).toEqual([
        shardOf(recurring, REDEPLOYED),
      ]);
      expect(shardOf(recurring, REDEPLOYED)).toBeLessThan(REDEPLOYED);
      // The one-off's entry is still above: the mark must stay.
      expect(await dueEntriesAbove(stage.engine, REDEPLOYED)).toBe(1);
      expect(await liveRunsAbove(stage.engine, REDEPLOYED)).toBe(0);

      // At the one-off's occurrence its claim files its run under the new count: both counts 0.
      const later = deployedWith(stage.engine, REDEPLOYED, offset + 2 * HOUR_MS);
      expect((await tickOnce(later, "tick-2")).passes.map((pass) => pass.shard)).toEqual([
        0, 1, 2, 3,
      ]);
      expect(await dueEntriesAbove(stage.engine, REDEPLOYED)).toBe(0);
      expect(await liveRunsAbove(stage.engine, REDEPLOYED)).toBe(0);

      // The mark deleted, the next tick records the deployed count and passes over its shards.
      await stage.engine.doc.send(
        new DeleteCommand({ TableName: stage.engine.tables.jobs, Key: shardHighWaterKey }),
      );
      const after = await tickOnce(
        deployedWith(stage.engine, REDEPLOYED, offset + 2 * HOUR_MS + 60_000),
        "tick-3",
      );
      expect(after.passes.map((pass) => pass.shard)).toEqual([0, 1]);
      expect((await markItem(stage.engine))?.shardCount).toBe(REDEPLOYED);
    } finally {
      await stage.destroy();
    }
  });
});

describe("the dispatcher's invocation", () => {
  const settings = { maxShardCount: REDEPLOYED };

  it("accepts a shard below the count the tick passes over, above its own", () => {
    expect(shardOfDispatcherEvent({ shard: 3, shardCount: DEPLOYED }, settings)).toBe(3);
    // From a tick deployed before events said how many shards it passes over.
    expect(shardOfDispatcherEvent({ shard: 1 }, settings)).toBe(1);
  });

  it.each([
    [{ shard: 3 }],
    [{ shard: 4, shardCount: DEPLOYED }],
    [{ shard: -1, shardCount: DEPLOYED }],
    [{ shard: 1.5, shardCount: DEPLOYED }],
    [{ shard: "x", shardCount: DEPLOYED }],
    [{ shard: 1, shardCount: 2048 }],
    [{ shard: 1, shardCount: "many" }],
    [{}],
  ])("refuses %j", (event) => {
    expect(shardOfDispatcherEvent(event, settings)).toBeNull();
  });
});

async function markItem(engine: Engine): Promise<Record<string, unknown> | undefined> {
  return (await scanTable(engine.doc, engine.tables.jobs)).find(
    (item) => item.pk === shardHighWaterKey.pk && item.sk === shardHighWaterKey.sk,
  );
}
