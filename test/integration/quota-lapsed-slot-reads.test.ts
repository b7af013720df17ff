import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createJob } from "../../shared/jobs/index.js";
import { newJobId, runId } from "../../shared/keys.js";
import type { Run } from "../../shared/model.js";
import { takeTenantSlot } from "../../shared/quotas/concurrency.js";
import { quotaView } from "../../shared/quotas/overrides.js";
import { takeRunSlot } from "../../shared/storage/run-slots.js";
import { startRun } from "../../shared/storage/run-start.js";
import { writeQuotaOverride } from "../../shared/storage/tenant-quotas.js";
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

/** Slot `index` held by a run no one else has, its lease until `leaseUntil`. */
async function slotAt(tenantId: string, index: number, leaseUntil: number): Promise<void> {
  const now = new Date();
  const slot = {
    tenantId,
    index,
    runId: runId(newJobId(now), now, 1),
    fence: 1,
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
