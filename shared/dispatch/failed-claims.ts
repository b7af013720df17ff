import type { Engine } from "../engine.js";
import { ConcurrentUpdateError } from "../errors.js";
import type { DueEntry } from "../model.js";
import { METRICS } from "../observability.js";
import { isTransientFailure } from "../storage/dynamo-errors.js";
import { setEntryAside } from "../storage/set-aside.js";
import { refileTriggerEntry } from "../storage/trigger.js";

/** How far past a pass's horizon a trigger entry it could not fan out is filed again. */
const REFILE_PAST_HORIZON_MS = 60_000;

/**
 * What becomes of a due entry whose claim failed: set aside when the failure
 * would repeat, left for the next pass when it is transient (or when setting
 * it aside failed too), logged and counted either way; nothing, when another
 * claim or a lifecycle change has removed it meanwhile. A `trigger` entry is
 * never set aside: one whose fan-out failed for a reason that may repeat is
 * filed again past the pass's horizon (`refiled`), for a later pass to fan out.
 */
export async function isolateFailure(
  engine: Engine,
  shard: number,
  entry: DueEntry,
  error: unknown,
  now: Date,
): Promise<"set-aside" | "refiled" | "gone" | "left"> {
  const fields = {
    shard,
    jobId: entry.jobId,
    tenantId: entry.tenantId,
    dueKey: entry.key,
    error: String(error),
  };
  // Contention, and entries that kept changing under the claim, may well pass next time.
  if (!isTransientFailure(error) && !(error instanceof ConcurrentUpdateError)) {
    if (entry.kind === "trigger") {
      const refiled = await refileTrigger(engine, shard, entry, fields, now);
      if (refiled !== "left") return refiled;
    } else {
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
  }
  engine.obs.metrics.add(METRICS.dueEntryFailures, 1, "Count", { handling: "left" });
  engine.obs.log.error("could not claim a due entry; the next pass tries it again", fields);
  return "left";
}

/**
 * Files a trigger entry whose fan-out failed again past the pass's horizon (`now` plus the
 * lookahead, and a minute), so this pass does not read it again and the next ones do; logged
 * and counted as `refiled`, which alarms as a set-aside entry does. "left" when that move fails:
 * the entry stays, and the caller counts it as any other left.
 */
async function refileTrigger(
  engine: Engine,
  shard: number,
  entry: DueEntry,
  fields: Record<string, unknown>,
  now: Date,
): Promise<"refiled" | "gone" | "left"> {
  const at = new Date(now.getTime() + engine.settings.lookaheadMs + REFILE_PAST_HORIZON_MS);
  try {
    const moved = await refileTriggerEntry(engine, shard, entry, at);
    if (moved === "gone") {
      engine.obs.log.warn("a trigger entry that failed its fan-out is gone already", fields);
      return "gone";
    }
    engine.obs.metrics.add(METRICS.dueEntryFailures, 1, "Count", { handling: "refiled" });
    engine.obs.log.error("could not fan a trigger entry out; filed again for a later pass", {
      ...fields,
      refiledFor: at.toISOString(),
    });
    return "refiled";
  } catch (refileError) {
    engine.obs.log.error("could not file a failed trigger entry again", {
      ...fields,
      refileError: String(refileError),
    });
    return "left";
  }
}
