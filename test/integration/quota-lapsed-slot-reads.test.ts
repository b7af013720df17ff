import { UpdateCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createJob } from "../../shared/jobs/index.js";
import { newJobId, runId } from "../../shared/keys.js";
import type { Run } from "../../shared/model.js";
import { takeTenantSlot } from "../../shared/quotas/concurrency.js";
import { quotaView } from "../../shared/quotas/overrides.js";
import { runKeyOf } from "../../shared/storage/run-reads.js";
import { takeRunSlot } from "../../shared/storage/run-slots.js";
import { startRun } from "../../shared/storage/run-start.js";
import { readQuotaPartition, writeQuotaOverride } from "../../shared/storage/tenant-quotas.js";
import { createQuotaFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { byCommand, countingEngine } from "../support/request-count.js";
import { waitFor } from "../support/wait.js";

const MINUTE_MS = 60_000;

/**
 * A take of a concurrent-runs slot reads the runs of lapsed slots (one BatchGetItem,
 * `slotsHeldPastLease`) only when what they say can change its answer: when the live slots and
 * the lapsed ones together reach the quota, and the live ones alone do not. A quota lowered below
 * the slots already taken leaves live slots that fill it whatever the lapsed ones' runs say.
 */
let f: EngineFixture;
beforeAll(async () => {
  f = await createQuotaFixture();
});
afterAll(() => f.destroy());

/** A queued run of the tenant, to take a slot for. */
async function runOf(tenantId: string): Promise<Run> {
  const schedule = { runAt: new Date().toISOString() };
  const { job } = await createJob(f.engine, testJob({ tenantId, schedule }));
  return waitFor("the job's run", async () => (await f.runs()).find((r) => r.jobId === job.jobId));
}

/**
 * Slot `index` held by `holder`'s start (by default a run no one else has), its lease until
 * `leaseUntil`.
 */
async function slotAt(
  tenantId: string,
  index: number,
  leaseUntil: number,
  holder?: Pick<Run, "runId" | "fence">,
): Promise<void> {
  const now = new Date();
  const slot = {
    tenantId,
    index,
    runId: holder?.runId ?? runId(newJobId(now), now, 1),
    fence: holder?.fence ?? 1,
    leaseUntil: new Date(leaseUntil).toISOString(),
    taker: `taker-${index}`,
  };
  expect(await takeRunSlot(f.engine, slot, now)).toBe(true);
}

describe("a take of a slot beside lapsed slots above a lowered concurrentRuns", () => {
  /** Slots 0 … 3 taken under a quota of 4, those in `lapsedAt` lapsed; then the quota lowered to 2. */
  async function loweredTenant(tenantId: string, lapsedAt: readonly number[]): Promise<void> {
    const now = Date.now();
    await writeQuotaOverride(f.engine, tenantId, { concurrentRuns: 4 }, new Date(now));
    for (const index of [0, 1, 2, 3])
      await slotAt(tenantId, index, lapsedAt.includes(index) ? now - MINUTE_MS : now + MINUTE_MS);
    await writeQuotaOverride(f.engine, tenantId, { concurrentRuns: 2 }, new Date(now));
  }

  async function countedTake(run: Run) {
    const counting = countingEngine(f.engine);
    try {
      const decision = await takeTenantSlot(counting.engine, run, new Date());
      return { decision, requests: byCommand(counting.sent) };
    } finally {
      counting.destroy();
    }
  }

  it("waits with no read of the lapsed slots' runs when live slots fill the lowered quota", async () => {
    const tenant = "lapsed-above-lowered-full";
    const run = await runOf(tenant);
    await loweredTenant(tenant, [2, 3]);

    const { decision, requests } = await countedTake(run);
    expect(decision).toEqual({ kind: "full", limit: 2 });
    // The override (no cache in this fixture) and the quota partition: nothing more.
    expect(requests).toEqual({ GetItemCommand: 1, QueryCommand: 1 });
  });

  it("still reads them when they could fill it, and takes a slot below it when they do not", async () => {
    const tenant = "lapsed-above-lowered-room";
    const run = await runOf(tenant);
    // Slot 0 live, 1 … 3 lapsed (their runs gone): 1 live + 3 lapsed reach the quota of 2.
    await loweredTenant(tenant, [1, 2, 3]);

    const { decision, requests } = await countedTake(run);
    expect(decision).toMatchObject({ kind: "taken", slot: { index: 1, runId: run.runId } });
    expect(requests).toEqual({
      GetItemCommand: 1,
      QueryCommand: 1,
      BatchGetItemCommand: 1,
      PutItemCommand: 1,
    });
  });
});

/**
 * `GET /quotas` answers `runningRuns`, the runs holding a slot, by the rule a take of a slot
 * follows: a slot under a live lease, or a lapsed one whose run reads RUNNING under the slot's
 * fence and a live lease of its own (its heartbeats extend the run and failed to extend the slot).
 */
describe("the quotas overview's runningRuns beside a slot whose lease lapsed while its run runs on", () => {
  it("counts the run the take counts: the quota reads full and the overview shows it running", async () => {
    const tenant = "overview-held-past-lease";
    await writeQuotaOverride(f.engine, tenant, { concurrentRuns: 1 }, new Date());
    const holder = await runOf(tenant);
    const now = new Date();
    const started = await startRun(f.engine, holder, "worker-a", now);
    if (started.kind !== "started") throw new Error(`the holder did not start: ${started.kind}`);
    const slot = {
      tenantId: tenant,
      index: 0,
      runId: holder.runId,
      fence: started.run.fence,
      leaseUntil: new Date(now.getTime() - MINUTE_MS).toISOString(),
      taker: "worker-a",
    };
    expect(await takeRunSlot(f.engine, slot, now)).toBe(true);

    const waiter = await runOf(tenant);
    expect(await takeTenantSlot(f.engine, waiter, new Date())).toEqual({ kind: "full", limit: 1 });
    expect((await quotaView(f.engine, tenant, new Date())).runningRuns).toBe(1);
  });
});

/**
 * `runningRuns` is 0 while the tenant has no limit (docs/api.md "Quotas"): slots taken under a
 * limit since lifted hold nothing back, so the overview reads none of their runs.
 */
describe("the quotas overview of a tenant whose concurrentRuns limit was lifted", () => {
  it("shows no running runs and reads only the quota partition, a lapsed slot's run unread", async () => {
    const tenant = "overview-limit-lifted";
    const now = new Date();
    await writeQuotaOverride(f.engine, tenant, { concurrentRuns: 1 }, now);
    await slotAt(tenant, 0, now.getTime() - MINUTE_MS);
    await writeQuotaOverride(f.engine, tenant, {}, now);

    const counting = countingEngine(f.engine);
    try {
      expect((await quotaView(counting.engine, tenant, new Date())).runningRuns).toBe(0);
      expect(byCommand(counting.sent)).toEqual({ QueryCommand: 1 });
    } finally {
      counting.destroy();
    }
  });
});

/**
 * A lapsed concurrent-runs slot is held only while its run reads RUNNING under the slot's own
 * start (its fence), under a live lease of its own, and not handed over: a run whose worker died,
 * started again since, ended, or handed to its async target frees it. And a lapsed slot whose run
 * was not read is not taken while slots never taken are free.
 */
/** The run started at `at`; throws unless it started. */
async function started(run: Run, at: Date): Promise<Run> {
  const start = await startRun(f.engine, run, "worker-a", at);
  if (start.kind !== "started") throw new Error(`the run did not start: ${start.kind}`);
  return start.run;
}

/** Slot `index` held by the run under `fence`, its lease lapsed a minute ago. */
async function lapsedSlot(tenantId: string, index: number, run: Run, fence: number) {
  await slotAt(tenantId, index, Date.now() - MINUTE_MS, { runId: run.runId, fence });
}

/** A tenant whose one slot is the holder's, lapsed, and a run waiting to take it. */
async function oneLapsedSlot(tenant: string, holderState: (holder: Run) => Promise<Run>) {
  await writeQuotaOverride(f.engine, tenant, { concurrentRuns: 1 }, new Date());
  const holder = await holderState(await runOf(tenant));
  await lapsedSlot(tenant, 0, holder, holder.fence);
  return runOf(tenant);
}

async function setOnRun(run: Run, set: string, values: Record<string, unknown>) {
  await f.engine.doc.send(
    new UpdateCommand({
      TableName: f.engine.tables.runs,
      Key: runKeyOf(run),
      UpdateExpression: `SET ${set}`,
      ...(set.includes("#status") ? { ExpressionAttributeNames: { "#status": "status" } } : {}),
      ExpressionAttributeValues: values,
    }),
  );
}

describe("a take of a tenant's one slot, lapsed", () => {
  it("takes it when its run reads RUNNING under a lease of its own that lapsed too (its worker died)", async () => {
    const waiter = await oneLapsedSlot("holder-died", (holder) =>
      started(holder, new Date(Date.now() - 10 * MINUTE_MS)),
    );
    expect(await takeTenantSlot(f.engine, waiter, new Date())).toMatchObject({
      kind: "taken",
      slot: { index: 0, runId: waiter.runId },
    });
  });

  it("takes it when its run, RUNNING under a live lease, was handed over to its async target", async () => {
    const waiter = await oneLapsedSlot("holder-handed-over", async (holder) => {
      const run = await started(holder, new Date());
      await setOnRun(run, "handedOverAt = :at", { ":at": new Date().toISOString() });
      return run;
    });
    expect(await takeTenantSlot(f.engine, waiter, new Date())).toMatchObject({
      kind: "taken",
      slot: { index: 0, runId: waiter.runId },
    });
  });

  it("takes it when its run ended under a lease that has not run out", async () => {
    const waiter = await oneLapsedSlot("holder-ended", async (holder) => {
      const run = await started(holder, new Date());
      await setOnRun(run, "#status = :succeeded", { ":succeeded": "SUCCEEDED" });
      return run;
    });
    expect(await takeTenantSlot(f.engine, waiter, new Date())).toMatchObject({
      kind: "taken",
      slot: { index: 0, runId: waiter.runId },
    });
  });

  it("takes it when it is an earlier start's of a run started again since", async () => {
    const tenant = "holder-started-again";
    await writeQuotaOverride(f.engine, tenant, { concurrentRuns: 1 }, new Date());
    const holder = await runOf(tenant);
    const first = await started(holder, new Date(Date.now() - 10 * MINUTE_MS));
    const second = await started(first, new Date());
    expect(second.fence).toBe(first.fence + 1);
    await lapsedSlot(tenant, 0, holder, first.fence);
    const waiter = await runOf(tenant);
    expect(await takeTenantSlot(f.engine, waiter, new Date())).toMatchObject({
      kind: "taken",
      slot: { index: 0, runId: waiter.runId },
    });
  });
});

describe("a take beside a lapsed slot it need not read, slots never taken free", () => {
  it("leaves the lapsed slot to its run, RUNNING under a live lease, and takes a free one", async () => {
    const tenant = "lapsed-unread";
    await writeQuotaOverride(f.engine, tenant, { concurrentRuns: 3 }, new Date());
    const holder = await started(await runOf(tenant), new Date());
    await lapsedSlot(tenant, 0, holder, holder.fence);
    const waiter = await runOf(tenant);
    // The first free slot is tried first.
    const decision = await takeTenantSlot({ ...f.engine, random: () => 0 }, waiter, new Date());
    expect(decision).toMatchObject({ kind: "taken", slot: { runId: waiter.runId } });
    const slots = (await readQuotaPartition(f.engine, tenant)).slots;
    expect(slots.find((s) => s.index === 0)).toMatchObject({
      runId: holder.runId,
      fence: holder.fence,
    });
  });
});

describe("a take of a tenant's one slot, lapsed, whose run is gone", () => {
  it("takes it: the lapsed slot alone reaches the quota, and its run is read", async () => {
    const tenant = "lapsed-gone-at-quota";
    await writeQuotaOverride(f.engine, tenant, { concurrentRuns: 1 }, new Date());
    await slotAt(tenant, 0, Date.now() - MINUTE_MS);
    const waiter = await runOf(tenant);
    expect(await takeTenantSlot(f.engine, waiter, new Date())).toMatchObject({
      kind: "taken",
      slot: { index: 0, runId: waiter.runId },
    });
  });
});

describe("a redelivery taking its own lapsed slot back beside a lapsed slot above a lowered quota", () => {
  it("reads no other run's state: its own slot is its answer", async () => {
    const tenant = "own-slot-back";
    await writeQuotaOverride(f.engine, tenant, { concurrentRuns: 2 }, new Date());
    const holder = await runOf(tenant);
    const first = await started(holder, new Date(Date.now() - 10 * MINUTE_MS));
    await lapsedSlot(tenant, 0, holder, first.fence);
    const other = await started(await runOf(tenant), new Date(Date.now() - 10 * MINUTE_MS));
    await lapsedSlot(tenant, 1, other, other.fence);
    await writeQuotaOverride(f.engine, tenant, { concurrentRuns: 1 }, new Date());
    const again = await started(first, new Date());
    const counting = countingEngine(f.engine);
    try {
      expect(await takeTenantSlot(counting.engine, again, new Date())).toMatchObject({
        kind: "taken",
        slot: { index: 0, runId: holder.runId, fence: again.fence },
      });
      // The override, the quota partition and the take: no BatchGetItem of lapsed slots' runs.
      expect(byCommand(counting.sent)).toEqual({
        GetItemCommand: 1,
        QueryCommand: 1,
        PutItemCommand: 1,
      });
    } finally {
      counting.destroy();
    }
  });
});
