import { CLOCK_DISAGREEMENT_MS } from "../clock.js";
import { forEachConcurrently } from "../concurrency.js";
import type { Engine } from "../engine.js";
import type { Run } from "../model.js";
import { METRICS, runLogKeys } from "../observability.js";
import {
  entryId,
  type IndexStart,
  type InflightEntry,
  type InflightRun,
  overduePage,
  pushInflightDeadline,
  readInflightRuns,
} from "../storage/inflight.js";
import { keepCompletedJobForWaitingRun } from "../storage/job-status.js";
import {
  advanceReaperCursor,
  cursorDeadline,
  recordReaperStart,
  rewindReaperCursor,
} from "../storage/reaper-cursor.js";
import { MAX_RESEND_INTERVAL_MS, runExpiresAt } from "../storage/retention.js";
import { longestUnreadMs, nothingToRecord, unreadAfterPass } from "./reaper-coverage.js";
import { type Resend, resendInterval, resendRuns, resendsSinceStart } from "./reaper-resend.js";
import { reaperTime } from "./reaper-time.js";
import { readTickShards, shardsFrom, shardsOf, type TickShards } from "./tick-shards.js";

export interface ReapResult {
  /**
   * Index entries the pass dealt with (or tried to), the ended runs' included: not those a pass out
   * of time read and left for the next tick.
   */
  readonly examined: number;
  readonly resent: number;
  /** Shards the pass began (the last one read in part, when it ran out of time there). */
  readonly shardsReached: number;
}

/**
 * Every run's entry is read once, at its deadline: a pass reads the entries
 * whose deadline passed since the last one. 10,000 a shard covers the eight
 * default shards at 1,300 runs a second with one pass a minute; past that the
 * cursor falls behind, and lost messages are re-sent later, not never.
 */
const MAX_PER_SHARD = 10_000;
/**
 * A pass reads the entries whose deadline is this far behind its now, and the
 * next pass the ones after. Every deadline is written at least a lease (6 s or
 * more) after a clock reading taken just before its write (the reaper's own
 * pushes are conditioned on the entry it read, so a concurrent pass that
 * passed it has moved it first); this covers index propagation and clock skew
 * between hosts on top, so no entry turns up behind the cursor later.
 */
export const REAPER_SETTLE_MS = 5_000;

export interface ReapOptions {
  readonly now?: Date;
  /**
   * Runs whose deadline is before this are re-sent; by default those before the settle line
   * (now less REAPER_SETTLE_MS). The sandbox passes the far future after restarting its in-memory
   * queue, which lost every message.
   */
  readonly overdueBefore?: Date;
  /** Bounds one pass; the rest waits for the next tick. */
  readonly maxPerShard?: number;
  /** The shards and cursors the tick read before its dispatcher passes; read here when absent. */
  readonly shards?: TickShards;
  /**
   * The invocation's remaining time (Lambda's `context.getRemainingTimeInMillis`): the pass stops
   * before it (`reaper-time.ts`), and the next tick starts at the shard it stopped at. Unbounded
   * when absent.
   */
  readonly remainingMs?: () => number;
  /**
   * With `overdueBefore` past now: given each ended run the pass finds, whose job's side may be
   * missing (`recoverLostMessages`, shared/execution/restart-recovery.ts).
   */
  readonly repairEnded?: (run: Run) => Promise<void>;
}

/** An entry the cursor may pass (its run ended, or its deadline moved on), or one to read again. */
type Examined = "done" | "unsettled";

/**
 * Where a shard's next pass reads from, when that is behind the settle line: the first entry its
 * cursor did not pass, or the last one read by a pass that stopped with more to read (at its
 * maximum, or out of time between pages). Undefined when the shard's reading caught up.
 */
function stoppedBehind(
  entries: readonly InflightEntry[],
  passed: number,
  settledBefore: string,
  more: boolean,
): string | undefined {
  const left = entries[passed];
  if (left !== undefined) return left.deadline < settledBefore ? left.deadline : undefined;
  return more ? entries.at(-1)?.deadline : undefined;
}

export { MAX_RESEND_INTERVAL_MS };

/**
 * Finds runs whose message should have been acted on by now and was not:
 * QUEUED past its start deadline (claimed but never sent, or the message was
 * lost), or RUNNING a lease past its lapsed lease (no worker picked the
 * message up again). Sends each again and pushes its deadline on by a lease,
 * doubling with each re-send no worker has started since (`resendInterval`).
 * Lapsed means the lease, read from the run; the index only says when to look.
 * Repeating a send is harmless: a run starts only once. Runs that ended keep
 * their index entry; each shard's cursor keeps the reaper from reading one
 * twice (`reaper-cursor.ts`). After a restart whose queue lost its messages
 * (`overdueBefore` past now), an ended run may also have lost the delivery
 * that would have written its job's side (its worker died between the run's
 * write and the job's): each is given to `repairEnded`.
 */
export async function reap(engine: Engine, options: ReapOptions = {}): Promise<ReapResult> {
  const now = options.now ?? engine.clock();
  const overdueBefore = options.overdueBefore ?? now;
  // Asked to look past now: the caller knows the queue lost its messages, live leases included.
  const messagesLost = overdueBefore > now;
  const settled = new Date(now.getTime() - REAPER_SETTLE_MS);
  const settledBefore = settled.toISOString();
  let examined = 0;
  let resent = 0;
  let behindMs = 0;
  let failure: { readonly error: unknown } | undefined;
  const tickShards = options.shards ?? (await readTickShards(engine, now));
  const cursors = tickShards.cursors;
  const time = reaperTime(options.remainingMs);
  // From where the last pass out of time stopped, round: each shard is read within the ticks it
  // takes to go round once, however many the tick's time holds.
  const order = shardsFrom(shardsOf(tickShards), tickShards.reaperStart.shard);
  let shardsReached = 0;
  const readThrough = new Set<number>();
  /** Where the next pass starts, when this one ran out of time before the end of its round. */
  let resumeAt: number | undefined;
  for (const [position, shard] of order.entries()) {
    if (!time.nextShardFits()) {
      resumeAt = shard;
      break;
    }
    time.shardBegins();
    shardsReached++;
    try {
      // A shard left part-read goes last in the next round: the shards after it come first.
      if (await reapShard(shard)) {
        resumeAt = order[(position + 1) % order.length];
        break;
      }
      readThrough.add(shard);
    } catch (error) {
      // The shards after it are reaped all the same (thrown here, a shard whose reads fail every
      // time would stop every pass there, and the shards after it would never be read).
      failure ??= { error };
    } finally {
      time.shardEnds();
    }
  }
  const unreadSince = unreadAfterPass(order, readThrough, tickShards.reaperStart, now);
  const unreadMs = longestUnreadMs(unreadSince, now);
  if (resumeAt !== undefined)
    engine.obs.log.warn(
      "reaper ran out of the tick's time; the next tick starts where it stopped",
      {
        shardsReached,
        shards: order.length,
        nextShard: resumeAt,
        unreadShards: unreadSince.size,
        longestUnreadMs: unreadMs,
      },
    );
  const left = { shard: resumeAt ?? tickShards.reaperStart.shard, unreadSince };
  // Written when it changes where the next pass starts or which shards are owed (a pass owing any
  // writes its time, which the next counts from); the error is thrown once the metrics are in
  // (the tick fails, and its errors alarm counts it).
  if (!nothingToRecord(tickShards.reaperStart, left))
    await recordReaperStart(engine, left, now).catch((error: unknown) => {
      failure ??= { error };
    });
  engine.obs.metrics.add(METRICS.reaperShardsReached, shardsReached, "Count");
  engine.obs.metrics.add(METRICS.reaperLongestUnreadMs, unreadMs, "Milliseconds");
  engine.obs.metrics.add(METRICS.reaperBehindMs, behindMs, "Milliseconds");
  if (failure) throw failure.error;
  return { examined, resent, shardsReached };

  /** Reads one shard's overdue entries and deals with them; true when it ran out of time part-way. */
  async function reapShard(shard: number): Promise<boolean> {
    let outOfTime = false;
    const cursor = cursors.get(shard);
    let start: IndexStart;
    if (cursor === undefined) start = { fromStart: true };
    else if (cursorDeadline(cursor) < settledBefore) start = cursor;
    else {
      // Moved back, not only read back: the passes after this one read on from where it
      // did, so an entry behind the cursor that falls due after this pass is read too.
      start = { from: new Date(settled.getTime() - CLOCK_DISAGREEMENT_MS).toISOString() };
      await rewindReaperCursor(engine, shard, cursor, start.from);
    }
    const max = options.maxPerShard ?? MAX_PER_SHARD;
    // Every entry read so far and what became of it; the cursor has passed the first `passed`.
    const entries: InflightEntry[] = [];
    const outcomes: Examined[] = [];
    // The runs this pass has taken in hand: one it re-filed further along is met again on a later
    // page when the pass reads past the settle line (a restart's reads every run waiting), and is
    // not taken in hand twice, which would send it twice and double its interval.
    const takenInHand = new Set<string>();
    let passed = 0;
    let more = true;
    let limit = time.firstPage();
    // A page at a time, each dealt with before the next is read: a pass out of time part-way has
    // moved the cursor past what it dealt with, and the next reads on from there, where one that
    // read every page first ran out before it dealt with any, each time alike.
    while (more && entries.length < max && !outOfTime) {
      if (time.outOfTime()) {
        outOfTime = true;
        break;
      }
      time.pageBegins();
      const page = await overduePage(engine, shard, {
        start,
        after: entries.at(-1),
        // After a restart every run still waiting is re-sent, however far ahead its deadline.
        before: messagesLost ? overdueBefore : settled,
        limit: Math.min(limit, max - entries.length),
      });
      limit = time.nextPage(limit);
      more = page.more;
      entries.push(...page.entries);
      outcomes.push(...(await takeInHand(page.entries)));
      // The cursor passes the entries dealt with, in order, up to the first one that was not.
      const before = passed;
      for (let next = entries[passed]; next !== undefined; next = entries[passed]) {
        if (outcomes[passed] !== "done" || next.deadline >= settledBefore) break;
        passed++;
      }
      const last = entries[passed - 1];
      if (passed > before && last !== undefined) await advanceReaperCursor(engine, shard, last);
    }
    const stoppedAt = stoppedBehind(entries, passed, settledBefore, more);
    if (stoppedAt !== undefined)
      behindMs = Math.max(behindMs, settled.getTime() - Date.parse(stoppedAt));
    return outOfTime;

    /** Deals with a page of entries; those it did not reach for time are left unsettled. */
    async function takeInHand(page: readonly InflightEntry[]): Promise<Examined[]> {
      const pageOutcomes: Examined[] = page.map(() => "unsettled");
      if (page.length === 0) return pageOutcomes;
      // Out of time in the read itself: its runs are not read for nothing.
      if (!outOfTime) outOfTime = time.outOfTime();
      if (outOfTime) return pageOutcomes;
      const fresh = page.filter((entry) => !takenInHand.has(entryId(entry)));
      const runs = await readInflightRuns(engine, fresh, { consistentRead: false });
      const toSend: Resend[] = [];
      const ended: Run[] = [];
      await forEachConcurrently(
        page.map((entry, index) => ({ entry, index })),
        16,
        async ({ entry, index }) => {
          // Left unsettled: the cursor stops before it, and the next pass reads it again.
          if (!outOfTime) outOfTime = time.outOfTime();
          if (outOfTime) return;
          if (takenInHand.has(entryId(entry))) {
            pageOutcomes[index] = "done";
            return;
          }
          takenInHand.add(entryId(entry));
          examined++;
          try {
            pageOutcomes[index] = await examine(entry, runs.get(entryId(entry)) ?? null, {
              toSend,
              ended,
            });
          } catch (error) {
            failure ??= { error };
          }
        },
      );
      const sending = await resendRuns(engine, toSend, {
        shard,
        // Delays count from the moment of sending, not from the start of a pass that may take seconds.
        now: options.now ?? engine.clock(),
      });
      resent += sending.sent;
      // The shards after this one are reaped all the same (thrown here, the send stopped the
      // pass, and every shard after it waited for the next tick).
      if (sending.failure) failure ??= sending.failure;
      const repairEnded = options.repairEnded;
      if (repairEnded) {
        await forEachConcurrently(ended, 16, (run) =>
          repairEnded(run).catch((error: unknown) => {
            engine.obs.log.warn("reaper could not write an ended run's side on its job", {
              ...runLogKeys(run),
              error: String(error),
            });
          }),
        );
      }
      return pageOutcomes;
    }

    /**
     * Deals with the run an entry names, read eventually consistent: when a conditional push
     * finds the run changed, it reads it again and decides anew, so that the cursor passes no
     * run still QUEUED or RUNNING under a deadline behind it.
     */
    async function examine(
      entry: InflightEntry,
      read: InflightRun | null,
      found: {
        readonly toSend: Resend[];
        readonly ended: Run[];
      },
    ): Promise<Examined> {
      let run = read;
      for (let attempt = 0; attempt < 3; attempt++) {
        if (attempt > 0) {
          const fresh = await readInflightRuns(engine, [entry], { consistentRead: true });
          run = fresh.get(entryId(entry)) ?? null;
        }
        if (run === null) return "done";
        if (run.status !== "QUEUED" && run.status !== "RUNNING") {
          if (messagesLost) found.ended.push(run);
          return "done";
        }
        // Filed again further along (moved on since the index was read): that entry is the one.
        if (run.inflightSk > entry.deadline && run.inflightSk >= overdueBefore.toISOString())
          return "done";
        // A run started on time keeps its queued deadline (starts and heartbeats do not move it,
        // to spare the index a write); one still under a live lease only has its deadline moved.
        const live = run.status === "RUNNING" && (run.leaseUntil ?? "") > now.toISOString();
        const resend = !live || messagesLost;
        // Counted only for a run no worker holds: a restart's re-send of a run under a live lease
        // finds it held, and says nothing of whether workers take its messages.
        const resentCount = resend && !live ? resendsSinceStart(run) + 1 : null;
        const deadline = live
          ? Date.parse(run.leaseUntil ?? "") + engine.settings.leaseMs
          : // A run re-sent ahead of time (after a restart) keeps its deadline relative to when it is due.
            Math.max(now.getTime(), Date.parse(run.dueAt)) +
            resendInterval(resentCount ?? 1, engine.settings.leaseMs);
        // The first re-send fixes when a late start counts from (the worker's misfire check): a
        // message lost while the scheduler ran, from now; after a restart, when the scheduler
        // itself was down, from the occurrence, so that what fell due meanwhile follows its
        // misfire policy.
        const misfireFrom =
          resend && run.misfireFrom === null
            ? messagesLost
              ? new Date(run.plannedFor ?? run.scheduledFor)
              : now
            : null;
        // A run no worker holds may wait longer than the retention (the workers down for longer):
        // each re-send keeps it a retention from now, so TTL never deletes a run before it ends.
        const keepUntil = resentCount === null ? null : runExpiresAt(now, engine.settings);
        if (
          await pushInflightDeadline(
            engine,
            run,
            new Date(deadline),
            misfireFrom,
            resentCount,
            keepUntil,
          )
        ) {
          if (keepUntil !== null) await keepCompletedJobForWaitingRun(engine, run, now);
          if (resend)
            found.toSend.push({
              run,
              pushed: { deadline: new Date(deadline), resentCount, misfireFrom },
            });
          return "done";
        }
      }
      return "unsettled";
    }
  }
}
