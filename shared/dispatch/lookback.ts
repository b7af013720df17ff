import { CLOCK_DISAGREEMENT_MS } from "../clock.js";
import { forEachConcurrently } from "../concurrency.js";
import type { Engine } from "../engine.js";
import { bucketsBetween } from "../keys.js";
import type { DueEntry } from "../model.js";
import { dueBucketPages } from "../storage/due-entries.js";
import type { ChainOptions, SweepStats } from "./claim-chain.js";
import { claimPages, earliest } from "./claim-pages.js";

/** Look-back buckets read at once: at most 15 of them, after an outage. */
const LOOKBACK_CONCURRENCY = 8;

/**
 * The buckets a pass reads again 15 minutes (`CLOCK_DISAGREEMENT_MS`) behind its line: those
 * 15 minutes before the first bucket it read (`startMs`, where the last completed pass said) up to
 * 15 minutes before where the next pass starts (`nextStartMs`), less those this pass read anyway.
 *
 * A writer whose clock is behind the passes' files an overdue entry in its own minute, before
 * the buckets the passes re-sweep (two minutes back); a bucket before the passes' line takes
 * entries only from writers that far behind. Read once more when the line has passed it by 15
 * minutes, each bucket is read after the last entry a writer up to 15 minutes behind could file
 * into it (17 when its write lands in the two minutes the re-sweep allows). Since each pass's
 * range begins where the last completed pass's ended, every bucket is read so once, by the first
 * completed pass whose line is 15 minutes past it: one bucket a pass in steady state, none for a
 * pass that does not move the line, at most 15 after an outage (the buckets since were read by
 * the backlog sweep, later still).
 */
export function lookbackBuckets(startMs: number, nextStartMs: number): string[] {
  const fromMs = startMs - CLOCK_DISAGREEMENT_MS;
  const toMs = Math.min(startMs, nextStartMs - CLOCK_DISAGREEMENT_MS);
  return toMs > fromMs ? bucketsBetween(new Date(fromMs), new Date(toMs - 1)) : [];
}

/** Job ids a look-back's warning names, at most: enough to find the writer, not a page of them. */
const WARNED_JOB_IDS = 10;

/**
 * Claims every due entry of the look-back buckets, strongly consistent and paginated, as the
 * backlog sweep does; returns the earliest bucket where an entry was left (a claim that failed for
 * now), which the next pass must start from, and how many entries it found. An entry there was
 * filed behind the passes' line by a writer whose clock is minutes behind theirs (or a write that
 * landed minutes late), and its run starts up to 15 minutes late: the pass warns, naming the
 * buckets and jobs, so an operator can find the host and set its clock right.
 */
export async function sweepLookback(
  engine: Engine,
  shard: number,
  minutes: readonly string[],
  options: ChainOptions & { readonly concurrency?: number | undefined },
  stats: SweepStats,
): Promise<{ leftFrom: string | null; entries: number }> {
  const left: (string | null)[] = [];
  const buckets = new Set<string>();
  const jobIds = new Set<string>();
  let entries = 0;
  async function* noted(minute: string): AsyncGenerator<DueEntry[]> {
    for await (const page of dueBucketPages(engine, shard, [minute])) {
      if (page.length > 0) buckets.add(minute);
      entries += page.length;
      for (const entry of page) if (jobIds.size < WARNED_JOB_IDS) jobIds.add(entry.jobId);
      yield page;
    }
  }
  await forEachConcurrently(minutes, LOOKBACK_CONCURRENCY, async (minute) => {
    left.push(await claimPages(engine, shard, noted(minute), options, stats));
  });
  if (entries > 0) {
    engine.obs.log.warn(
      "read due entries behind the passes' line, claimed late: a writer's clock minutes behind theirs, or a write that landed minutes late",
      { shard, entries, buckets: [...buckets].sort(), jobIds: [...jobIds] },
    );
  }
  return { leftFrom: earliest(left), entries };
}
