/**
 * Misfire and overlap decisions (docs/architecture.md, "Policies"). Each is a
 * plain function from the facts the caller has read to a plan; the caller
 * writes the plan (runs to claim, runs to record SKIPPED with their reasons).
 */
import { DEFAULT_RETRY_POLICY, type RetryPolicy } from "./retry.js";
import type { FieldIssue } from "./validation.js";

// ---------------------------------------------------------------- misfire

export type MisfirePolicy = "skip" | "fire_once" | "fire_all";

export const MISFIRE_POLICIES: readonly MisfirePolicy[] = ["skip", "fire_once", "fire_all"];
const DEFAULT_MISFIRE_POLICY: MisfirePolicy = "fire_once";
export const DEFAULT_MISFIRE_GRACE_MS = 60_000;
/** The most missed occurrences one plan lists, for fire_all runs and for skip records alike. */
export const MAX_MISFIRE_CATCH_UP = 1000;

/** True when the occurrence is older than the grace: running it now would be late, not on time. */
export function isMisfired(
  scheduledFor: Date,
  now: Date,
  graceMs: number = DEFAULT_MISFIRE_GRACE_MS,
): boolean {
  return now.getTime() - scheduledFor.getTime() > graceMs;
}

/**
 * The latest instant an occurrence can be planned for and count as missed at `now`: more than
 * the grace before it (isMisfired), so one exactly the grace old is on time. Instants are whole
 * milliseconds, so that is the grace and a millisecond before `now`.
 */
export function misfireCutoff(now: Date, graceMs: number): Date {
  return new Date(now.getTime() - graceMs - 1);
}

export interface SkippedOccurrence {
  readonly scheduledFor: Date;
  readonly reason: string;
}

export interface MisfirePlan {
  /** Occurrences to run now, ascending. */
  readonly run: Date[];
  /** Occurrences to record as SKIPPED, ascending. */
  readonly skipped: SkippedOccurrence[];
  /** Set when more occurrences were missed than listed: those are neither run nor recorded. */
  readonly note: string | null;
}

export interface MisfireInput {
  readonly policy: MisfirePolicy;
  /**
   * The missed occurrences, strictly ascending, at most MAX_MISFIRE_CATCH_UP.
   * When more were missed, list the latest ones (drop the oldest): fire_once
   * runs the last one listed, which is then truly the most recent.
   */
  readonly missed: readonly Date[];
  /** More occurrences were missed than listed. */
  readonly truncated: boolean;
  /** Only quoted in reasons; isMisfired is what applies it. */
  readonly graceMs?: number;
}

function formatSeconds(ms: number): string {
  return `${ms / 1000} s`;
}

/**
 * What to do with the occurrences a job missed: `skip` records them all
 * SKIPPED; `fire_once` runs the most recent and records the earlier ones
 * SKIPPED; `fire_all` runs them all. Every missed occurrence listed is either
 * run or skipped, never both, in the order given.
 */
export function planMisfire(input: MisfireInput): MisfirePlan {
  const { policy, missed, truncated, graceMs = DEFAULT_MISFIRE_GRACE_MS } = input;
  if (missed.length > MAX_MISFIRE_CATCH_UP) {
    throw new RangeError(
      `${missed.length} missed occurrences listed; the caller must cap them at ${MAX_MISFIRE_CATCH_UP}`,
    );
  }
  for (let i = 1; i < missed.length; i++) {
    const previous = missed[i - 1];
    const current = missed[i];
    if (previous !== undefined && current !== undefined && current <= previous) {
      throw new RangeError("missed occurrences must be strictly ascending");
    }
  }
  const note = truncated
    ? `misfire: more than ${missed.length} occurrences were missed; only the latest ${missed.length} are planned (cap ${MAX_MISFIRE_CATCH_UP}), earlier ones are neither run nor recorded`
    : null;
  const last = missed.at(-1);
  if (last === undefined) {
    return { run: [], skipped: [], note };
  }
  switch (policy) {
    case "skip": {
      const reason = `misfire: missed by more than the ${formatSeconds(graceMs)} grace; policy skip`;
      return { run: [], skipped: missed.map((scheduledFor) => ({ scheduledFor, reason })), note };
    }
    case "fire_once": {
      const reason = `misfire: policy fire_once ran ${last.toISOString()} instead`;
      const earlier = missed.slice(0, -1).map((scheduledFor) => ({ scheduledFor, reason }));
      return { run: [last], skipped: earlier, note };
    }
    case "fire_all":
      return { run: [...missed], skipped: [], note };
  }
}

// ---------------------------------------------------------------- overlap

export type OverlapPolicy = "skip" | "buffer_one" | "allow";

export const OVERLAP_POLICIES: readonly OverlapPolicy[] = ["skip", "buffer_one", "allow"];
const DEFAULT_OVERLAP_POLICY: OverlapPolicy = "skip";
/** Also the effective bound of `skip` and `buffer_one`, and of `allow` when none is given. */
export const DEFAULT_MAX_CONCURRENT = 1;
export const MAX_CONCURRENT_LIMIT = 100;

export interface OverlapInput {
  readonly policy: OverlapPolicy;
  /** Read only under `allow`; the other policies run one at a time. */
  readonly maxConcurrent?: number;
  /** The run about to start. */
  readonly runId: string;
  /**
   * The job's other runs that are RUNNING with leaseUntil > now. Runs whose
   * lease has lapsed are left out by the caller, so that a crashed run blocks
   * its job for one lease at most. `runId` itself is ignored if present.
   */
  readonly liveRunIds: readonly string[];
  /** The run already waiting under buffer_one, if any (still waiting: not ended, not started). */
  readonly bufferedRunId: string | null;
  /**
   * A retry or a replay (attempt > 1), or a first attempt admitted before whose worker died: its
   * occurrence got its turn already, so skipping it would drop the occurrence without a dead
   * letter. It waits instead, under every policy, without taking buffer_one's one waiting place
   * from the run that holds it.
   */
  readonly rerun?: boolean;
  /**
   * A retry or replay of the job (not this run) that waits for a run under way, still waiting
   * (`rerunWaiting` on the job, its run read QUEUED or RUNNING). A first attempt yields to it:
   * under `skip` and `buffer_one` live runs or not, under `allow` by leaving it a slot (the
   * first attempt starts only if one is left beside it). Else a job whose runs follow one
   * another with no gap (or, under `allow`, keep it at its bound) would start its next run ahead
   * of it at every period, and keep it waiting for good.
   */
  readonly rerunWaiting?: string | null;
}

/**
 * `buffer` means: do not start now and do not record anything final; keep the
 * run waiting and try to start it again once a live run ends (the caller
 * decides how, e.g. by delaying the message). Under `allow` at its bound every
 * waiting run is buffered, with no one-waiter limit: the schedule itself
 * bounds how many can pile up, and a user who set a pool size expects queueing,
 * not dropped runs. A retry or replay (`rerun`) waits the same way under `skip`
 * and `buffer_one`, however many wait: retries are bounded by maxAttempts.
 */
export type OverlapDecision =
  | { readonly action: "start" }
  | { readonly action: "skip"; readonly reason: string }
  | { readonly action: "buffer" };

export function decideOverlap(input: OverlapInput): OverlapDecision {
  const { policy, maxConcurrent = DEFAULT_MAX_CONCURRENT, runId, bufferedRunId } = input;
  if (validateMaxConcurrent(maxConcurrent).length > 0) {
    throw new RangeError(
      `maxConcurrent must be an integer in 1..${MAX_CONCURRENT_LIMIT}: ${maxConcurrent}`,
    );
  }
  const live = [...new Set(input.liveRunIds)].filter((id) => id !== runId);
  const rerunAhead =
    input.rerun !== true && input.rerunWaiting != null && input.rerunWaiting !== runId
      ? input.rerunWaiting
      : null;
  if (rerunAhead !== null) return yieldToRerun(input, rerunAhead, live.length, maxConcurrent);
  const firstLive = live[0];
  if (firstLive === undefined) {
    // The run in buffer_one's waiting place goes first: a first attempt coming as the run ahead
    // ends waits behind it rather than start ahead of it (the caller passes a buffered run only
    // while it waits still).
    if (
      policy === "buffer_one" &&
      input.rerun !== true &&
      bufferedRunId !== null &&
      bufferedRunId !== runId
    )
      return { action: "buffer" };
    return { action: "start" };
  }
  switch (policy) {
    case "skip": {
      if (input.rerun === true) return { action: "buffer" };
      const others = live.length > 1 ? ` (and ${live.length - 1} more)` : "";
      return {
        action: "skip",
        reason: `overlap: run ${firstLive}${others} still running; policy skip`,
      };
    }
    case "buffer_one":
      if (bufferedRunId === null || bufferedRunId === runId || input.rerun === true) {
        return { action: "buffer" };
      }
      return alreadyBuffered(bufferedRunId);
    case "allow":
      return live.length < maxConcurrent ? { action: "start" } : { action: "buffer" };
  }
}

const alreadyBuffered = (bufferedRunId: string): OverlapDecision => ({
  action: "skip",
  reason: `overlap: another run (${bufferedRunId}) is already buffered; policy buffer_one`,
});

/**
 * A first attempt that meets a waiting retry or replay: under `skip` it is skipped, naming the
 * rerun; under `buffer_one` it waits in the one waiting place (or is skipped when another holds
 * it) and starts after the rerun, which gets in at its next check. Under `allow` the rerun counts
 * as holding a slot: the first attempt starts only if a slot is left beside it, and otherwise
 * waits, as allow's runs at the bound do, leaving the slot that frees to the rerun.
 */
function yieldToRerun(
  input: OverlapInput,
  rerunId: string,
  liveCount: number,
  maxConcurrent: number,
): OverlapDecision {
  const { runId, bufferedRunId } = input;
  if (input.policy === "allow")
    return liveCount + 1 < maxConcurrent ? { action: "start" } : { action: "buffer" };
  if (input.policy === "buffer_one")
    return bufferedRunId === null || bufferedRunId === runId
      ? { action: "buffer" }
      : alreadyBuffered(bufferedRunId);
  return {
    action: "skip",
    reason: `overlap: a retry or replay (${rerunId}) waits to run first; policy skip`,
  };
}

/**
 * The API's check of a job's maxConcurrent; kept here so the bound lives next
 * to the decision that relies on it. Returns no issues when valid.
 */
export function validateMaxConcurrent(
  value: unknown,
  field = "policies.maxConcurrent",
): FieldIssue[] {
  if (
    typeof value !== "number" ||
    !Number.isInteger(value) ||
    value < 1 ||
    value > MAX_CONCURRENT_LIMIT
  ) {
    return [
      {
        field,
        message: `must be a whole number from 1 to ${MAX_CONCURRENT_LIMIT}, got ${String(value)}`,
      },
    ];
  }
  return [];
}

// ---------------------------------------------------------------- defaults

/**
 * The per-job policy defaults, flat like the job item's `policies` (see
 * shared/model.ts). The misfire grace is a deployment setting, not a job's,
 * so it stays out of here (DEFAULT_MISFIRE_GRACE_MS).
 */
export interface PolicyDefaults {
  readonly retry: RetryPolicy;
  readonly misfire: MisfirePolicy;
  readonly overlap: OverlapPolicy;
  readonly maxConcurrent: number;
}

export const DEFAULT_POLICIES: PolicyDefaults = Object.freeze({
  retry: DEFAULT_RETRY_POLICY,
  misfire: DEFAULT_MISFIRE_POLICY,
  overlap: DEFAULT_OVERLAP_POLICY,
  maxConcurrent: DEFAULT_MAX_CONCURRENT,
});
