import type { Engine } from "../engine.js";
import { parseRunId } from "../keys.js";
import type { Job, Run, RunSummary } from "../model.js";
import { batchGetItems } from "./batch-get.js";
import { decodeRun } from "./items.js";
import { finishedAfter, ranForLastRun } from "./last-run.js";
import { runKeyOf } from "./run-reads.js";

/**
 * A recurring run's ending writes the run alone: its entry in the job's
 * `activeRuns` stays until the job's next admission drops it, and the job's
 * `lastRun` is brought up to it then. Until then, whoever reads the job reads
 * its listed runs too, and sees the job as they stand.
 */
export interface ListedRuns {
  /** The job as its runs stand: `activeRuns` without the ended ones, `lastRun` the latest that ran. */
  readonly job: Job;
  /** The listed runs that ended (or are gone): entries a write of the job may drop. */
  readonly ended: readonly string[];
  /** The job's buffered run (buffer_one) is still waiting: it has not ended. */
  readonly bufferedWaiting: boolean;
  /** The job's `rerunWaiting` while that run waits still (QUEUED or RUNNING); null otherwise. */
  readonly rerunWaiting: string | null;
  /**
   * The listed runs whose entry's lease lapsed but which read RUNNING under a live lease of their
   * own: their heartbeats extend the run's lease and failed to extend the entry (a throttled job
   * item), so they are under way as much as a run whose entry is live.
   */
  readonly heldPastEntry: readonly string[];
}

const underWay = (run: Run) => run.status === "QUEUED" || run.status === "RUNNING";

/**
 * A listed run counts as under way while QUEUED or RUNNING, and also while it ended never started
 * (fence 0) under a live lease: only a worker holding its start unwritten (run-fence.ts) lists
 * such a run, and a cancel that found it QUEUED ended it while its handler runs on until that
 * worker's next write fails.
 */
const listedUnderWay = (run: Run, leaseUntil: string, now: string) =>
  underWay(run) || (run.fence === 0 && leaseUntil > now);

/** The run is RUNNING under a lease of its own that has not lapsed, whatever its entry says. */
const heldUnderOwnLease = (run: Run, now: string) =>
  run.status === "RUNNING" && run.leaseUntil !== null && run.leaseUntil > now;

/**
 * The jobs as their listed runs stand: one consistent BatchGetItem of every
 * job's `activeRuns`, buffered run and waiting rerun (none when nothing is
 * listed), in the jobs' order.
 */
export async function readListedRuns(engine: Engine, jobs: readonly Job[]): Promise<ListedRuns[]> {
  const keys = jobs.flatMap((job) =>
    listedRunIds(job).flatMap((runId) => {
      const ref = parseRunId(runId);
      return ref === null ? [] : [runKeyOf(ref)];
    }),
  );
  const runs =
    keys.length === 0
      ? new Map<string, Run>()
      : new Map(
          (await batchGetItems(engine, engine.tables.runs, keys, { consistentRead: true }))
            .map(decodeRun)
            .map((run) => [run.runId, run]),
        );
  const now = engine.clock().toISOString();
  return jobs.map((job) => withListedRuns(job, runs, now));
}

const listedRunIds = (job: Job) => [
  ...Object.keys(job.activeRuns),
  ...(job.bufferedRunId === null ? [] : [job.bufferedRunId]),
  ...(job.rerunWaiting == null ? [] : [job.rerunWaiting]),
];

function withListedRuns(job: Job, runs: ReadonlyMap<string, Run>, now: string): ListedRuns {
  const activeRuns: Record<string, string> = {};
  const ended: string[] = [];
  const heldPastEntry: string[] = [];
  let lastRun = job.lastRun;
  for (const [runId, leaseUntil] of Object.entries(job.activeRuns)) {
    const run = runs.get(runId);
    if (run !== undefined && listedUnderWay(run, leaseUntil, now)) {
      activeRuns[runId] = leaseUntil;
      if (leaseUntil <= now && heldUnderOwnLease(run, now)) heldPastEntry.push(runId);
      continue;
    }
    ended.push(runId);
    const summary = run === undefined ? null : summaryOf(run);
    if (summary !== null && finishedAfter(summary, lastRun)) lastRun = summary;
  }
  const buffered = job.bufferedRunId === null ? undefined : runs.get(job.bufferedRunId);
  const rerun = job.rerunWaiting == null ? undefined : runs.get(job.rerunWaiting);
  return {
    job: ended.length === 0 ? job : { ...job, activeRuns, lastRun },
    ended,
    bufferedWaiting: buffered !== undefined && underWay(buffered),
    rerunWaiting: rerun !== undefined && underWay(rerun) ? rerun.runId : null,
    heldPastEntry,
  };
}

/** The run as its job's `lastRun`: only a run whose handler ran counts (`ranForLastRun`). */
function summaryOf(run: Run): RunSummary | null {
  if (!ranForLastRun(run) || run.finishedAt === null) return null;
  return {
    runId: run.runId,
    status: run.status,
    scheduledFor: run.scheduledFor,
    attempt: run.attempt,
    finishedAt: run.finishedAt,
  };
}
