import type { TenantQuotas } from "../config.js";
import type { Engine } from "../engine.js";
import { ConcurrentUpdateError } from "../errors.js";
import type { Job, Priority } from "../model.js";
import { isAfterSchedule, type ScheduleSpec } from "../schedule/index.js";
import {
  isConditionalCheckFailed,
  isContention,
  isTransactionInProgress,
} from "../storage/dynamo-errors.js";
import { giveBackUsage } from "../storage/quota-give-back.js";
import { claimRecount } from "../storage/quota-recount.js";
import {
  type QuotaUsage,
  readQuotaOverride,
  readQuotaUsage,
  reserveUsage,
  type UsageReservation,
  writeRecountedUsage,
} from "../storage/tenant-quotas.js";
import { ConditionsFailedError } from "../storage/transaction.js";
import { assertPriorityAllowed, effectiveQuotas, QuotaExceededError } from "./limits.js";
import { cachedQuotaOverride } from "./override-cache.js";
import { countUsage, recountBudget } from "./recount.js";
import { readJobsAbove, runsPerMinuteMeasure } from "./run-measure.js";
import { type RunsBelow, runsBelow } from "./runs-below.js";

/** What a create or an edit adds to the tenant's jobs. */
interface JobShare {
  /** Checked against maxPriority when given (an edit that keeps the priority gives none). */
  readonly priority?: Priority;
  /** 1 for a create, 0 for an edit. */
  readonly jobs: number;
  /** The job's schedule (an edit: as edited). */
  readonly schedule: ScheduleSpec;
  /** The tenant's jobs above the schedule's upstreams, by id, as its `after` check read them. */
  readonly above: ReadonlyMap<string, Job>;
  /** An edit: the job as it stands, whose share is already counted. */
  readonly replaces?: Job;
}

/** Reads over the counted quotas are recounted at most this often before the request is refused. */
const MAX_RESERVE_ROUNDS = 4;

/**
 * Checks a create or an edit against the tenant's quotas and reserves its
 * share before it writes: the priority against maxPriority, one more job
 * against activeJobs, and what it adds to the tenant's runs per minute against
 * runsPerMinute (`runsPerMinuteAdded`). Throws QuotaExceededError naming the
 * quota. The usage is an upper bound: jobs their runs end are not taken off it, and
 * a reservation whose write then fails stays on it unless the failure shows
 * nothing was written (`giveBackJobQuotas`), and a job cancelled or deleted
 * gives its share back (ended-share.ts); when a reservation would go over, the
 * tenant's jobs are recounted (the byTenant index and a read of each job) and
 * the usage is corrected before the request is refused, unless the usage was
 * recounted within `quotaRecountMs` (5 s): then the request is refused from
 * the stored usage, so a tenant that keeps sending requests over its limit
 * costs one recount per 5 s, whatever it sends (`claimRecount`). An edit of
 * a job with jobs after it reads them (what it adds) only once the least it
 * adds fits, and what this process read of them within 5 s fits too: refused
 * by either, it reads none of them (runs-below.ts). A tenant
 * with no usage item yet is counted the same way before its first
 * reservation. While neither activeJobs nor runsPerMinute has a limit (the
 * override as this process caches it, read again within 10 s) nothing is
 * reserved and nothing is read: only maxPriority is checked. The reservation,
 * or null when nothing was reserved.
 */
export async function reserveJobQuotas(
  engine: Engine,
  tenantId: string,
  share: JobShare,
  now: Date,
): Promise<UsageReservation | null> {
  const cached = effectiveQuotas(
    engine.settings.quotas,
    await cachedQuotaOverride(engine, tenantId),
  );
  if (cached.activeJobs === null && cached.runsPerMinute === null) {
    if (share.priority !== undefined) assertPriorityAllowed(share.priority, cached);
    return null;
  }
  const runs = await runsPerMinuteAdded(engine, share, now);
  // Until the jobs below an edited job are read, what it adds is at least `least`, or what this
  // process read of them moments ago (`recent`, checked against the usage at hand).
  let below = runs.exact ? null : runs.below;
  let add: QuotaUsage = { activeJobs: share.jobs, runsPerMinute: runs.least };
  let atLeast = below !== null;
  const checkedAgainst = (usage: QuotaUsage) => {
    const recent = below?.recent(usage);
    add = { ...add, runsPerMinute: recent ?? runs.least };
    atLeast = below !== null && recent === undefined;
  };
  const field = isAfterSchedule(share.schedule) ? "schedule.after.jobs" : "schedule";
  const overBy = (usage: QuotaUsage, quotas: TenantQuotas) =>
    overQuota(usage, add, quotas, { isEdit: share.replaces !== undefined, atLeast }, field);
  // This request's recount claim, kept to recount again when its write loses to another's.
  let held: string | undefined;
  const budget = recountBudget(engine);
  for (let round = 1; ; round++) {
    const quotas = effectiveQuotas(
      engine.settings.quotas,
      await readQuotaOverride(engine, tenantId),
    );
    if (share.priority !== undefined) assertPriorityAllowed(share.priority, quotas);
    if (add.activeJobs === 0 && add.runsPerMinute === 0) return null;
    const limits = {
      activeJobs: quotas.activeJobs ?? Number.MAX_SAFE_INTEGER,
      runsPerMinute: quotas.runsPerMinute ?? Number.MAX_SAFE_INTEGER,
    };
    if (below !== null) {
      // The jobs below are read only when what it adds fits the stored usage (or nothing limits
      // it); else a refusal within `quotaRecountMs` of a recount reads none of them.
      const stored = quotas.runsPerMinute === null ? ZERO : await readQuotaUsage(engine, tenantId);
      if (stored !== null) checkedAgainst(stored);
      if (stored !== null && overBy(stored, quotas) === null) {
        add = { ...add, runsPerMinute: await below.exactly(stored) };
        below = null;
        atLeast = false;
      }
    }
    const reservation = below === null ? await reserveUsage(engine, tenantId, add, limits) : null;
    if (reservation) return reservation;
    const claim = await claimRecount(engine, tenantId, now, engine.settings.quotaRecountMs, held);
    if (!claim.recount) {
      // Recounted moments ago: refused from the stored usage, an upper bound.
      if (below !== null) checkedAgainst(claim.stored);
      const over = overBy(claim.stored, quotas);
      if (over) throw over;
      // A give-back made room since the reservation failed: reserve again.
      if (round >= MAX_RESERVE_ROUNDS) throw busy();
      continue;
    }
    const seen = claim.seen;
    held = claim.claim;
    const counted = await countUsage(engine, tenantId, now, seen, budget);
    if (below !== null) checkedAgainst(counted);
    const over = overBy(counted, quotas);
    if (over) {
      // Keep the corrected count, so the next request does not recount for nothing.
      await writeRecountedUsage(engine, tenantId, counted, seen, now);
      throw over;
    }
    const written = await writeRecountedUsage(engine, tenantId, counted, seen, now);
    // Others keep reserving meanwhile: answer as contention does, "busy".
    if (!written && round >= MAX_RESERVE_ROUNDS) throw busy();
  }
}

const busy = () =>
  new ConcurrentUpdateError("the tenant's quota usage kept changing during a recount");

/**
 * What a create or an edit adds to the tenant's runs per minute (run-measure.ts), exactly or at
 * least. A create its measure among the jobs above it; an edit of the schedule what it adds to its
 * measure, times the runs each run of the job makes (its own and, in turn, those of the jobs after
 * it, read consistently after the job was, by `below`: each such run counts 1 at least, so
 * `least` is what it adds to its own measure); an edit that keeps the schedule, or lowers the
 * measure, 0.
 */
type RunsAdded =
  | { readonly exact: true; readonly least: number }
  | { readonly exact: false; readonly least: number; readonly below: RunsBelow };

async function runsPerMinuteAdded(engine: Engine, share: JobShare, now: Date): Promise<RunsAdded> {
  const measure = runsPerMinuteMeasure(share.above, now)(share.schedule);
  const old = share.replaces;
  if (old === undefined) return { exact: true, least: measure };
  if (JSON.stringify(old.schedule) === JSON.stringify(share.schedule))
    return { exact: true, least: 0 };
  const oldUpstreams = isAfterSchedule(old.schedule) ? old.schedule.after.jobs : [];
  const oldAbove = await readJobsAbove(engine, old.tenantId, oldUpstreams);
  const before = runsPerMinuteMeasure(oldAbove, now)(old.schedule);
  if (measure <= before) return { exact: true, least: 0 };
  const added = measure - before;
  // Nothing runs after it: each of its runs is its own alone.
  if (old.dependents.length === 0) return { exact: true, least: added };
  return { exact: false, least: added, below: runsBelow(engine, old, added) };
}

/**
 * The quotas of a batch of creates, checked per job and reserved in one
 * write: each job's priority against maxPriority, then the batch's jobs and
 * runs per minute (each job's measure among the jobs above it) added to the
 * usage together. When the sum would go over,
 * the tenant's jobs are recounted (as for one create, at most once per
 * `quotaRecountMs`, else the stored usage is taken) and the jobs are let in
 * in the batch's order while each still fits; the others are refused as a
 * single create would be. Per job: its share of the reservation (null when
 * nothing is limited, as for one create) or its QuotaExceededError. Any other
 * failure is thrown: it is every job's.
 */
export async function reserveBatchQuotas(
  engine: Engine,
  tenantId: string,
  shares: readonly {
    readonly priority: Priority;
    readonly schedule: ScheduleSpec;
    readonly above: ReadonlyMap<string, Job>;
  }[],
  now: Date,
): Promise<(UsageReservation | null | QuotaExceededError)[]> {
  const refusal = (check: () => void): QuotaExceededError | null => {
    try {
      check();
      return null;
    } catch (error) {
      if (error instanceof QuotaExceededError) return error;
      throw error;
    }
  };
  const cached = effectiveQuotas(
    engine.settings.quotas,
    await cachedQuotaOverride(engine, tenantId),
  );
  if (cached.activeJobs === null && cached.runsPerMinute === null)
    return shares.map((s) => refusal(() => assertPriorityAllowed(s.priority, cached)));
  const outcomes: (UsageReservation | null | QuotaExceededError)[] = shares.map(() => null);
  const adds = shares.map((s) => ({
    activeJobs: 1,
    runsPerMinute: runsPerMinuteMeasure(s.above, now)(s.schedule),
  }));
  let candidates = shares.map((_, i) => i);
  let held: string | undefined;
  const budget = recountBudget(engine);
  for (let round = 1; ; round++) {
    const quotas = effectiveQuotas(
      engine.settings.quotas,
      await readQuotaOverride(engine, tenantId),
    );
    candidates = candidates.filter((i) => {
      const share = shares[i];
      const refused = share && refusal(() => assertPriorityAllowed(share.priority, quotas));
      if (refused) outcomes[i] = refused;
      return !refused;
    });
    if (candidates.length === 0) return outcomes;
    const total = sumUsage(candidates.map((i) => adds[i] ?? ZERO));
    const limits = {
      activeJobs: quotas.activeJobs ?? Number.MAX_SAFE_INTEGER,
      runsPerMinute: quotas.runsPerMinute ?? Number.MAX_SAFE_INTEGER,
    };
    const reservation = await reserveUsage(engine, tenantId, total, limits);
    if (reservation) {
      for (const i of candidates) outcomes[i] = { ...reservation, added: adds[i] ?? ZERO };
      return outcomes;
    }
    const claim = await claimRecount(engine, tenantId, now, engine.settings.quotaRecountMs, held);
    if (claim.recount) held = claim.claim;
    // Recounted moments ago: the jobs are let in from the stored usage, an upper bound.
    const counted = claim.recount
      ? await countUsage(engine, tenantId, now, claim.seen, budget)
      : claim.stored;
    let running = counted;
    candidates = candidates.filter((i) => {
      const add = adds[i] ?? ZERO;
      const schedule = shares[i]?.schedule;
      const field = schedule && isAfterSchedule(schedule) ? "schedule.after.jobs" : "schedule";
      const over = overQuota(running, add, quotas, { isEdit: false, atLeast: false }, field);
      if (over) outcomes[i] = over;
      else running = sumUsage([running, add]);
      return over === null;
    });
    const written =
      claim.recount && (await writeRecountedUsage(engine, tenantId, counted, claim.seen, now));
    if (candidates.length === 0) return outcomes;
    // Let in from the stored usage (a give-back made room), or others reserved during the recount.
    if (!written && round >= MAX_RESERVE_ROUNDS) throw busy();
  }
}

const ZERO: QuotaUsage = { activeJobs: 0, runsPerMinute: 0 };

const sumUsage = (usages: readonly QuotaUsage[]): QuotaUsage =>
  usages.reduce(
    (sum, u) => ({
      activeJobs: sum.activeJobs + u.activeJobs,
      runsPerMinute: sum.runsPerMinute + u.runsPerMinute,
    }),
    ZERO,
  );

/**
 * Gives back the shares of a batch's jobs whose writes were refused, in one
 * write: they were reserved together, under the same recount token.
 */
export async function giveBackBatchShares(
  engine: Engine,
  shares: readonly UsageReservation[],
): Promise<void> {
  const [first] = shares;
  if (first === undefined) return;
  await giveBackJobQuotas(engine, { ...first, added: sumUsage(shares.map((s) => s.added)) });
}

/**
 * Takes what a create or an edit reserved off the tenant's usage once its
 * write is known not to have been applied (see `refusedUnwritten`). A recount
 * since the reservation already left the share out, so nothing is taken off
 * then (see `giveBackUsage`). When the give-back itself fails the share stays:
 * an upper bound, which a recount corrects.
 */
export async function giveBackJobQuotas(
  engine: Engine,
  reservation: UsageReservation | null,
): Promise<void> {
  if (reservation === null) return;
  try {
    await giveBackUsage(engine, reservation);
  } catch (error) {
    // The caller answers with its write's failure, not this one.
    engine.obs.log.warn("could not give back a refused write's quota reservation", {
      tenantId: reservation.tenantId,
      error: String(error),
    });
  }
}

/**
 * Whether a write's failure shows it was not applied: a failed condition, a
 * cancelled transaction, contention or throttling that outlasted the retries
 * (the error or one it wraps). Any other failure (a timeout, a dropped
 * connection, a transaction DynamoDB says is still in progress) may have
 * written it, so its reservation must stay.
 */
export function refusedUnwritten(error: unknown): boolean {
  for (let e: unknown = error, depth = 0; e instanceof Error && depth < 8; e = e.cause, depth++) {
    if (isTransactionInProgress(e)) return false;
    if (e instanceof ConditionsFailedError || isConditionalCheckFailed(e) || isContention(e))
      return true;
    if (e.name === "TransactionCanceledException") return true;
  }
  return false;
}

function overQuota(
  counted: QuotaUsage,
  add: QuotaUsage,
  quotas: TenantQuotas,
  /** An edit's, and whether `add` is only the least it adds (the jobs below it not read). */
  how: { readonly isEdit: boolean; readonly atLeast: boolean },
  /** The field whose runs go over runsPerMinute: `schedule`, or a dependent's upstreams. */
  field: "schedule" | "schedule.after.jobs",
): QuotaExceededError | null {
  // Only a quota the request adds to can refuse it: one lowered below the usage refuses no more.
  if (
    quotas.activeJobs !== null &&
    add.activeJobs > 0 &&
    counted.activeJobs + add.activeJobs > quotas.activeJobs
  ) {
    return new QuotaExceededError(
      `this tenant has ${counted.activeJobs} active job(s); its activeJobs quota is ${quotas.activeJobs}`,
      { quota: "activeJobs", limit: quotas.activeJobs },
    );
  }
  if (
    quotas.runsPerMinute !== null &&
    add.runsPerMinute > 0 &&
    counted.runsPerMinute + add.runsPerMinute > quotas.runsPerMinute
  ) {
    return new QuotaExceededError(
      `this ${how.isEdit ? "edit" : "job"} adds ${how.atLeast ? "at least " : ""}${add.runsPerMinute} runs per minute at its peak${field === "schedule" ? "" : " (a run for each run of its upstreams)"}${how.atLeast ? ", before those of the jobs after it," : ""} to the ${counted.runsPerMinute} of this tenant's jobs; its runsPerMinute quota is ${quotas.runsPerMinute}`,
      { quota: "runsPerMinute", limit: quotas.runsPerMinute, field },
    );
  }
  return null;
}
