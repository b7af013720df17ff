import type { Engine } from "../engine.js";
import { type ReapResult, reap } from "./reaper.js";
import { type DispatcherEvent, dispatcherEvent, readTickShards, shardsOf } from "./tick-shards.js";

/**
 * One tick as the tick Lambda runs it: one asynchronous dispatcher invocation per shard the stage
 * has run with (`invoke`; each pass runs in an invocation of its own, with its own timeout, shard
 * lease, retries and on-failure destination), then the reaper, within what is left of the
 * invocation's time (`remainingMs`).
 */
export async function fanOutTick(
  engine: Engine,
  options: {
    readonly invoke: (event: DispatcherEvent) => Promise<unknown>;
    readonly remainingMs: () => number;
  },
): Promise<{ shards: number; reaped: ReapResult }> {
  const tickShards = await readTickShards(engine, engine.clock());
  const shards = shardsOf(tickShards);
  const invoked = await Promise.allSettled(
    shards.map((shard) => options.invoke(dispatcherEvent(shard, tickShards))),
  );
  // The reaper runs all the same: thrown at once, one refused invocation would keep it from running.
  const failed = shards.flatMap((shard, i) => {
    const outcome = invoked[i];
    return outcome?.status === "rejected" ? [{ shard, error: outcome.reason as unknown }] : [];
  });
  if (failed.length > 0)
    engine.obs.log.error("tick could not invoke the dispatcher; the next tick invokes it again", {
      shards: failed.map(({ shard }) => shard),
      error: String(failed[0]?.error),
    });
  const reaped = await reap(engine, { shards: tickShards, remainingMs: options.remainingMs });
  if (failed[0] !== undefined) throw failed[0].error;
  return { shards: shards.length, reaped };
}
