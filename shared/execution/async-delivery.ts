import type { Engine } from "../engine.js";
import { FenceLostError } from "../errors.js";
import type { Job, Run } from "../model.js";
import { runLogKeys } from "../observability.js";
import { extendAdmission } from "../storage/admission.js";
import type { HeldRun } from "../storage/run-fence.js";
import { recordHandOver, recordRunToken } from "../storage/run-handover.js";
import { newRunToken, runTokenHash } from "../webhooks/run-token.js";
import type { RunResult } from "./run-outcome.js";

/**
 * The worker's side of an async (long) run: the delivery's run token written before the target
 * has it, the hand-over once the target answered 202, and the attempt's timeout, which every
 * later start of the run keeps. The target's own calls are in `async-runs.ts`.
 */

/**
 * What the worker does before it delivers an async run: makes the delivery's run token and writes
 * its hash to the run under this start's fence (with the start, if still unwritten), so the
 * target's first call, which may come before its 202 reaches the worker, finds it. The same write
 * records when the attempt times out, once: `jobTimeoutSeconds` after its first start, or the
 * `timesOutAt` an earlier delivery of it recorded (should the worker die after the target's 202,
 * the target runs the run with no hand-over recorded, and a later start must not count the
 * timeout from itself), and keeps the run for the retention after it, as a hand-over does.
 * Returns the token, which only the delivery carries.
 */
export async function issueRunToken(
  engine: Engine,
  run: HeldRun,
  jobTimeoutSeconds: number,
  now: Date,
): Promise<string> {
  const token = newRunToken(run.fence);
  const startedAt = Date.parse(run.startedAt ?? now.toISOString());
  const timeoutSeconds = attemptTimeoutSeconds(run, jobTimeoutSeconds);
  const timesOutAt = attemptTimeout(run) ?? new Date(startedAt + timeoutSeconds * 1000);
  await recordRunToken(engine, run, runTokenHash(token), { timesOutAt, timeoutSeconds }, now);
  return token;
}

/** What a run the target ended under its delivery's fence says (a cancel's ending aside). */
export const ENDED: ReadonlySet<string> = new Set(["SUCCEEDED", "FAILED", "DEAD"]);

/** What the worker does when the target answered 202: records the hand-over, keeps the job's overlap view live. */
export async function handOverRun(
  engine: Engine,
  run: Run,
  job: Job,
  tracked: boolean,
  now: Date,
): Promise<void> {
  const leaseUntil = new Date(now.getTime() + engine.settings.leaseMs);
  const startedAt = Date.parse(run.startedAt ?? now.toISOString());
  // A start after a lapsed lease keeps the attempt's time: it runs from the first delivery's
  // start, under the timeout it had then (the job may have been edited since).
  const timeoutSeconds = attemptTimeoutSeconds(run, job.timeoutSeconds);
  const timesOutAt = attemptTimeout(run) ?? new Date(startedAt + timeoutSeconds * 1000);
  try {
    await recordHandOver(
      engine,
      run,
      { leaseUntil, timesOutAt, timeoutSeconds, executedVersion: job.version },
      now,
    );
  } catch (error) {
    // The target may call back before it answers: one that completed the run (or heartbeated past
    // its timeout) with this delivery's token ended it under this start's fence. No other start
    // took the run over, so this is no lost fence; the run is the target's, as a hand-over's is.
    const found = error instanceof FenceLostError ? error.context.found : undefined;
    if (found === undefined || found.fence !== run.fence || !ENDED.has(found.status)) throw error;
    engine.obs.log.info("the async target ended its run before its 202 reached the worker", {
      ...runLogKeys(run),
      fence: run.fence,
      status: found.status,
    });
    return;
  }
  if (tracked) await extendAdmission(engine, run.jobId, run.runId, leaseUntil);
  engine.obs.log.info("run handed over to its async target", {
    ...runLogKeys(run),
    fence: run.fence,
    timesOutAt: timesOutAt.toISOString(),
  });
}

/**
 * When an async attempt times out: an earlier start of this run (its lease lapsed, the reaper sent
 * it again) delivered it and set it, with its token (or, before that was so, its hand-over). Null
 * for a run never delivered in async mode.
 */
function attemptTimeout(run: Pick<Run, "timesOutAt">): Date | null {
  return run.timesOutAt ? new Date(run.timesOutAt) : null;
}

/**
 * Whether the worker that has just started `run` must end it as timed out rather than deliver it:
 * an earlier start delivered it to its async target, which went quiet (or whose worker died after
 * its 202) past the attempt's timeout. Without this, a target that answers 202 and never calls
 * back is delivered again a lease apart for good, each start setting a new timeout, and its
 * attempt never fails.
 */
export function handedOverAndTimedOut(run: Run, now: Date): boolean {
  const timeout = attemptTimeout(run);
  return timeout !== null && timeout.getTime() <= now.getTime();
}

/**
 * The timeout an async attempt runs under: the one its first delivery recorded with its
 * `timesOutAt`. `jobTimeoutSeconds` (the job's now) stands in for a run not delivered yet, or
 * delivered before the run kept it.
 */
export function attemptTimeoutSeconds(
  run: Pick<Run, "handedOverTimeoutSeconds">,
  jobTimeoutSeconds: number,
): number {
  return run.handedOverTimeoutSeconds ?? jobTimeoutSeconds;
}

/** The failure of an attempt past its timeout, as every ending of one says it. */
export const timedOutResult = (timeoutSeconds: number): Extract<RunResult, { kind: "failed" }> => ({
  kind: "failed",
  error: `timed out after ${timeoutSeconds} s`,
  retryable: true,
});
