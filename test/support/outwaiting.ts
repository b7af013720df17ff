import { GetCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../../shared/engine.js";
import { jobKey } from "../../shared/storage/items.js";
import { takeRunSlot } from "../../shared/storage/run-slots.js";

/** Helpers of the cases whose runs outwait a retention (a tenant at its quota, a job's TTL). */

/**
 * The tenant's one concurrent-runs slot, taken at `now` by its other runs (one after another) for
 * an hour: each call another take, which moves the slot's lease on. True when taken.
 */
export const holdTenantSlotAnHour = (engine: Engine, tenantId: string, now: Date) =>
  takeRunSlot(
    engine,
    {
      tenantId,
      index: 0,
      runId: "the-tenant-s-other-runs",
      fence: 1,
      leaseUntil: new Date(now.getTime() + 3_600_000).toISOString(),
      taker: `hold-${now.toISOString()}`,
    },
    now,
  );

/** The job item's stored `expiresAt` (which the decoded job leaves out), or undefined. */
export async function storedJobExpiresAt(engine: Engine, jobId: string): Promise<unknown> {
  const read = await engine.doc.send(
    new GetCommand({ TableName: engine.tables.jobs, Key: jobKey(jobId) }),
  );
  return read.Item?.expiresAt;
}
