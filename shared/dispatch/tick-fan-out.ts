import { forEachConcurrently } from "../concurrency.js";
import type { Engine } from "../engine.js";
import { LAMBDA_INVOKE_CONCURRENCY } from "../lambda-client.js";
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
  // The reaper runs all the same: thrown at once, one refused invocation would keep it from running.
  const failed: { readonly shard: number; readonly error: unknown }[] = [];
  // As many at once as the client has sockets: an attempt's time limits count its wait for one.
  await forEachConcurrently(shards, LAMBDA_INVOKE_CONCURRENCY, async (shard) => {
    await options.invoke(dispatcherEvent(shard, tickShards)).catch((error: unknown) => {
      failed.push({ shard, error });
    });
  });
  failed.sort((a, b) => a.shard - b.shard);
  if (failed.length > 0)
    engine.obs.log.error("tick could not invoke the dispatcher; the next tick invokes it again", {
      shards: failed.map(({ shard }) => shard),
      error: String(failed[0]?.error),
    });
  const reaped = await reap(engine, { shards: tickShards, remainingMs: options.remainingMs });
  if (failed[0] !== undefined) throw failed[0].error;
  return { shards: shards.length, reaped };
}
