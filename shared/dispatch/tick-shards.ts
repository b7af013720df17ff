import { type EngineSettings, SHARD_COUNT_LIMIT } from "../config.js";
import type { Engine } from "../engine.js";
import type { ReaperCursor, ReaperStart } from "../storage/reaper-cursor.js";
import { readReaperCursors } from "../storage/reaper-cursor.js";
import { raiseShardHighWater, readShardHighWater } from "../storage/shard-high-water.js";

/** The shards a tick passes over (dispatcher and reaper), and the reaper's cursor of each. */
export interface TickShards {
  /** Shards 0 to count − 1: the configured `maxShardCount`, or the stage's mark when higher. */
  readonly count: number;
  readonly cursors: ReadonlyMap<number, ReaperCursor>;
  /** Where the reaper starts (where the last pass out of time stopped), and the shards it owes. */
  readonly reaperStart: ReaperStart;
}

const shardRange = (from: number, to: number) =>
  Array.from({ length: Math.max(0, to - from) }, (_, index) => from + index);

/** The shards a tick passes over, 0 to count − 1, in order. */
export const shardsOf = (tickShards: Pick<TickShards, "count">): number[] =>
  shardRange(0, tickShards.count);

/**
 * The shards from `start` round to the one before it: the order a reaper pass reads them in (a pass
 * that stopped at a shard has the next one start there) and the fan-out invokes them in.
 */
export function shardsFrom(shards: readonly number[], start: number): number[] {
  const at = shards.indexOf(start);
  return at <= 0 ? [...shards] : [...shards.slice(at), ...shards.slice(0, at)];
}

/**
 * What a tick passes over: every shard up to the most the stage has ever run with, so that a
 * deploy that lowers (or leaves out) `shardCount` strands none of the due entries and in-flight
 * runs filed above it. The mark rides on the read of the reaper's cursors (one BatchGetItem);
 * it is written only when the configured count is higher, so a steady tick writes nothing.
 */
export async function readTickShards(engine: Engine, now: Date): Promise<TickShards> {
  const configured = engine.settings.maxShardCount;
  const { highWater, cursors, reaperStart } = await readShardHighWater(
    engine,
    shardRange(0, configured),
  );
  if (highWater === null || highWater < configured) {
    if (await raiseShardHighWater(engine, configured, now))
      engine.obs.log.info("shard high-water mark raised", { from: highWater, to: configured });
    return { count: configured, cursors, reaperStart };
  }
  if (highWater === configured) return { count: configured, cursors, reaperStart };
  // Deployed with fewer shards than the stage has run with: the ones above keep being passed over.
  const above = await readReaperCursors(engine, shardRange(configured, highWater));
  return { count: highWater, cursors: new Map([...cursors, ...above]), reaperStart };
}

/** What the tick asks of one dispatcher invocation. */
export interface DispatcherEvent {
  readonly shard: number;
  /** How many shards the tick passes over, which can be more than the dispatcher's settings say. */
  readonly shardCount: number;
}

export function dispatcherEvent(shard: number, shards: TickShards): DispatcherEvent {
  return { shard, shardCount: shards.count };
}

/**
 * The shard an invocation asks for, or null for an event no tick sends: a shard below the
 * tick's count (an event without one, from a tick deployed before it said, below the
 * dispatcher's own `maxShardCount`).
 */
export function shardOfDispatcherEvent(
  event: { readonly shard?: unknown; readonly shardCount?: unknown },
  settings: Pick<EngineSettings, "maxShardCount">,
): number | null {
  const shard = Number(event.shard);
  const told = event.shardCount === undefined ? 0 : Number(event.shardCount);
  if (!Number.isInteger(told) || told < 0 || told > SHARD_COUNT_LIMIT) return null;
  const count = Math.max(settings.maxShardCount, told);
  return Number.isInteger(shard) && shard >= 0 && shard < count ? shard : null;
}
