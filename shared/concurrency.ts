/**
 * Runs `work` on every item, at most `concurrency` at a time, in order of start. An item that fails
 * does not stop the rest: every item is tried, and once all have settled the first failure is
 * thrown, so nothing is still in flight when the caller learns of it.
 */
export async function forEachConcurrently<T>(
  items: readonly T[],
  concurrency: number,
  work: (item: T) => Promise<void>,
): Promise<void> {
  let index = 0;
  let failure: { readonly error: unknown } | undefined;
  const lanes = Array.from({ length: Math.min(concurrency, items.length) }, async () => {
    while (index < items.length) {
      const item = items[index++];
      if (item === undefined) continue;
      try {
        await work(item);
      } catch (error) {
        failure ??= { error };
      }
    }
  });
  await Promise.all(lanes);
  if (failure !== undefined) throw failure.error;
}

/** Wakes everyone waiting at once. */
export class Wakeup {
  private waiting: (() => void)[] = [];

  wait(): Promise<void> {
    return new Promise((resolve) => this.waiting.push(resolve));
  }

  notify(): void {
    const waiting = this.waiting;
    this.waiting = [];
    for (const resolve of waiting) resolve();
  }
}

/**
 * Items queued under a key (a tenant), handed out one key at a time in turn, each key's own items
 * in the order they came: a key with a long queue gets one item per round, like every other key.
 */
export class RoundRobin<T> {
  /** In turn order: the key at the front goes next, then moves to the back. */
  private readonly queues = new Map<string, { items: T[]; head: number }>();
  private count = 0;

  get size(): number {
    return this.count;
  }

  push(key: string, item: T): void {
    const queue = this.queues.get(key);
    if (queue) queue.items.push(item);
    else this.queues.set(key, { items: [item], head: 0 });
    this.count++;
  }

  /**
   * The next key's oldest item, or undefined when empty. With `rank`, the key ranked lowest goes
   * next instead (ties in turn order).
   */
  shift(rank?: (key: string) => number): T | undefined {
    const picked = rank ? this.lowest(rank) : this.queues.entries().next().value;
    if (picked === undefined) return undefined;
    const [key, queue] = picked;
    const item = queue.items[queue.head];
    queue.head++;
    this.queues.delete(key);
    if (queue.head < queue.items.length) {
      // Compact now and then, so a long queue does not keep what it has handed out.
      if (queue.head >= 1024 && queue.head * 2 >= queue.items.length) {
        queue.items = queue.items.slice(queue.head);
        queue.head = 0;
      }
      this.queues.set(key, queue);
    }
    this.count--;
    return item;
  }

  private lowest(
    rank: (key: string) => number,
  ): [string, { items: T[]; head: number }] | undefined {
    let best: [string, { items: T[]; head: number }] | undefined;
    let bestRank = Number.POSITIVE_INFINITY;
    for (const entry of this.queues) {
      const r = rank(entry[0]);
      if (best === undefined || r < bestRank) {
        best = entry;
        bestRank = r;
      }
    }
    return best;
  }
}
