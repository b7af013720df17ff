import type { Engine } from "../engine.js";
import type { DueEntry } from "../model.js";
import { type DueEntryScanPage, scanDueEntriesBefore } from "../storage/due-entries.js";
import type { UnfinishedScan } from "../storage/lease.js";
import type { ChainOptions, SweepStats } from "./claim-chain.js";
import { claimPages } from "./claim-pages.js";

/**
 * The backlog of a shard no pass has completed on: every due entry of the
 * shard in a bucket before the scan's bound, however old, found by one strongly
 * consistent scan of the jobs table (bucket by bucket there is no telling
 * where to start). It runs once in a shard's life, over as many passes as it
 * takes: each reads pages until its time budget runs out or a Scan request
 * fails, and returns the key the next one goes on from (`nextKey`, undefined
 * once the scan has ended).
 * Entries written meanwhile are filed at the current minute or later, which
 * the recent sweeps read.
 */
export async function sweepUnpositionedBacklog(
  engine: Engine,
  shard: number,
  scan: UnfinishedScan,
  deadlineMs: number,
  options: ChainOptions & { readonly concurrency?: number | undefined },
  stats: SweepStats,
): Promise<{ nextKey: Record<string, unknown> | null | undefined; leftFrom: string | null }> {
  const position: { nextKey: Record<string, unknown> | null | undefined } = {
    nextKey: scan.from,
  };
  let pagesRead = 0;
  let failed: unknown;
  async function* pages(): AsyncGenerator<DueEntry[]> {
    do {
      if (engine.clock().getTime() >= deadlineMs) return;
      let page: DueEntryScanPage;
      try {
        page = await scanDueEntriesBefore(
          engine,
          shard,
          scan.before,
          position.nextKey ?? undefined,
        );
      } catch (error) {
        // Ends this pass's share of the scan as its time running out does, so the pages read are
        // recorded: a failure as far into every pass (a provisioned table's burst used up) would
        // otherwise hold the scan there for good.
        failed = error;
        return;
      }
      pagesRead++;
      yield page.entries;
      position.nextKey = page.nextKey;
    } while (position.nextKey);
  }
  const leftFrom = await claimPages(engine, shard, pages(), options, stats);
  engine.obs.log.info("scanned for the backlog of a shard never swept", {
    shard,
    pages: pagesRead,
    resumed: scan.from !== null,
    complete: position.nextKey === undefined,
  });
  if (failed !== undefined) {
    engine.obs.log.error("could not read the scan's next page; the next pass goes on from it", {
      shard,
      error: String(failed),
    });
  }
  return { nextKey: position.nextKey, leftFrom };
}
