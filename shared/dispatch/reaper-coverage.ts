import type { ReaperStart } from "../storage/reaper-cursor.js";

/**
 * How long the reaper has left shards unread: a shard is read through when a pass reads its
 * overdue entries and takes each in hand (its reads did not fail, and the pass did not run out of
 * time before it or in it; an entry it failed on stops its cursor, which `ReaperBehind` shows). Every shard is read within ⌈S ÷ K⌉ ticks (K the shards a tick reaches),
 * unless one holds more than a pass deals with (the passes work through it, its cursor moving on,
 * and it goes unread until one gets to its end), or its reads fail or its first read alone
 * outlasts the tick's time each time it comes round: then it goes unread, and a run whose message
 * was lost there is not re-sent, while `ReaperShardsReached` (shards begun) stays at the shard
 * count. The passes carry the shards they did not read through
 * in `SHARDS`/`REAPER_START`, each with when one was last read through.
 */

/**
 * The shards a pass leaves unread, each with when a pass last read it through: as the previous
 * pass left it; else that pass's time, which did read it (a pass that leaves any shard unread
 * writes its time); else, after passes that read every shard and wrote nothing, this pass's time
 * (a tick early at most).
 */
export function unreadAfterPass(
  shards: readonly number[],
  readThrough: ReadonlySet<number>,
  previous: ReaperStart,
  now: Date,
): Map<number, string> {
  const readAt =
    previous.unreadSince.size > 0 && previous.recordedAt !== null
      ? previous.recordedAt
      : now.toISOString();
  const unread = new Map<number, string>();
  for (const shard of shards)
    if (!readThrough.has(shard)) unread.set(shard, previous.unreadSince.get(shard) ?? readAt);
  return unread;
}

/** How long ago the shard longest unread was last read through; 0 when the pass read every one. */
export function longestUnreadMs(unread: ReadonlyMap<number, string>, now: Date): number {
  let oldest = now.getTime();
  for (const since of unread.values()) {
    const at = Date.parse(since);
    if (!Number.isNaN(at)) oldest = Math.min(oldest, at);
  }
  return Math.max(0, now.getTime() - oldest);
}

/** Whether the pass need write nothing: it starts the next where this one started, owing nothing. */
export function nothingToRecord(
  previous: ReaperStart,
  next: { readonly shard: number; readonly unreadSince: ReadonlyMap<number, string> },
): boolean {
  return (
    next.shard === previous.shard && next.unreadSince.size === 0 && previous.unreadSince.size === 0
  );
}
