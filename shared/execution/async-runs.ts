import type { Engine } from "../engine.js";
import { FenceLostError, RunCancelledError, RunNotFoundError, SchedulerError } from "../errors.js";
import { parseRunId } from "../keys.js";
import type { Job, Run } from "../model.js";
import { extendAdmission } from "../storage/admission.js";
import { extendLease } from "../storage/run-heartbeat.js";
import { getJob, getRun } from "../storage/run-reads.js";
import { boundedText, textHead } from "../storage/stored-text.js";
import { runTokenFence, runTokenMatches } from "../webhooks/run-token.js";
import {
  type AttemptDeadline,
  attemptDeadline,
  ENDED,
  recordedDeadline,
  timedOutResult,
} from "./async-delivery.js";
import { endOnCancelRequest, repairJobAfterRun } from "./run-endings.js";
import { endForDeletedJob, type RunResult, recordResult } from "./run-outcome.js";

/**
 * Async (long) runs of `http` jobs whose target is `mode: "async"`: the target answers 202 and
 * takes the run over. It heartbeats (`POST /runs/{runId}/heartbeat`) to extend the run's lease and
 * completes it (`POST /runs/{runId}/complete`), presenting the run token its delivery carried: a
 * random value the worker made for that delivery, whose hash the run item holds. A token is good
 * while the run is RUNNING under the fence the token names: once the run ended, was cancelled or
 * was started again (its lease lapsed and the reaper re-sent it), it is stale (409). A completion
 * the token already recorded, sent again (its answer lost), answers as the first did.
 */

declare module "../errors.js" {
  interface ErrorContexts {
    /** A run token that is malformed, or not one the scheduler gave for this run (HTTP 401). */
    readonly run_token_invalid: { readonly runId: string };
    /** A run token of a run no longer held under its fence: ended, cancelled, taken over (HTTP 409). */
    readonly run_token_stale: { readonly runId: string; readonly status: string };
  }
}

class RunTokenInvalidError extends SchedulerError<"run_token_invalid"> {
  override readonly name = "RunTokenInvalidError";

  constructor(runId: string, why: string) {
    super("run_token_invalid", `run token refused: ${why}`, { runId });
  }
}

class RunTokenStaleError extends SchedulerError<"run_token_stale"> {
  override readonly name = "RunTokenStaleError";

  constructor(run: Pick<Run, "runId" | "status">, why: string) {
    super("run_token_stale", `run ${run.runId}: ${why}`, {
      runId: run.runId,
      status: run.status,
    });
  }
}

/**
 * What a target's call must pass once its token is verified, before anything is written: the
 * API's request quota of the run's tenant (it throws to refuse the call).
 */
export type RequestCharge = (run: Run) => Promise<void>;
const chargeNothing: RequestCharge = () => Promise.resolve();

/**
 * The run a token was given for, and the token's fence: one the scheduler gave for this run (its
 * hash is the run's, or the previous delivery's). A token that is not the run's is refused alike
 * whether the run exists or not, so the routes, which take no tenant credentials, tell nobody
 * which runs exist. The tenant's request quota is charged once the token is verified.
 */
async function tokenRun(
  engine: Engine,
  runId: string,
  token: string,
  charge: RequestCharge = chargeNothing,
): Promise<{ readonly run: Run; readonly fence: number }> {
  const fence = runTokenFence(token);
  if (fence === null) throw new RunTokenInvalidError(runId, "not a run token");
  const ref = parseRunId(runId);
  const run = ref === null ? null : await getRun(engine, ref);
  const given =
    run !== null &&
    (runTokenMatches(token, run.runTokenHash) || runTokenMatches(token, run.previousRunTokenHash));
  if (run === null || !given)
    throw new RunTokenInvalidError(runId, "it is not a token this run was given");
  await charge(run);
  return { run, fence };
}

/** Whether the run is RUNNING under the token's fence: the token holds it. */
const holds = (run: Run, fence: number) => run.status === "RUNNING" && run.fence === fence;

/**
 * Why a token no longer holds its run, as the run stands: another start took it (its fence is
 * higher), a cancel ended it, or it ended otherwise (naming the status and, for a failure, the
 * head of its error: the run's timeout, the target's own report, or the worker's of its delivery).
 */
function staleWhy(run: Run, fence: number): string {
  if (run.fence !== fence)
    return `the run was started again (fence ${run.fence}); this token is of fence ${fence}`;
  if (run.status === "CANCELLED") return "the run was cancelled";
  const status = run.status.toLowerCase();
  if (run.status === "RUNNING" || run.status === "QUEUED") return `the run is ${status}`;
  const error = run.error ?? null;
  const head = error !== null && error.length > 200 ? `${textHead(error, 200)}…` : error;
  return `the run has ended ${status}${head === null ? "" : ` (${head})`}`;
}

const staleToken = (run: Run, fence: number) => new RunTokenStaleError(run, staleWhy(run, fence));

/**
 * The run the token holds: RUNNING under the token's fence, else stale (409). A run asked to
 * cancel ends CANCELLED now, and the call is stale too.
 */
async function heldRun(
  engine: Engine,
  runId: string,
  token: string,
  charge?: RequestCharge,
): Promise<Run> {
  const { run, fence } = await tokenRun(engine, runId, token, charge);
  if (!holds(run, fence)) throw staleToken(run, fence);
  if (run.cancelRequestedAt)
    return cancelled(
      engine,
      run,
      new RunCancelledError(run.runId, run.cancelledBy ?? "api", run.cancelRequestedAt),
    );
  return run;
}

/**
 * A write of a token's call refused because the run no longer stood as read (FenceLostError): the
 * run as it stands now, read again (an ending of its own token's, a cancel, another start).
 */
async function runAfterLostWrite(engine: Engine, run: Run): Promise<Run> {
  const now = await getRun(engine, run);
  if (now === null) throw new RunNotFoundError(run.runId);
  return now;
}

/**
 * A run asked to cancel before it was handed over (its worker's request was under way): it ends
 * CANCELLED now, and the target's call is refused as stale.
 */
async function cancelled(engine: Engine, run: Run, cancel: RunCancelledError): Promise<never> {
  const job = await getJob(engine, run.jobId);
  try {
    await endOnCancelRequest(engine, run, cancel, {
      // A recurring job's handed-over run is listed in its activeRuns until it ends.
      tracked: job !== null && !("runAt" in job.schedule),
      executedVersion: run.executedVersion,
    });
  } catch (error) {
    if (!(error instanceof FenceLostError)) throw error;
  }
  throw new RunTokenStaleError({ ...run, status: "CANCELLED" }, "the run was cancelled");
}

/**
 * When the run times out, and the timeout that counts: the `timesOutAt` its first delivery
 * recorded, with the timeout beside it (`attemptDeadline`: the job may have been edited since). A
 * run with none (its token written by an older version, and its hand-over not recorded: its worker
 * still waits for the target's 202, or died after it; the target holds the token and heartbeats all
 * the same) times out at its start plus the job's timeout, as a worker holding it would stop it;
 * without this, a target whose worker died after its 202 could keep the run RUNNING past its
 * timeout for good. Null when nothing bounds it (the job is gone).
 */
async function deadlineOf(engine: Engine, run: Run, now: Date): Promise<AttemptDeadline | null> {
  const recorded = recordedDeadline(run);
  if (recorded !== null) return recorded;
  if (run.startedAt === null) return null;
  const job = await getJob(engine, run.jobId);
  if (job === null) return null;
  return attemptDeadline(run, job.timeoutSeconds, now);
}

/**
 * Ends a handed-over run past its timeout as a failure (retried by the job's policy) and says so.
 * A call that finds it ended meanwhile (another call timed it out, or completed it first) says why.
 */
async function timeOut(
  engine: Engine,
  run: Run,
  deadline: AttemptDeadline,
  now: Date,
): Promise<never> {
  const job = await getJob(engine, run.jobId);
  try {
    await finish(engine, run, timedOutResult(deadline.seconds), now, job);
  } catch (error) {
    if (!(error instanceof FenceLostError)) throw error;
    throw staleToken(await runAfterLostWrite(engine, run), run.fence);
  }
  throw new RunTokenStaleError(
    { ...run, status: "FAILED" },
    `the run timed out after ${deadline.seconds} s`,
  );
}

/** Records the run's result under its fence; throws FenceLostError when the run no longer stands so. */
async function finish(
  engine: Engine,
  run: Run,
  result: RunResult,
  now: Date,
  read?: Job | null,
): Promise<void> {
  const job = read === undefined ? await getJob(engine, run.jobId) : read;
  const executedVersion = run.executedVersion ?? job?.version ?? run.jobVersion;
  try {
    if (job === null) {
      await endForDeletedJob(engine, run, {
        ran: true,
        reason: "job deleted while the run ran; no retry",
        ...(result.kind === "failed" ? { error: result.error } : {}),
        executedVersion,
      });
    } else {
      await recordResult(engine, job, run, result, now, executedVersion);
    }
  } catch (error) {
    if (error instanceof RunCancelledError) return cancelled(engine, run, error);
    throw error;
  }
}

/**
 * A heartbeat: the run's lease (and its job's view of it) runs a lease from now. Past the run's
 * timeout, the run ends FAILED as timed out instead (retried by the job's policy) and the
 * heartbeat is refused as stale. Once the run ended (its own token's completion included) a
 * heartbeat is stale, naming the run's status, whether it came after the ending or raced it.
 */
export async function heartbeatAsyncRun(
  engine: Engine,
  runId: string,
  token: string,
  charge?: RequestCharge,
): Promise<{ readonly leaseUntil: Date; readonly timesOutAt: string | null }> {
  const run = await heldRun(engine, runId, token, charge);
  const now = engine.clock();
  const deadline = await deadlineOf(engine, run, now);
  if (deadline !== null && deadline.at.getTime() <= now.getTime())
    return timeOut(engine, run, deadline, now);
  let leaseUntil: Date;
  try {
    leaseUntil = await extendLease(engine, run, now);
  } catch (error) {
    if (error instanceof RunCancelledError) return cancelled(engine, run, error);
    if (error instanceof FenceLostError)
      throw staleToken(await runAfterLostWrite(engine, run), run.fence);
    throw error;
  }
  // Conditioned on the run being listed: a one-off's run is not, and the write changes nothing.
  await extendAdmission(engine, run.jobId, run.runId, leaseUntil);
  return { leaseUntil, timesOutAt: deadline?.at.toISOString() ?? null };
}

/** What a target reports when it completes its run. */
export type AsyncCompletion =
  | { readonly status: "succeeded"; readonly result?: unknown }
  | {
      readonly status: "failed";
      readonly error?: string;
      readonly retryable?: boolean;
      /** The least wait before the retry (within the job's maxDelaySeconds). */
      readonly retryAfterMs?: number;
    };

/**
 * Completes the run as its target reports: SUCCEEDED, or a failure with the job's retry policy
 * (FAILED and its next attempt, or DEAD; `retryable: false` goes DEAD at once). Past the run's
 * timeout it ends as timed out whatever the report. Returns the run as it ended. A completion sent
 * again after the run ended as this token's completion reports (`endedSoByToken`) returns the run
 * as well, and makes the job's side of the ending should the first have stopped short of it; any
 * other ending is stale, naming it.
 */
export async function completeAsyncRun(
  engine: Engine,
  runId: string,
  token: string,
  completion: AsyncCompletion,
  charge?: RequestCharge,
): Promise<Run> {
  const { run, fence } = await tokenRun(engine, runId, token, charge);
  if (!holds(run, fence)) return completedBefore(engine, run, token, fence, completion);
  if (run.cancelRequestedAt)
    return cancelled(
      engine,
      run,
      new RunCancelledError(run.runId, run.cancelledBy ?? "api", run.cancelRequestedAt),
    );
  const now = engine.clock();
  const deadline = await deadlineOf(engine, run, now);
  if (deadline !== null && deadline.at.getTime() <= now.getTime())
    return timeOut(engine, run, deadline, now);
  try {
    await finish(engine, run, resultOf(completion), now);
  } catch (error) {
    if (!(error instanceof FenceLostError)) throw error;
    // A repeat of this completion sent at once ended the run first, or something else did.
    const ended = await runAfterLostWrite(engine, run);
    return completedBefore(engine, ended, token, fence, completion);
  }
  const ended = await getRun(engine, run);
  if (ended === null) throw new RunNotFoundError(runId);
  return ended;
}

function resultOf(completion: AsyncCompletion): RunResult {
  return completion.status === "succeeded"
    ? { kind: "succeeded" }
    : {
        kind: "failed",
        error: boundedText(completion.error ?? "the target reported a failure"),
        retryable: completion.retryable ?? true,
        ...(completion.retryAfterMs === undefined ? {} : { retryAfterMs: completion.retryAfterMs }),
      };
}

/**
 * A completion that finds its run no longer held by its token: a repeat of the completion that
 * ended it (the target sends it again when the answer was lost) answers the run, as the first
 * did, and makes the job's side of the ending should the first have stopped short of it (the API
 * function died between the two writes: nothing else would make it); else stale (409).
 */
async function completedBefore(
  engine: Engine,
  run: Run,
  token: string,
  fence: number,
  completion: AsyncCompletion,
): Promise<Run> {
  // Started again, cancelled, or still running: no ending of this token's completion.
  if (run.fence !== fence || !ENDED.has(run.status)) throw staleToken(run, fence);
  if (!endedSoByToken(run, token, fence, completion))
    throw new RunTokenStaleError(
      run,
      `${staleWhy(run, fence)}, not as this completion reports (${completion.status})`,
    );
  const job = await getJob(engine, run.jobId);
  if (job !== null) await repairJobAfterRun(engine, job, run);
  return run;
}

/**
 * Whether the run ended as this completion reports, by this token's delivery: the run holds the
 * token's hash (not as the previous delivery's) under the token's fence, and it ended before its
 * `timesOutAt` (an ending at or after it is the timeout's: a completion is accepted only before
 * it) with the report's status, and for a failure the report's error: DEAD for one not
 * retryable, FAILED or DEAD (out of attempts) for one that is. Read from the run as it stands, so
 * the usual completion writes nothing more. A cancel's ending (CANCELLED) is never one, nor an
 * ending of a run with no `timesOutAt` (an older version wrote its token, and its hand-over is
 * unrecorded): the job's timeout, which stood in for it, may have been edited since, and a
 * timeout's ending would pass for a completion copying its text.
 */
function endedSoByToken(
  run: Run,
  token: string,
  fence: number,
  completion: AsyncCompletion,
): boolean {
  if (run.fence !== fence || !runTokenMatches(token, run.runTokenHash)) return false;
  if (run.finishedAt === null || typeof run.timesOutAt !== "string") return false;
  if (Date.parse(run.finishedAt) >= Date.parse(run.timesOutAt)) return false;
  const result = resultOf(completion);
  if (result.kind === "succeeded") return run.status === "SUCCEEDED";
  const statuses = result.retryable ? ["FAILED", "DEAD"] : ["DEAD"];
  return statuses.includes(run.status) && run.error === result.error;
}
