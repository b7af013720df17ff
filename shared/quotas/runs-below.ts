import type { Engine } from "../engine.js";
import type { Job } from "../model.js";
import type { QuotaUsage } from "../storage/tenant-quotas.js";
import { readJobsBelow, runsPerRun, timesRuns } from "./run-measure.js";

/**
 * What an edit of the schedule of a job with jobs after it adds to the tenant's runs per minute:
 * `added` (the change of its own measure) times the runs one run of the job makes, which only a
 * read of the jobs below it (up to 1,000 dependents, and theirs) tells (run-measure.ts).
 *
 * This process keeps its last such read of each job for `quotaRecountMs` (5 s, on a monotonic
 * clock), so a storm of edits over the limit does not read the jobs below once per edit:
 *
 * - `exactly` reads them, consistently, after the job was read; a read of the same job at the
 *   same `linkRevision` still in flight is shared. A job linked in below the job (a create or edit
 *   of a dependent, at any depth) adds one to its `linkRevision` in the same write, so a read that
 *   started after another request read the job at that revision counts every job that request
 *   would have: an accepted edit reserves what it adds.
 * - `recent` answers from the last read that ended, for a refusal only: taken within the last
 *   `quotaRecountMs` at the same `linkRevision`, while the usage it is checked against is no lower
 *   than the stored usage of the request that read it (a cancel or delete below gives its share
 *   back, lowering it, and a recount that takes off what ended does too). Jobs below that ended by
 *   their runs or were edited away count until then: an upper bound, as the stored usage is.
 */
export interface RunsBelow {
  recent(usage: QuotaUsage): number | undefined;
  exactly(stored: QuotaUsage): Promise<number>;
}

interface Read {
  readonly linkRevision: number;
  readonly runs: Promise<number>;
  readonly startedAt: number;
  /** The stored usage's runs per minute of the request that read it. */
  readonly storedRuns: number;
  /** Once the read ended. */
  settled?: number;
}

/** Jobs whose reads are kept per process; past it, the cache starts over. */
const MAX_KEPT = 10_000;

const reads = new WeakMap<Engine, Map<string, Read>>();

export function runsBelow(
  engine: Engine,
  job: Job,
  added: number,
  elapsedMs: () => number = () => performance.now(),
): RunsBelow {
  let kept = reads.get(engine);
  if (kept === undefined) {
    kept = new Map();
    reads.set(engine, kept);
  }
  const cache = kept;
  const key = `${job.tenantId}\n${job.jobId}`;
  const linkRevision = job.linkRevision ?? 0;
  return {
    recent(usage) {
      const read = cache.get(key);
      if (
        read?.settled === undefined ||
        read.linkRevision !== linkRevision ||
        elapsedMs() - read.startedAt >= engine.settings.quotaRecountMs ||
        usage.runsPerMinute < read.storedRuns
      )
        return undefined;
      return timesRuns(added, read.settled);
    },
    async exactly(stored) {
      const inFlight = cache.get(key);
      if (
        inFlight !== undefined &&
        inFlight.settled === undefined &&
        inFlight.linkRevision === linkRevision
      )
        return timesRuns(added, await inFlight.runs);
      const runs = readJobsBelow(engine, job).then((below) => runsPerRun(job.jobId, below));
      const read: Read = {
        linkRevision,
        runs,
        startedAt: elapsedMs(),
        storedRuns: stored.runsPerMinute,
      };
      if (cache.size >= MAX_KEPT) cache.clear();
      cache.set(key, read);
      try {
        read.settled = await runs;
      } catch (error) {
        // A failed read is not kept: the next edit reads again.
        if (cache.get(key) === read) cache.delete(key);
        throw error;
      }
      return timesRuns(added, read.settled);
    },
  };
}
