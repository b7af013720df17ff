import { FINAL_RUN_STATUSES, type Run } from "./types.js";

/**
 * How far before the previous poll began the next one reads occurrences from: a run written between
 * two polls at an occurrence a little before the second (a trigger's or a dependent's run, stamped
 * by the API's clock, which may run behind the caller's; a claim a dispatcher pass late) is read.
 */
export const LOOK_BACK_MS = 2 * 60_000;

/**
 * Polls of a job's runs that read, after the first, only the runs that can have changed since the
 * poll before, so that a poll's requests do not grow with the job's history: `read(from)` lists
 * the job's runs, newest occurrence first, of occurrences at or after `from` (every run when
 * undefined), and each call reads from the earliest of: LOOK_BACK_MS before the previous poll
 * began; the oldest run that had not ended then (queued or running: it may end, or fail and its
 * retry be written at its occurrence); and the newest occurrence seen so far (a claim writes no
 * occurrence before the job's pending one, which lies after every run it queued: so a resumed
 * job's late occurrence is read, however old). The first call reads every run.
 *
 * A run written between two polls at an occurrence older than all of these is not read: a replay
 * of a dead run the earlier polls had seen ended, or a claim after a dispatcher outage of an
 * occurrence older than a trigger since. Such a run is read by its id (`runs.get`).
 */
export function runPolls(
  read: (from: Date | undefined) => Promise<Run[]>,
  now: () => number = Date.now,
): () => Promise<Run[]> {
  let from: Date | undefined;
  let newest = Number.NEGATIVE_INFINITY;
  return async () => {
    const startedAt = now();
    const runs = await read(from);
    let floor = startedAt - LOOK_BACK_MS;
    for (const run of runs) {
      const occurrence = Date.parse(run.scheduledFor);
      newest = Math.max(newest, occurrence);
      if (!FINAL_RUN_STATUSES.includes(run.status)) floor = Math.min(floor, occurrence);
    }
    // No run seen yet: the next poll reads every run, which is none or a few new ones.
    floor = Math.min(floor, newest);
    from = Number.isFinite(floor) ? new Date(floor) : undefined;
    return runs;
  };
}

/** Every run of a listing (its pages followed), in its order. */
async function everyRunOf(listing: AsyncIterable<Run>): Promise<Run[]> {
  const runs: Run[] = [];
  for await (const run of listing) runs.push(run);
  return runs;
}

/**
 * The runs of a listing, newest occurrence first, `pageSize` to a page, down to the first page that
 * reaches an occurrence before `floor`, and no further: at least the newest page, and every run of
 * an occurrence at or after `floor`, however many pages that takes.
 */
export async function runsDownTo(
  listing: AsyncIterable<Run>,
  floor: number,
  pageSize: number,
): Promise<Run[]> {
  const runs: Run[] = [];
  for await (const run of listing) {
    runs.push(run);
    if (runs.length % pageSize === 0 && Date.parse(run.scheduledFor) < floor) break;
  }
  return runs;
}

/**
 * runPolls of a listing of a job's runs, `pageSize` to a page: the first poll reads the newest
 * page, and further pages only down to the occurrences before `firstFloor` (runsDownTo), so that
 * its requests do not grow with the job's history; each later poll reads every page from where
 * runPolls reads, looking back from `now`. `list(from)` lists the runs of occurrences at or after
 * `from` (every run when undefined), newest first.
 */
export function pagedRunPolls(
  list: (from: Date | undefined) => AsyncIterable<Run>,
  firstFloor: number,
  pageSize: number,
  now: () => number,
): () => Promise<Run[]> {
  return runPolls(
    (from) =>
      from === undefined ? runsDownTo(list(from), firstFloor, pageSize) : everyRunOf(list(from)),
    now,
  );
}

/**
 * Where the first poll of pagedRunPolls may not have read every run: up to the oldest occurrence
 * it read when it read `pageSize` runs or more (a page may end between a retry and the attempt
 * before it, the first run of the next page), else nowhere (-Infinity). A later poll reads there
 * when a run it read there had not ended; a run it finds there, or before, ended, may have ended
 * before the first poll.
 */
export function unsureUpTo(firstRead: readonly Run[], pageSize: number): number {
  if (firstRead.length < pageSize) return Number.NEGATIVE_INFINITY;
  return firstRead.reduce(
    (oldest, run) => Math.min(oldest, Date.parse(run.scheduledFor)),
    Number.POSITIVE_INFINITY,
  );
}
