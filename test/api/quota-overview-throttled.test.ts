import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { newJobId, runId } from "../../shared/keys.js";
import { takeRunSlot } from "../../shared/storage/run-slots.js";
import { writeQuotaOverride } from "../../shared/storage/tenant-quotas.js";
import { leaveBatchGetsUnprocessed } from "../support/faults.js";
import { type ApiHarness, KEY_B, startApi } from "./support.js";

const MINUTE_MS = 60_000;

/**
 * `GET /quotas` reads the runs of a tenant's lapsed concurrent-runs slots (`slotsHeldPastLease`, a
 * BatchGetItem). Under throttling DynamoDB answers a BatchGetItem with every key unprocessed;
 * `batchGetItems` asks again for MAX_BATCH_ROUNDS (6) rounds and then fails as a
 * ProvisionedThroughputExceededException (`keptThrottling`), which the API answers as any read the
 * table throttled: 503 "busy" with Retry-After (THROTTLED in shared/api/errors.ts), not 500.
 */
describe("GET /quotas while DynamoDB leaves the lapsed slots' runs unread (throttling)", () => {
  let api: ApiHarness;
  beforeAll(async () => {
    api = await startApi();
  });
  afterAll(() => api.close());

  it("answers a retryable 503 busy, not a 500 internal error", async () => {
    const { engine } = api.fixture;
    const tenant = "tenant-b";
    const now = new Date();
    await writeQuotaOverride(engine, tenant, { concurrentRuns: 2 }, now);
    // A slot whose lease lapsed (its worker died): the overview reads its run.
    const slot = {
      tenantId: tenant,
      index: 0,
      runId: runId(newJobId(now), now, 1),
      fence: 1,
      leaseUntil: new Date(now.getTime() - MINUTE_MS).toISOString(),
      taker: "crashed-worker",
    };
    expect(await takeRunSlot(engine, slot, now)).toBe(true);

    // DynamoDB's answer under throttling: none of the keys read, all of them UnprocessedKeys.
    const unread = leaveBatchGetsUnprocessed(engine.doc);
    try {
      const reply = await api.call("GET", "/quotas", { key: KEY_B });
      expect(unread.requests()).toBe(6);
      expect(reply.status).toBe(503);
      expect(reply.body).toMatchObject({ error: { code: "busy" } });
    } finally {
      unread.restore();
    }
  });
});

/**
 * Review r121 (before h121 too): docs/api.md says `runningRuns` is "0 while the tenant has no
 * limit, whatever runs". A limit lifted while runs started under it still hold their slots leaves
 * those slots in the partition, and the overview counts them (and, since h121, reads the runs of
 * the lapsed ones for a tenant with no limit).
 */
describe("GET /quotas of a tenant whose concurrentRuns limit was lifted while a run held a slot", () => {
  let api: ApiHarness;
  beforeAll(async () => {
    api = await startApi();
  });
  afterAll(() => api.close());

  it("shows runningRuns 0, as documented for a tenant with no limit", async () => {
    const { engine } = api.fixture;
    const now = new Date();
    expect(
      (await api.call("PUT", "/tenants/tenant-b/quotas", { body: { concurrentRuns: 1 } })).status,
    ).toBe(200);
    const slot = {
      tenantId: "tenant-b",
      index: 0,
      runId: runId(newJobId(now), now, 1),
      fence: 1,
      leaseUntil: new Date(now.getTime() + MINUTE_MS).toISOString(),
      taker: "running-worker",
    };
    expect(await takeRunSlot(engine, slot, now)).toBe(true);
    expect(
      (await api.call("PUT", "/tenants/tenant-b/quotas", { body: { concurrentRuns: null } }))
        .status,
    ).toBe(200);
    const reply = await api.call("GET", "/quotas", { key: KEY_B });
    expect(reply.body).toMatchObject({ quotas: { concurrentRuns: null } });
    expect(reply.body).toMatchObject({ runningRuns: 0 });
  });
});
