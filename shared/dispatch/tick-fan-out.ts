import { forEachConcurrently } from "../concurrency.js";
import type { Engine } from "../engine.js";
import { LAMBDA_INVOKE_CONCURRENCY, LAMBDA_INVOKE_LONGEST_MS } from "../lambda-client.js";
import { MINUTE_MS } from "../schedule/calendar.js";
import { type ReapResult, reap } from "./reaper.js";
import { REAPER_TIME_MARGIN_MS } from "./reaper-time.js";
import {
  type DispatcherEvent,
  dispatcherEvent,
  readTickShards,
  shardsFrom,
  shardsOf,
} from "./tick-shards.js";

/**
 * What the reaper is left of the tick's minute at the least: its margin, and 10 s of shards (all
 * 1,024 quiet ones at up to about 10 ms each; a slower pass goes on at the next tick).
 */
const REAPER_LEAST_MS = REAPER_TIME_MARGIN_MS + 10_000;

/**
 * The least left of the invocation for any Invoke to start: the longest one Invoke takes (a silent
 * connection, every attempt cut at its limit) on top of the reaper's margin, so that whatever the
 * Invokes do the reaper starts with its margin, and the tick ends, logging the shards it did not
 * invoke, before the invocation's timeout. A fan-out begun with less (its read of the shards took
 * over 24 s) invokes none, and the next tick's does.
 */
const INVOKE_LEAST_MS = REAPER_TIME_MARGIN_MS + LAMBDA_INVOKE_LONGEST_MS;

/**
 * Whether the fan-out may start another Invoke with `remainingMs` left of the invocation: while
 * `INVOKE_LEAST_MS` is left, the first round of `LAMBDA_INVOKE_CONCURRENCY` starts (a tick whose
 * read of the shards was slow still invokes some when the Invokes answer at once, and the rotation
 * below brings every shard round); after it, one starts only while what is left also holds the
 * reaper's least and the slowest Invoke this tick has seen and a second, at most the longest one.
 * With every Invoke hanging, 50 at a time, a tick at a few hundred shards would otherwise spend
 * its whole minute on them, and the reaper would never run.
 */
function mayStartInvoke(started: number, remainingMs: number, slowestMs: number): boolean {
  if (remainingMs < INVOKE_LEAST_MS) return false;
  if (started < LAMBDA_INVOKE_CONCURRENCY) return true;
  return remainingMs >= REAPER_LEAST_MS + Math.min(slowestMs + 1_000, LAMBDA_INVOKE_LONGEST_MS);
}

/**
 * One tick as the tick Lambda runs it: one asynchronous dispatcher invocation per shard the stage
 * has run with (`invoke`; each pass runs in an invocation of its own, with its own timeout, shard
 * lease, retries and on-failure destination), then the reaper, within what is left of the
 * invocation's time (`remainingMs`). Invokes start only while the time left holds them and the
 * reaper (`mayStartInvoke`); the shards not invoked then are logged and fail the tick, as a
 * refused Invoke does.
 */
export async function fanOutTick(
  engine: Engine,
  options: {
    readonly invoke: (event: DispatcherEvent) => Promise<unknown>;
    readonly remainingMs: () => number;
  },
): Promise<{ shards: number; reaped: ReapResult }> {
  const now = engine.clock();
  const tickShards = await readTickShards(engine, now);
  // Each minute from a round of Invokes further on: a fan-out out of time leaves different shards
  // each tick, and each is invoked within as many ticks as it takes rounds (at least one fits).
  const minute = Math.floor(now.getTime() / MINUTE_MS);
  const first = (minute * LAMBDA_INVOKE_CONCURRENCY) % Math.max(1, tickShards.count);
  const shards = shardsFrom(shardsOf(tickShards), first);
  // The reaper runs all the same: thrown at once, one refused invocation would keep it from running.
  const failed: { readonly shard: number; readonly error: unknown }[] = [];
  const left: number[] = [];
  // As many at once as the client has sockets: an attempt's time limits count its wait for one.
  let started = 0;
  let slowestMs = 0;
  await forEachConcurrently(shards, LAMBDA_INVOKE_CONCURRENCY, async (shard) => {
    const remaining = options.remainingMs();
    if (!mayStartInvoke(started, remaining, slowestMs)) {
      left.push(shard);
      return;
    }
    started++;
    await options.invoke(dispatcherEvent(shard, tickShards)).catch((error: unknown) => {
      failed.push({ shard, error });
    });
    slowestMs = Math.max(slowestMs, remaining - options.remainingMs());
  });
  failed.sort((a, b) => a.shard - b.shard);
  left.sort((a, b) => a - b);
  if (failed.length > 0)
    engine.obs.log.error("tick could not invoke the dispatcher; the next tick invokes it again", {
      shards: failed.map(({ shard }) => shard),
      error: String(failed[0]?.error),
    });
  if (left.length > 0)
    engine.obs.log.error(
      "tick ran out of time to invoke the dispatcher; the next tick invokes it again",
      { shards: left, invoked: shards.length - left.length },
    );
  const reaped = await reap(engine, { shards: tickShards, remainingMs: options.remainingMs });
  if (failed[0] !== undefined) throw failed[0].error;
  if (left.length > 0)
    throw new Error(
      `the tick ran out of time to invoke the dispatcher for ${left.length} of ${shards.length} shards`,
    );
  return { shards: shards.length, reaped };
}
