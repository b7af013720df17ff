import {
  type ClaimBeforeCreate,
  claimedBeforeCreate,
  planClaimBeforeCreate,
} from "../dispatch/claim.js";
import { dispatchAfterCommit, sendClaimed } from "../dispatch/fast-path.js";
import { fastPathHorizonEnd } from "../dispatch/fast-path-window.js";
import type { Engine } from "../engine.js";
import { ConcurrentUpdateError, IdempotencyKeyTakenError } from "../errors.js";
import type { DueEntry, Job, Run } from "../model.js";
import { giveBackBatchShares, refusedUnwritten, reserveBatchQuotas } from "../quotas/usage.js";
import { recordShardCount } from "../shard-count.js";
import {
  type BatchPut,
  dueEntryPut,
  jobPut,
  putBatchItems,
  readIdempotencyRecords,
} from "../storage/job-batch-create.js";
import { type IdempotentRequest, writeNewJob } from "../storage/job-create.js";
import { getJob } from "../storage/run-reads.js";
import type { UsageReservation } from "../storage/tenant-quotas.js";
import { ValidationError } from "../validation.js";
import {
  answeredJob,
  idempotentReplay,
  jobAfterClaim,
  type NewJob,
  prepareNewJob,
  replayOf,
  writtenAfterAll,
} from "./create.js";
import { batchUpstreamReads, type DependentLinks, linkNewDependent } from "./dependencies.js";

/** One job of a batch: what a single create takes. */
export interface BatchCreateItem {
  readonly input: NewJob;
  readonly idempotency?: IdempotentRequest;
}

/** Each job's answer: created (or the job an earlier request with its key created), or why not. */
export type BatchCreateOutcome =
  | { readonly job: Job; readonly created: boolean }
  | { readonly error: unknown };

/** The most jobs one batch creates: one BatchWriteItem's worth. */
export const MAX_BATCH_JOBS = 25;

/** A job of the batch on its way: prepared, checked, reserved, planned. */
interface Pending {
  readonly index: number;
  readonly item: BatchCreateItem;
  readonly base: Job;
  readonly entry: DueEntry | null;
  readonly links: DependentLinks;
  reservation?: UsageReservation | null;
  claim?: ClaimBeforeCreate | null;
  job?: Job;
  pending?: DueEntry | null;
}

/** A job whose idempotency key an earlier job of its batch (at `earlier`) already has. */
export const repeatedKeyError = (earlier: number) =>
  new ValidationError([
    { field: "idempotencyKey", message: `repeats the key of jobs[${earlier}] in this batch` },
  ]);

const unwrittenError = () =>
  new ConcurrentUpdateError(
    "DynamoDB left this job's writes unprocessed (throttling); nothing of it was written: send it again",
  );

/**
 * Creates up to 25 jobs of one tenant with the guarantees of `createJob` for
 * each, and an answer for each: one job's bad input, quota refusal or failed
 * write does not stop the others. What the batch shares is where it saves:
 * one read of every idempotency key's record, one reservation of the jobs'
 * quota shares (and one give-back for those then refused), the runs of every
 * job claimed at once (the fast path) and the due entries and jobs of the
 * plain ones (no idempotency key, no `after` links, no pending entry a pass may
 * already sweep) written with BatchWriteItem,
 * runs and entries first and the jobs after them (the job's write is each
 * create's commit), and the claimed runs sent ten to a message batch across
 * jobs. A job with an idempotency key, `after` links or such an entry keeps its
 * transaction.
 */
export async function createJobs(
  engine: Engine,
  tenantId: string,
  items: readonly BatchCreateItem[],
): Promise<BatchCreateOutcome[]> {
  const now = engine.clock();
  const horizonEnd = fastPathHorizonEnd(now, engine.settings.lookaheadMs);
  const outcomes: (BatchCreateOutcome | undefined)[] = items.map(() => undefined);
  const fail = (index: number, error: unknown) => {
    outcomes[index] = { error };
  };

  // Bad input is refused before anything is reserved: a 400 leaves the tenant's usage as it was.
  const firstWithKey = new Map<string, number>();
  // The jobs' upstream walks share their reads: a job above several of them is read once.
  const upstreamReads = batchUpstreamReads(engine);
  const prepared = await Promise.all(
    items.map(async (item, index): Promise<Pending | null> => {
      try {
        const key = item.idempotency?.key;
        const earlier = key === undefined ? undefined : firstWithKey.get(key);
        if (key !== undefined && earlier !== undefined) throw repeatedKeyError(earlier);
        if (key !== undefined) firstWithKey.set(key, index);
        const { base, entry } = prepareNewJob(engine, item.input, now);
        const links = await linkNewDependent(
          engine,
          tenantId,
          base.jobId,
          base.schedule,
          upstreamReads,
        );
        return { index, item, base, entry, links };
      } catch (error) {
        fail(index, error);
        return null;
      }
    }),
  );
  let live = prepared.filter((p): p is Pending => p !== null);
  /** Drops the jobs that have their answer already (a refusal or a replay). */
  const keepUnanswered = () => {
    live = live.filter((p) => outcomes[p.index] === undefined);
  };
  const failAll = (error: unknown) => {
    for (const p of live) fail(p.index, error);
    live = [];
  };

  // A repeated create returns its job and writes nothing: one consistent read of every key's record.
  const keyed = live.filter((p) => p.item.idempotency !== undefined);
  if (keyed.length > 0) {
    try {
      const records = await readIdempotencyRecords(
        engine,
        tenantId,
        keyed.map((p) => p.item.idempotency?.key ?? ""),
      );
      await Promise.all(
        keyed.map(async (p) => {
          const idem = p.item.idempotency;
          const record = idem && records.get(idem.key);
          if (!idem || !record) return;
          try {
            outcomes[p.index] = {
              job: await replayOf(engine, tenantId, idem, record),
              created: false,
            };
          } catch (error) {
            fail(p.index, error);
          }
        }),
      );
      keepUnanswered();
    } catch (error) {
      // Only the jobs with a key needed the records: the others go on.
      for (const p of keyed) fail(p.index, error);
      keepUnanswered();
    }
  }

  if (live.length > 0) {
    // Before anything is filed in a shard (the tick passes over every shard the stage filed in),
    // and before anything is reserved: its failure is the request's and leaves the usage as it was.
    await recordShardCount(engine);
    try {
      const reserved = await reserveBatchQuotas(
        engine,
        tenantId,
        live.map((p) => ({
          priority: p.item.input.priority,
          schedule: p.base.schedule,
          above: p.links.above,
        })),
        now,
      );
      live = live.filter((p, i) => {
        const outcome = reserved[i];
        if (outcome instanceof Error) fail(p.index, outcome);
        else p.reservation = outcome ?? null;
        return !(outcome instanceof Error);
      });
    } catch (error) {
      failAll(error);
    }
  }

  const giveBack: UsageReservation[] = [];
  const refuse = (p: Pending, error: unknown, unwritten: boolean) => {
    fail(p.index, error);
    if (unwritten && p.reservation) giveBack.push(p.reservation);
  };
  for (const p of live) {
    const claimNow = p.entry !== null && new Date(p.entry.dueAt) < horizonEnd;
    try {
      p.claim =
        claimNow && p.entry ? planClaimBeforeCreate(engine, p.entry, now, horizonEnd) : null;
      Object.assign(p, jobAfterClaim(p.base, p.entry, p.claim));
    } catch (error) {
      refuse(p, error, true);
    }
  }
  keepUnanswered();
  // A pending entry due inside the window passes sweep goes in its job's transaction: put before
  // the job, a pass could claim it first, find no job, remove it, and leave the job naming nothing.
  const isPlain = (p: Pending) =>
    p.item.idempotency === undefined &&
    p.links.writes.length === 0 &&
    !(p.pending && new Date(p.pending.dueAt) < horizonEnd);

  // Before any job: the claimed runs (and skipped records) of all, and the plain jobs' due entries.
  const before: BatchPut[] = live.flatMap((p) => [
    ...(p.claim?.runItems ?? []).map((item) => ({ table: "runs" as const, item, owner: p.index })),
    ...(isPlain(p) && p.pending ? [dueEntryPut(p.pending, p.index)] : []),
  ]);
  if (before.length > 0) {
    const failed = await putBatchItems(engine, before);
    // Its job is never written, so nothing of it is created: its runs are cancelled by their
    // workers (their job does not exist), its entry is removed as an orphan by the claim.
    for (const p of live) {
      if (failed.unwritten.has(p.index)) refuse(p, unwrittenError(), true);
      else if (failed.uncertain.has(p.index)) refuse(p, failed.uncertain.get(p.index), true);
    }
    keepUnanswered();
  }

  // The commit of each create: its job.
  const plain = live.filter(isPlain);
  const transacted = live.filter((p) => !isPlain(p));
  await Promise.all([
    (async () => {
      if (plain.length === 0) return;
      const failed = await putBatchItems(
        engine,
        plain.flatMap((p) => (p.job ? [jobPut(engine, p.job, p.index)] : [])),
      );
      for (const p of plain) {
        if (failed.unwritten.has(p.index)) refuse(p, unwrittenError(), true);
        else if (failed.uncertain.has(p.index)) {
          // It may have been written: a consistent read says whether, so the answer does too.
          const written = p.job && (await getJob(engine, p.job.jobId).catch(() => null));
          // Not found, its share stays reserved all the same (an upper bound a recount corrects).
          if (!written) refuse(p, failed.uncertain.get(p.index), false);
        }
      }
    })(),
    ...transacted.map(async (p) => {
      const idem = p.item.idempotency;
      if (!p.job) return;
      try {
        await writeNewJob(engine, p.job, p.pending ?? null, idem, p.links.writes);
      } catch (error) {
        // An outcome unclear: the job read back says whether it was written, and so does the answer.
        if (await writtenAfterAll(engine, p.job, error)) return;
        refuse(p, error, refusedUnwritten(error));
        if (idem && error instanceof IdempotencyKeyTakenError) {
          // Another request with this key was first: its job is the answer.
          try {
            const earlier = await idempotentReplay(engine, tenantId, idem);
            if (earlier) outcomes[p.index] = { job: earlier, created: false };
          } catch (replayError) {
            fail(p.index, replayError);
          }
        }
      }
    }),
  ]);
  await giveBackBatchShares(engine, giveBack);
  const committed = live.filter((p) => outcomes[p.index] === undefined);

  const runs: Run[] = [];
  for (const p of committed) {
    if (p.claim && p.entry) {
      claimedBeforeCreate(engine, p.entry, p.claim);
      runs.push(...p.claim.runs);
    }
  }
  await sendClaimed(engine, runs);
  await Promise.all(
    committed.map(async (p) => {
      const job = p.job ?? p.base;
      // A per-second schedule has more runs inside the window than one claim holds.
      const next = p.claim?.next;
      const further = next && new Date(next.dueAt) < horizonEnd ? next : null;
      const claimedMore = await dispatchAfterCommit(engine, further, "create");
      outcomes[p.index] = { job: await answeredJob(engine, job, claimedMore), created: true };
    }),
  );
  return outcomes.map(
    (outcome) => outcome ?? { error: new Error("a job of the batch was left without an answer") },
  );
}
