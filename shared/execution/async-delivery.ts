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
 * timeout from itself), and keeps the run for the retention after it, as a hand-over does. It
 * records the version of `job` (the definition the delivery sends) as the run's executedVersion,
 * as a hand-over does too: a run whose worker died after the 202 ends naming the version it ran.
 * Returns the token, which only the delivery carries.
 */
export async function issueRunToken(
  engine: Engine,
  run: HeldRun,
  job: Pick<Job, "timeoutSeconds" | "version">,
  now: Date,
): Promise<string> {
  const token = newRunToken(run.fence);
  const { at: timesOutAt, seconds: timeoutSeconds } = attemptDeadline(run, job.timeoutSeconds, now);
  await recordRunToken(
    engine,
    run,
    runTokenHash(token),
    { timesOutAt, timeoutSeconds, executedVersion: job.version },
    now,
  );
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
  // A start after a lapsed lease keeps the attempt's time: it runs from the first delivery's
  // start, under the timeout it had then (the job may have been edited since).
  const { at: timesOutAt, seconds: timeoutSeconds } = attemptDeadline(run, job.timeoutSeconds, now);
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

/** When an async attempt times out, and the timeout (seconds) that counts: a timed-out ending names it. */
export interface AttemptDeadline {
  readonly at: Date;
  readonly seconds: number;
}

type AttemptTimes = Pick<
  Run,
  "timesOutAt" | "handedOverTimeoutSeconds" | "startedAt" | "handedOverAt"
>;

/**
 * The attempt's deadline as its first delivery recorded it: `timesOutAt`, set with its token (or,
 * before that was so, its hand-over) and kept by every later start of the run (its lease lapsed,
 * the reaper sent it again), and the timeout beside it. Null for a run never delivered in async
 * mode (or whose token an older version wrote, its hand-over unrecorded).
 *
 * A run handed over by a version before `handedOverTimeoutSeconds` has `timesOutAt` alone. Its
 * timeout is the one that set it, `timesOutAt` less the start it counted from, not the job's
 * (edited since, perhaps): written beside it by the next delivery, it would stand for good. That
 * start is the run's `startedAt` while it still holds the run; once a later start replaced it, the
 * hand-over's instant (`handedOverAt`, its 202, moments after the start) stands in for it, and
 * the timeout is rounded up to whole seconds.
 */
export function recordedDeadline(run: AttemptTimes): AttemptDeadline | null {
  if (typeof run.timesOutAt !== "string") return null;
  const at = new Date(run.timesOutAt);
  if (run.handedOverTimeoutSeconds !== undefined)
    return { at, seconds: run.handedOverTimeoutSeconds };
  // The earlier of the two is that start: a later start's startedAt comes after the 202.
  const from = Math.min(
    Date.parse(run.startedAt ?? run.timesOutAt),
    Date.parse(run.handedOverAt ?? run.timesOutAt),
  );
  return { at, seconds: Math.ceil((at.getTime() - from) / 1000) };
}

/**
 * The deadline an async attempt runs under: the one a delivery of it recorded, else (its first
 * delivery, or one whose token an older version wrote) `jobTimeoutSeconds` (the job's now) after
 * its start.
 */
export function attemptDeadline(
  run: AttemptTimes,
  jobTimeoutSeconds: number,
  now: Date,
): AttemptDeadline {
  const recorded = recordedDeadline(run);
  if (recorded !== null) return recorded;
  const startedAt = Date.parse(run.startedAt ?? now.toISOString());
  return { at: new Date(startedAt + jobTimeoutSeconds * 1000), seconds: jobTimeoutSeconds };
}

/**
 * The recorded deadline the worker that has just started `run` finds passed, when it must end the
 * run as timed out (under that deadline's timeout) rather than deliver it: an earlier start
 * delivered it to its async target, which went quiet (or whose worker died after its 202) past the
 * attempt's timeout. Without this, a target that answers 202 and never calls back is delivered
 * again a lease apart for good, each start setting a new timeout, and its attempt never fails.
 * Null when the run is to be delivered.
 */
export function handedOverDeadlinePassed(run: Run, now: Date): AttemptDeadline | null {
  const deadline = recordedDeadline(run);
  return deadline !== null && deadline.at.getTime() <= now.getTime() ? deadline : null;
}

/** The failure of an attempt past its timeout, as every ending of one says it. */
export const timedOutResult = (timeoutSeconds: number): Extract<RunResult, { kind: "failed" }> => ({
  kind: "failed",
  error: `timed out after ${timeoutSeconds} s`,
  retryable: true,
});
