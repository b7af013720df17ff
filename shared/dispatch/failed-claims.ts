import type { Engine } from "../engine.js";
import { ConcurrentUpdateError } from "../errors.js";
import type { DueEntry } from "../model.js";
import { METRICS } from "../observability.js";
import { isTransientFailure } from "../storage/dynamo-errors.js";
import { setEntryAside } from "../storage/set-aside.js";

/**
 * What becomes of a due entry whose claim failed: set aside when the failure
 * would repeat, left for the next pass when it is transient (or when setting
 * it aside failed too), logged and counted either way; nothing, when another
 * claim or a lifecycle change has removed it meanwhile.
 */
export async function isolateFailure(
  engine: Engine,
  shard: number,
  entry: DueEntry,
  error: unknown,
  now: Date,
): Promise<"set-aside" | "gone" | "left"> {
  const fields = {
    shard,
    jobId: entry.jobId,
    tenantId: entry.tenantId,
    dueKey: entry.key,
    error: String(error),
  };
  // Contention, and entries that kept changing under the claim, may well pass next time.
  if (!isTransientFailure(error) && !(error instanceof ConcurrentUpdateError)) {
    try {
      const aside = await setEntryAside(engine, entry, error, now);
      if (aside.outcome === "set-aside") {
        engine.obs.metrics.add(METRICS.dueEntryFailures, 1, "Count", { handling: "set-aside" });
        engine.obs.log.error("set aside a due entry that cannot be claimed", fields);
        return "set-aside";
      }
      if (aside.outcome === "gone") {
        // Claimed by another, or removed by a pause, cancel or edit, since it failed here.
        engine.obs.log.warn("a due entry that failed its claim is gone already", fields);
        return "gone";
      }
    } catch (asideError) {
      engine.obs.log.error("could not set a failed due entry aside", {
        ...fields,
        asideError: String(asideError),
      });
    }
  }
  engine.obs.metrics.add(METRICS.dueEntryFailures, 1, "Count", { handling: "left" });
  engine.obs.log.error("could not claim a due entry; the next pass tries it again", fields);
  return "left";
}
