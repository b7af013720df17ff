import type { Engine } from "../engine.js";
import type { Run } from "../model.js";
import { fencedRunUpdate } from "./run-fence.js";

/** Extends the run's lease; throws FenceLostError once another worker has taken it over. */
export async function extendLease(engine: Engine, run: Run, now: Date): Promise<Date> {
  const leaseUntil = new Date(now.getTime() + engine.settings.leaseMs);
  await fencedRunUpdate(engine, run, {
    // The status and reason are a start's, for the first beat of a run whose start is unwritten.
    set: "#status = :running, leaseUntil = :leaseUntil",
    remove: "reason",
    values: { ":leaseUntil": leaseUntil.toISOString(), ":running": "RUNNING" },
  });
  return leaseUntil;
}
