import type { Engine } from "../engine.js";
import type { Run } from "../model.js";
import { fencedRunUpdate } from "./run-fence.js";

/**
 * An async target answered 202 and took the run over: the run stays RUNNING under this start's
 * fence with a fresh lease (its target's heartbeats extend it), the instant it times out, and the
 * job version it runs. Throws FenceLostError when the run is no longer held (the target already
 * completed it, or another start took it over).
 */
export async function recordHandOver(
  engine: Engine,
  run: Run,
  handOver: {
    readonly leaseUntil: Date;
    readonly timesOutAt: Date;
    readonly executedVersion: number;
  },
  now: Date,
): Promise<void> {
  await fencedRunUpdate(engine, run, {
    // The status and reason are a start's, for a hand-over that writes its run's start.
    set: "#status = :running, handedOverAt = :now, leaseUntil = :leaseUntil, timesOutAt = :timesOutAt, executedVersion = :executedVersion",
    remove: "reason",
    values: {
      ":running": "RUNNING",
      ":now": now.toISOString(),
      ":leaseUntil": handOver.leaseUntil.toISOString(),
      ":timesOutAt": handOver.timesOutAt.toISOString(),
      ":executedVersion": handOver.executedVersion,
    },
  });
}
