/**
 * The reaper's share of its tick's time. The tick Lambda has a minute (its timeout, and the time
 * to the next tick) and reads the shards one after another; at a high shard count, or with
 * DynamoDB answering slowly (throttling, the SDK's retries), the shards do not all fit in it. A
 * pass stopped by the Lambda's timeout would stop at the same place each minute, and the shards
 * after it would never be read: their lost messages never re-sent. So a pass given its
 * invocation's remaining time (`context.getRemainingTimeInMillis()`) stops by itself before it,
 * between shards or between a shard's entries, and the next tick starts where it stopped
 * (`recordReaperStart`). Within a shard it reads pages sized to what is left, so that a pass
 * that begins a shard deals with some of its entries before it runs out, and its cursor moves on.
 */

/**
 * What a pass leaves of its invocation's time: the writes that close a shard (re-sends, the
 * cursor) after its last entry, and the tick's own end. One DynamoDB call that times out on all
 * of its attempts takes about 4 × 5 s (`AWS_TIMEOUTS`, shared/aws.ts): 20 s covers it.
 */
export const REAPER_TIME_MARGIN_MS = 20_000;

/** Entries one read of a shard's index asks for at most (keys only: well within a 1 MB page). */
const REAPER_PAGE = 1_000;
/**
 * Entries the first read of a shard asks for in a pass on the tick's time. A read's time grows with
 * the entries it reads where the index is throttled (its read capacity), and a shard's reads are
 * taken in hand page by page: a small first page is read and dealt with where a whole one, read in
 * what the pass had left, would leave no time to deal with any, every pass alike.
 */
const REAPER_FIRST_PAGE = 100;

export interface ReaperTime {
  /** Whether another shard fits: what is left, less the longest shard's pass so far, exceeds the margin. */
  nextShardFits(): boolean;
  /** Whether the shard under way takes no more entries: what is left is within the margin. */
  outOfTime(): boolean;
  /** Marks a shard's pass begun, and then ended: its length counts for the shards after it. */
  shardBegins(): void;
  shardEnds(): void;
  /** How many entries a shard's first read asks for. */
  firstPage(): number;
  /** Marks a read of a shard's index begun; `nextPage` measures it. */
  pageBegins(): void;
  /**
   * How many entries the shard's next read asks for, the read just made having asked for `asked`:
   * at that read's time an entry, it takes half of what is left above the margin (the other half
   * deals with what it reads), up to a page.
   */
  nextPage(asked: number): number;
}

/** The pass's time: unbounded without `remainingMs` (the sandbox's tick, a restart's recovery). */
export function reaperTime(remainingMs: (() => number) | undefined): ReaperTime {
  if (remainingMs === undefined)
    return {
      nextShardFits: () => true,
      outOfTime: () => false,
      shardBegins: () => {},
      shardEnds: () => {},
      firstPage: () => REAPER_PAGE,
      pageBegins: () => {},
      nextPage: () => REAPER_PAGE,
    };
  // Measured on the invocation's own countdown, so that no clock of the pass's is needed.
  let longestMs = 0;
  let beganAt = 0;
  let pageBeganAt = 0;
  return {
    nextShardFits: () => remainingMs() - longestMs > REAPER_TIME_MARGIN_MS,
    outOfTime: () => remainingMs() <= REAPER_TIME_MARGIN_MS,
    shardBegins: () => {
      beganAt = remainingMs();
    },
    shardEnds: () => {
      longestMs = Math.max(longestMs, beganAt - remainingMs());
    },
    firstPage: () => REAPER_FIRST_PAGE,
    pageBegins: () => {
      pageBeganAt = remainingMs();
    },
    nextPage: (asked) => {
      const left = remainingMs();
      // At least a millisecond: a read the countdown did not see end took next to nothing.
      const readMs = Math.max(1, pageBeganAt - left);
      const fits = Math.floor((asked * (left - REAPER_TIME_MARGIN_MS)) / (2 * readMs));
      return Math.min(REAPER_PAGE, Math.max(1, fits));
    },
  };
}
