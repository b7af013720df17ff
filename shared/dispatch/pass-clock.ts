import type { Engine } from "../engine.js";
import type { DueEntry } from "../model.js";
import { isMisfired } from "../policies.js";
import type { ShardLease } from "../storage/lease.js";

/** How often the tick starts a pass on each shard (`infra/constructs/dispatch.ts`). */
const TICK_MS = 60_000;

/**
 * Whether a pass leaves the occurrence entries its clock judges late (`isLateLeft`) to the next
 * pass rather than apply their misfire policy: when its clock reads more than a tick and the
 * misfire grace past the last pass's recorded time (`lastPassAt`). That is a clock ahead, or the
 * first pass after an outage of the passes, and a pass cannot tell which: ahead, what it judges
 * late may lie in the real future, and its policy would skip it for good (under `skip`, and all
 * but one under `fire_once`); after an outage the next pass, a tick on, judges as this one would.
 * It does so whatever its clock reads when the last completed pass left it entries (`lateLeft`),
 * so ticks further apart than that (a sandbox's `--tick-seconds`) still see them claimed.
 */
export function clockInDoubt(lease: ShardLease, now: Date, misfireGraceMs: number): boolean {
  if (lease.lastPassAt === null || lease.lateLeft) return false;
  return now.getTime() - lease.lastPassAt.getTime() > TICK_MS + misfireGraceMs;
}

/**
 * An entry a pass whose clock is in doubt leaves in its bucket: an occurrence past the misfire
 * grace by that clock. A retry or a trigger meets no misfire policy, and an occurrence on time by
 * it is claimed as by any pass (early, when the clock is ahead: its run waits for its time).
 */
export function isLateLeft(entry: DueEntry, now: Date, misfireGraceMs: number): boolean {
  return entry.kind === "occurrence" && isMisfired(new Date(entry.dueAt), now, misfireGraceMs);
}

/** Names the pass whose clock was in doubt, so an operator can find the host and check it. */
export function warnLateLeft(engine: Engine, lease: ShardLease, now: Date, entries: number): void {
  engine.obs.log.warn(
    "left due entries late by this pass's clock to the next pass: it reads more than a tick past the last pass's",
    {
      shard: lease.shard,
      entries,
      now: now.toISOString(),
      lastPassAt: lease.lastPassAt?.toISOString() ?? null,
    },
  );
}
