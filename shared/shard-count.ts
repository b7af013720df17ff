import type { Engine } from "./engine.js";
import { raiseShardHighWater } from "./storage/shard-high-water.js";

/** By jobs table and count: the raises this process made or is making. */
const recorded = new Map<string, Promise<void>>();

/**
 * Raises the stage's shard high-water mark (`shared/storage/shard-high-water.ts`) to this
 * process's `maxShardCount`, once per process, before its first write that files a due entry or
 * a run in a shard: so a deploy that lowers `shardCount` before any tick ran under the raised
 * one still has the tick pass over what was filed above it. After the first, free (one
 * conditional write a process; a failed one is tried again by the next caller).
 */
export function recordShardCount(engine: Engine): Promise<void> {
  const count = engine.settings.maxShardCount;
  const key = `${engine.tables.jobs}#${count}`;
  let raise = recorded.get(key);
  if (raise === undefined) {
    raise = raiseShardHighWater(engine, count, engine.clock()).then(
      () => undefined,
      (error: unknown) => {
        recorded.delete(key);
        throw error;
      },
    );
    recorded.set(key, raise);
  }
  return raise;
}
