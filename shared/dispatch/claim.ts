import { CANCEL_REASONS } from "../cancel-reasons.js";
import { forEachConcurrently } from "../concurrency.js";
import type { Engine } from "../engine.js";
import { ConcurrentUpdateError } from "../errors.js";
import type { DueEntry, Run } from "../model.js";
import { METRICS } from "../observability.js";
import { recordShardCount } from "../shard-count.js";
import { putRunsUnconditionally, writeClaim } from "../storage/claim.js";
import { removeOrphanDueEntry } from "../storage/due-entries.js";
import { retryOnContention } from "../storage/dynamo-errors.js";
import { completedJobExpiresAt } from "../storage/retention.js";
import { endRunAsSeen } from "../storage/run-end-unowned.js";
import { getJob } from "../storage/run-reads.js";
import { type Known, noneKnown, planWrites, queuedThrough } from "./claim-writes.js";
import { claimReachEnd, mayAwaitItsJob } from "./fast-path-window.js";

/** Endings in flight at once of the runs a claim lost to a cancel left (a claim's puts, at most 50). */
const LEFT_RUN_ENDINGS_IN_FLIGHT = 16;

export type ClaimResult =
  | {
      readonly outcome: "claimed";
      readonly runs: readonly Run[];
      readonly skipped: number;
      /** The job's next due entry; the caller claims it too when it is inside its horizon. */
      readonly next: DueEntry | null;
      /** The entry is still there (a plain commit whose delete failed): read its bucket again. */
      readonly entryLeft: boolean;
    }
  /** Another claimer took it, or it was deleted by a pause, cancel or edit. */
  | { readonly outcome: "lost" }
  /** The job no longer points at this entry; the orphan was removed. */
  | { readonly outcome: "stale" };

export interface ClaimOptions {
  readonly now: Date;
  readonly horizonEnd: Date;
  /**
   * Occurrences planned before this instant are queued. Absent: the claim's reach
   * (`claimReachEnd`), up to 14 minutes past now. An edit's claim of what the old schedule has
   * due passes just past its `now`, so nothing not yet due is queued under that schedule.
   */
  readonly reachEnd?: Date;
}

/**
 * Claims one due entry: plan which occurrences run, which are SKIPPED and
 * where the job goes next, then write it (`writeClaim`: the QUEUED runs and
 * the SKIPPED records with conditional puts, then one transaction that moves
 * the entry and the job on, retrying contention). What a failed condition says decides the next
 * step: an entry rewritten since it was read (an edit) is claimed as it is
 * now; occurrences already handled are planned again without them; an entry
 * its job no longer points at is removed as an orphan; a lost race is
 * reported; anything else is thrown for the caller to set the entry aside.
 */
export async function claimDueEntry(
  engine: Engine,
  entry: DueEntry,
  options: ClaimOptions,
): Promise<ClaimResult> {
  // A claim files its runs and the job's next entry in shards (under this deployment's count).
  await recordShardCount(engine);
  let current = entry;
  let known: Known = noneKnown();
  // Marks this claim's run puts: a claim that fails for good deletes its own, and no other.
  const token = Math.floor(engine.random() * 2 ** 48).toString(36);
  for (let round = 1; ; round++) {
    const step = await attemptClaim(engine, current, options, known, token);
    if ("result" in step) return step.result;
    if (round >= MAX_CLAIM_ROUNDS) {
      throw new ConcurrentUpdateError(
        `the claim of ${entry.key.sk} found it changed ${round} times; the next pass tries again`,
      );
    }
    if ("reread" in step) {
      current = step.reread;
      known = noneKnown();
    } else {
      known = step.known;
    }
  }
}

/** Rounds of one claim: a re-read entry or occurrences found already handled start a new one. */
const MAX_CLAIM_ROUNDS = 4;

type ClaimStep =
  | { readonly result: ClaimResult }
  /** The entry was rewritten (an edit kept its key): claim it as it is now. */
  | { readonly reread: DueEntry }
  /** Some occurrences are handled already: plan again without them. */
  | { readonly known: Known };

/** A new job's first claim, planned: its run items (QUEUED, and SKIPPED records) to write before the job. */
export interface ClaimBeforeCreate {
  readonly runs: readonly Run[];
  /** The items to put, unconditionally (a new job's runs cannot exist yet), before the job. */
  readonly runItems: readonly Record<string, unknown>[];
  readonly next: DueEntry | null;
  /** Occurrences queued, for the job's count; and whether its end condition completed it. */
  readonly occurrencesQueued: number;
  readonly ended: boolean;
  /** What the plan has to say (a fire_all catch-up cut at its cap), logged once it is written. */
  readonly note: string | null;
}

/**
 * Plans the claim of a new job's first entry (see `claimBeforeCreate`)
 * without writing it, so a batch of creates can write the runs of many jobs
 * in shared requests; `claimedBeforeCreate` then records it as claimed.
 */
export function planClaimBeforeCreate(
  engine: Engine,
  entry: DueEntry,
  now: Date,
  horizonEnd: Date,
): ClaimBeforeCreate {
  const planned = planWrites(engine, entry, now, claimReachEnd(now, horizonEnd), noneKnown());
  return {
    runs: planned.queued.map((q) => q.run),
    runItems: [...planned.queued.map((q) => q.item), ...planned.skippedItems],
    next: planned.next,
    occurrencesQueued: queuedThrough(entry, planned.plan),
    ended: planned.plan.ended === true,
    note: planned.plan.note,
  };
}

/** What follows a new job's first claim once its runs are written: the note and the count. */
export function claimedBeforeCreate(
  engine: Engine,
  entry: DueEntry,
  claim: ClaimBeforeCreate,
): void {
  if (claim.note) engine.obs.log.warn(claim.note, { tenantId: entry.tenantId, jobId: entry.jobId });
  engine.obs.metrics.add(METRICS.claims, claim.runs.length, "Count");
}

/**
 * A job created due inside the fast-path window is claimed as it is created,
 * so no due entry is written only to be deleted a moment later. Its first runs
 * are written here, with plain writes, before the job: the caller's write of
 * the job (pointing at `next`, which it writes with the job) is the commit.
 * Should that write never happen, the runs belong to no job, and a run of a
 * job that does not exist is cancelled by its worker, never run.
 */
export async function claimBeforeCreate(
  engine: Engine,
  entry: DueEntry,
  now: Date,
  horizonEnd: Date,
): Promise<ClaimBeforeCreate> {
  const claim = planClaimBeforeCreate(engine, entry, now, horizonEnd);
  // A new job's runs cannot exist yet, so these need no conditions and can go in batches.
  await putRunsUnconditionally(engine, claim.runItems);
  claimedBeforeCreate(engine, entry, claim);
  return claim;
}

async function attemptClaim(
  engine: Engine,
  entry: DueEntry,
  options: ClaimOptions,
  known: Known,
  token: string,
): Promise<ClaimStep> {
  const { now, horizonEnd, reachEnd = claimReachEnd(now, horizonEnd) } = options;
  const { plan, queued, skippedItems, next } = planWrites(engine, entry, now, reachEnd, known);
  // Everything this claim covered was skipped (a one-off past its grace under `skip`) and the
  // schedule has nothing after it: the job is complete, not ACTIVE with nothing pending.
  const leavesNothing = queued.length === 0 && next === null && known.run.size === 0;
  const completes = leavesNothing || plan.ended === true;
  const written = await writeClaim(engine, {
    entry,
    advance: plan.advancesJob
      ? {
          next,
          occurrencesQueued: queuedThrough(entry, plan),
          // An entry written before entries carried runsOnMs: the retention alone, as then.
          completes: completes
            ? {
                expiresAt: completedJobExpiresAt(now, entry.end?.runsOnMs ?? 0, engine.settings),
              }
            : null,
        }
      : null,
    queued,
    alreadyPut: known.put,
    token,
    skipped: skippedItems,
    mayAwaitItsJob: mayAwaitItsJob(entry, now),
  });
  switch (written.outcome) {
    case "committed":
      break;
    case "entry-rewritten":
      return { reread: written.entry };
    case "entry-gone":
      engine.obs.metrics.add(METRICS.claimsLost, 1, "Count");
      await cancelRunsLeftForEndedJob(engine, written.left);
      return { result: { outcome: "lost" } };
    case "job-moved": {
      if (written.jobGone && mayAwaitItsJob(entry, now)) {
        engine.obs.log.warn("left a due entry whose job is not written yet", {
          tenantId: entry.tenantId,
          jobId: entry.jobId,
          dueKey: entry.key,
        });
        return { result: { outcome: "stale" } };
      }
      const rewritten = await removeOrphan(engine, entry);
      return rewritten ? { reread: rewritten } : { result: { outcome: "stale" } };
    }
    case "orphan-removed":
      engine.obs.metrics.add(METRICS.staleDueEntries, 1, "Count");
      return { result: { outcome: "stale" } };
    case "occurrences-handled":
      // These occurrences are handled already: a run past QUEUED (say, a run the reaper re-sent
      // after an earlier claim died before its transaction) or ended. Advance over them rather
      // than run them twice.
      engine.obs.log.warn("claim found occurrences already handled; claiming without them", {
        tenantId: entry.tenantId,
        jobId: entry.jobId,
        running: written.running,
      });
      return {
        known: {
          run: new Set([...known.run, ...written.running]),
          put: new Set([...known.put, ...written.put]),
        },
      };
  }

  afterClaim(engine, entry, plan.note, queued.length);
  return {
    result: {
      outcome: "claimed",
      runs: queued.map((q) => q.run),
      skipped: written.skipped,
      next,
      entryLeft: written.entryLeft === true,
    },
  };
}

/**
 * The runs a claim put before a cancel (or a delete's cancel) took its entry. The cancel's sweep
 * ended the job's QUEUED runs before these landed, and unsent, they would wait QUEUED until the
 * reaper's deadline, a lease past their due time (up to the claim reach, 14 minutes), before a
 * worker cancelled them: they end CANCELLED now, as the sweep would have ended them. Each is
 * ended only as put (QUEUED, unstarted), so a run a worker took meanwhile is left to it. Under a
 * pause or an edit, or another claimer's win, they stay, as runs claimed before those do.
 *
 * An ending that meets a transaction on its run (a worker's ending of the winner's copy) is sent
 * again. One that fails for good leaves its run to the reaper and its worker, as a claimer that
 * died here would: the claim is still lost, not failed, for its entry is gone and a pass that
 * read its bucket again would find nothing to claim.
 */
async function cancelRunsLeftForEndedJob(engine: Engine, left: readonly Run[]): Promise<void> {
  const [first] = left;
  if (!first) return;
  try {
    const job = await getJob(engine, first.jobId);
    if (job !== null && job.status !== "CANCELLED") return;
    const now = engine.clock();
    await forEachConcurrently(left, LEFT_RUN_ENDINGS_IN_FLIGHT, async (run) => {
      await retryOnContention(engine, "end-left-run", () =>
        endRunAsSeen(engine, run, "CANCELLED", CANCEL_REASONS["job-cancel"], now, {
          by: "job-cancel",
        }),
      );
    });
  } catch (error) {
    engine.obs.log.warn("left runs of a lost claim to the reaper; ending them failed", {
      tenantId: first.tenantId,
      jobId: first.jobId,
      runs: left.length,
      error: String(error),
    });
  }
}

/** What follows a committed claim: the plan's note, and the count of the runs it queued. */
function afterClaim(engine: Engine, entry: DueEntry, note: string | null, queued: number): void {
  if (note) engine.obs.log.warn(note, { tenantId: entry.tenantId, jobId: entry.jobId });
  engine.obs.metrics.add(METRICS.claims, queued, "Count");
}

/** An entry its job no longer points at: removed, unless it was rewritten meanwhile (returned). */
async function removeOrphan(engine: Engine, entry: DueEntry): Promise<DueEntry | null> {
  engine.obs.metrics.add(METRICS.staleDueEntries, 1, "Count");
  return removeOrphanDueEntry(engine, entry);
}
