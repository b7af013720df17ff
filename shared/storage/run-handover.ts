import type { Engine } from "../engine.js";
import type { Run } from "../model.js";
import { fencedRunUpdate, type HeldRun } from "./run-fence.js";

/**
 * Before an async delivery is sent: the run keeps the hash of the run token the delivery carries
 * (and the previous delivery's, so that a token of the start before answers as stale), with a
 * lease from now, under this start's fence. A start still unwritten is written with it: the
 * target may call back under the new fence before it answers. Throws FenceLostError when the run
 * is no longer held, RunCancelledError once a cancel of it was asked.
 */
export async function recordRunToken(
  engine: Engine,
  run: HeldRun,
  tokenHash: string,
  now: Date,
): Promise<void> {
  const leaseUntil = new Date(now.getTime() + engine.settings.leaseMs);
  await fencedRunUpdate(engine, run, {
    // The status and reason are a start's, for a delivery that writes its run's start. The right
    // side reads the item as it was: the previous hash is the one this write replaces (its own
    // on the run's first delivery, and on a write made again because the answer to one that
    // applied was lost: the token before then answers 401 instead of 409).
    set: "#status = :running, leaseUntil = :leaseUntil, previousRunTokenHash = if_not_exists(runTokenHash, :tokenHash), runTokenHash = :tokenHash",
    remove: "reason",
    values: {
      ":running": "RUNNING",
      ":leaseUntil": leaseUntil.toISOString(),
      ":tokenHash": tokenHash,
    },
  });
}

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
