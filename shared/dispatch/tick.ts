import { sleep } from "../clock.js";
import type { Engine } from "../engine.js";
import { dispatchShard, type PassResult } from "./dispatcher.js";
import { type ReapResult, reap } from "./reaper.js";

/** One tick in-process: a pass over every shard, then the reaper. Lambda fans the shards out instead. */
export async function tickOnce(
  engine: Engine,
  owner: string,
): Promise<{ passes: PassResult[]; reaped: ReapResult }> {
  const shards = Array.from({ length: engine.settings.maxShardCount }, (_, shard) => shard);
  const passes = await Promise.all(shards.map((shard) => dispatchShard(engine, shard, owner)));
  const reaped = await reap(engine);
  return { passes, reaped };
}

/** The dispatcher as a long-lived loop (the sandbox): a tick every `tickMs`. */
export async function runTickLoop(
  engine: Engine,
  options: {
    owner: string;
    tickMs: number;
    signal: AbortSignal;
    onTick?: (result: Awaited<ReturnType<typeof tickOnce>>) => void;
  },
): Promise<void> {
  while (!options.signal.aborted) {
    const started = Date.now();
    try {
      options.onTick?.(await tickOnce(engine, options.owner));
    } catch (error) {
      engine.obs.log.error("tick failed", { error: String(error) });
    }
    await sleep(Math.max(0, options.tickMs - (Date.now() - started)), options.signal);
  }
}
