import { GetCommand } from "@aws-sdk/lib-dynamodb";
import { MAX_RESEND_INTERVAL_MS, reap } from "../../shared/dispatch/reaper.js";
import type { Engine } from "../../shared/engine.js";
import { sweepExpired } from "../../shared/storage/expiry-sweep.js";
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

/** The tick's reaper passes a re-send interval and a minute apart: each finds a waiting run due. */
const PASS_MS = MAX_RESEND_INTERVAL_MS + 60_000;
/** The first passes of an outage, about an hour, whose keeps a later pass must take over. */
const FIRST_PASSES_MS = 4 * PASS_MS;

/**
 * The workers are down for `outageMs` from the engine clock's now, the tick running on: its
 * reaper re-sends a waiting run at each pass (`PASS_MS` apart, until the first at or past the
 * end), keeping it, and past half a day its completed job, a retention on; TTL (the expiry sweep)
 * deletes what has expired in the time since the pass before, then the pass runs. Returns when the
 * last pass was.
 *
 * Only the passes at whose instants something written under `retentionMs` can fall due are made,
 * at the instants they have at that pace: the first four (about an hour), those from the one
 * before each whole retention into the outage to the one where the first four's keeps fall due (a
 * retention after them), and the last. Between two of them, the passes left out would each keep
 * again what the one before it kept, and nothing a pass keeps falls due (each gap is shorter than
 * a retention): the sweep before the next pass stands for TTL through the gap.
 */
export async function reaperPassesThroughOutage(
  engine: Engine,
  clock: { readonly now: () => Date; readonly advance: (ms: number) => void },
  outageMs: number,
  retentionMs: number,
): Promise<number> {
  let movedMs = 0;
  for (let sinceStart = PASS_MS; ; sinceStart += PASS_MS) {
    const last = sinceStart >= outageMs;
    const nearRetention =
      sinceStart >= retentionMs - PASS_MS &&
      (sinceStart + PASS_MS) % retentionMs <= FIRST_PASSES_MS + PASS_MS;
    if (sinceStart <= FIRST_PASSES_MS || nearRetention || last) {
      clock.advance(sinceStart - movedMs);
      movedMs = sinceStart;
      const at = clock.now();
      await sweepExpired(engine, at);
      await reap(engine);
      if (last) return at.getTime();
    }
  }
}
