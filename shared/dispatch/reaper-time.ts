/**
 * The reaper's share of its tick's time. The tick Lambda has a minute (its timeout, and the time
 * to the next tick) and reads the shards one after another; at a high shard count, or with
 * DynamoDB answering slowly (throttling, the SDK's retries), the shards do not all fit in it. A
 * pass stopped by the Lambda's timeout would stop at the same place each minute, and the shards
 * after it would never be read: their lost messages never re-sent. So a pass given its
 * invocation's remaining time (`context.getRemainingTimeInMillis()`) stops by itself before it,
 * between shards or between a shard's entries, and the next tick starts where it stopped
 * (`recordReaperStart`).
 */

/**
 * What a pass leaves of its invocation's time: the writes that close a shard (re-sends, the
 * cursor) after its last entry, and the tick's own end. One DynamoDB call that times out on all
 * of its attempts takes about 4 × 5 s (`AWS_TIMEOUTS`, shared/aws.ts): 20 s covers it.
 */
export const REAPER_TIME_MARGIN_MS = 20_000;

export interface ReaperTime {
  /** Whether another shard fits: what is left, less the longest shard's pass so far, exceeds the margin. */
  nextShardFits(): boolean;
  /** Whether the shard under way takes no more entries: what is left is within the margin. */
  outOfTime(): boolean;
  /** Marks a shard's pass begun, and then ended: its length counts for the shards after it. */
  shardBegins(): void;
  shardEnds(): void;
}

/** The pass's time: unbounded without `remainingMs` (the sandbox's tick, a restart's recovery). */
export function reaperTime(remainingMs: (() => number) | undefined): ReaperTime {
  if (remainingMs === undefined)
    return {
      nextShardFits: () => true,
      outOfTime: () => false,
      shardBegins: () => {},
      shardEnds: () => {},
    };
  // Measured on the invocation's own countdown, so that no clock of the pass's is needed.
  let longestMs = 0;
  let beganAt = 0;
  return {
    nextShardFits: () => remainingMs() - longestMs > REAPER_TIME_MARGIN_MS,
    outOfTime: () => remainingMs() <= REAPER_TIME_MARGIN_MS,
    shardBegins: () => {
      beganAt = remainingMs();
    },
    shardEnds: () => {
      longestMs = Math.max(longestMs, beganAt - remainingMs());
    },
  };
}
