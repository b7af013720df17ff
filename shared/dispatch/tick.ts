import { sleep } from "../clock.js";
import type { Engine } from "../engine.js";
import { dispatchShard, type PassResult } from "./dispatcher.js";
import { type ReapResult, reap } from "./reaper.js";
import { readTickShards, shardsOf } from "./tick-shards.js";

/** A shard's pass in a tick: how it ended, or the error it failed with. */
export type TickPass =
  | PassResult
  | { readonly shard: number; readonly outcome: "failed"; readonly error: string };

/**
 * One tick in-process: a pass over every shard the stage has run with (`readTickShards`), then
 * the reaper. Lambda fans the shards out instead. A shard whose pass fails does not stop the others
 * or the reaper (the pass logged it and released its lease).
 */
export async function tickOnce(
  engine: Engine,
  owner: string,
): Promise<{ passes: TickPass[]; reaped: ReapResult }> {
  const tickShards = await readTickShards(engine, engine.clock());
  const shards = shardsOf(tickShards);
  const passes = await Promise.all(
    shards.map((shard) =>
      dispatchShard(engine, shard, owner).catch(
        (error: unknown): TickPass => ({ shard, outcome: "failed", error: String(error) }),
      ),
    ),
  );
  const reaped = await reap(engine, { shards: tickShards });
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
      const result = await tickOnce(engine, options.owner);
      options.onTick?.(result);
    } catch (error) {
      engine.obs.log.error("tick failed", { error: String(error) });
    }
    await sleep(Math.max(0, options.tickMs - (Date.now() - started)), options.signal);
  }
}
