import { sleep } from "../clock.js";
import type { Engine } from "../engine.js";
import { FenceLostError, JobNotFoundError, RunCancelledError } from "../errors.js";
import type { Job, Run } from "../model.js";
import { METRICS, runLogKeys } from "../observability.js";
import { type ReceivedRun, runKeysOf, setVisibility } from "../queue/work-queue.js";
import { takeTenantSlot } from "../quotas/concurrency.js";
import { quotaRecheckMs } from "../quotas/recheck.js";
import { releaseBufferSlot, releaseRerunMark } from "../storage/admission.js";
import { runMessageOf } from "../storage/items.js";
import { type HeldRun, lostToStartAtFence } from "../storage/run-fence.js";
import { finishRun } from "../storage/run-finish.js";
import { parkRun } from "../storage/run-park.js";
import { getJob } from "../storage/run-reads.js";
import { requeueRun } from "../storage/run-requeue.js";
import { leaveRunSlot, releaseRunSlot } from "../storage/run-slots.js";
import { startRun, takeRun } from "../storage/run-start.js";
import type { RunSlot } from "../storage/tenant-quotas.js";
import { admitRun, unwrittenStartOf } from "./admission.js";
import {
  handedOverDeadlinePassed,
  handOverRun,
  issueRunToken,
  timedOutResult,
} from "./async-delivery.js";
import { reportLostRun } from "./lost-run.js";
import { decideRun } from "./run-decision.js";
import { endOnCancelRequest, type RunProgress, repairJobAfterRun } from "./run-endings.js";
import { execute, heartbeatEveryMs, type RunExecutionDeps } from "./run-execution.js";
import { endForDeletedJob, isRecurring, recordResult, resend, startLagMs } from "./run-outcome.js";
import { giveStartBackOnStorageError } from "./start-give-back.js";

export interface WorkerDeps extends RunExecutionDeps {
  readonly workerId: string;
  /** How soon a run held back by its overlap policy looks again; tests shorten it (SQS delays are whole seconds). */
  readonly overlapRecheckMs?: number;
}

/** `ack`: delete the message. `keep`: leave it, SQS delivers it again after its visibility. */
type Disposition = "ack" | "keep";

/** A message may arrive up to a second early (SQS delays are whole seconds); later than this it is re-sent. */
export const MAX_EARLY_WAIT_MS = 2_000;
/** The visibility a long-lived loop receives with: a lease, plus the longest wait for an early message. */
export function receiveVisibilitySeconds(leaseSeconds: number): number {
  return Math.ceil(leaseSeconds + MAX_EARLY_WAIT_MS / 1000);
}

/** How soon a run held back by its overlap policy looks again, unless its deps say otherwise. */
const OVERLAP_RECHECK_MS = 5_000;

/**
 * Handles one delivery of a run message. Safe to call for a duplicate or late
 * delivery: the conditional start lets only one worker in, and a finished run
 * is acknowledged without running anything. Start, then decide: the job is
 * read after the fenced start write, so a cancel, pause or edit committed
 * before the start is seen, and one committed after it finds the run RUNNING.
 * A first delivery of a run never started holds its start unwritten until the
 * run's first write (`takeRun`): the job is read with the run, and until that
 * write the run is QUEUED to others (its fenced writes then fail if a cancel or
 * another start came first; a recurring job's admission lets one delivery on).
 *
 * A message the Lambda event source hands over stays hidden for the queue's
 * visibility (the worker function's timeout, 15 min by default), a loop's for
 * about a lease. Such a message is not shrunk to the lease up front, which
 * would cost a request per attempt: a delivery that throws is shown again a
 * lease later from its failure, a run that outlives its first heartbeat has its
 * message hidden for a lease at each beat, and a worker that dies before either
 * leaves its run to the reaper. Only a message delivered before (it came back
 * unacknowledged) is hidden for a lease once its run starts, so that a run that
 * kills every worker it starts on reaches the redrive's maxReceiveCount a lease
 * apart rather than a queue visibility apart.
 */
export async function processRun(deps: WorkerDeps, received: ReceivedRun): Promise<Disposition> {
  const leaseSeconds = deps.engine.settings.leaseMs / 1000;
  const hiddenPastLease =
    (received.visibilitySeconds ?? Number.POSITIVE_INFINITY) >
    receiveVisibilitySeconds(leaseSeconds);
  try {
    return await processDelivery(deps, received, hiddenPastLease);
  } catch (error) {
    if (hiddenPastLease) await hideForALease(deps.engine, received, "the delivery failed");
    throw error;
  }
}

/**
 * Sets a message's visibility to the lease, best effort: should SQS refuse, the message stays
 * hidden for the queue's visibility and the reaper re-sends its run once its deadline passes.
 */
async function hideForALease(engine: Engine, received: ReceivedRun, why: string): Promise<void> {
  await setVisibility(
    engine.sqs,
    received.queueUrl,
    received.receiptHandle,
    engine.settings.leaseMs / 1000,
  ).catch((error: unknown) => {
    engine.obs.log.warn("could not set a message's visibility to the lease; the reaper covers it", {
      ...runKeysOf(received.message),
      messageId: received.messageId,
      why,
      error: String(error),
    });
  });
}

async function processDelivery(
  deps: WorkerDeps,
  received: ReceivedRun,
  hiddenPastLease: boolean,
): Promise<Disposition> {
  const { engine } = deps;
  const message = received.message;
  const early = Date.parse(message.dueAt) - engine.clock().getTime();
  if (early > MAX_EARLY_WAIT_MS) {
    await resend(engine, message, new Date(message.dueAt));
    return "ack";
  }
  if (early > 0) await sleep(early);

  // A first delivery may hold its start unwritten (takeRun); a message that came back starts at
  // once, so that each delivery of a run that kills its worker counts as a start (the redrive DLQ).
  const started =
    received.receiveCount > 1
      ? await startRun(engine, message, deps.workerId, engine.clock())
      : await takeRun(engine, message, deps.workerId, engine.clock(), heartbeatEveryMs(deps));
  if (started.kind === "finished") {
    const job = started.job === undefined ? await getJob(engine, message.jobId) : started.job;
    if (job !== null) await repairJobAfterRun(engine, job, started.run);
  }
  if (started.kind !== "started") {
    engine.obs.log.info("delivery of a run that is not startable; acknowledged", {
      ...runKeysOf(message),
      state: started.kind,
    });
    return "ack";
  }
  // After the start, so that the message is shown again only once the run's lease has lapsed
  // and its next delivery can start it: each such start counts towards the redrive DLQ.
  if (hiddenPastLease && received.receiveCount > 1)
    await hideForALease(engine, received, "a redelivery started its run");
  const run = started.run;
  const progress: RunProgress = { tracked: false, executedVersion: null };
  try {
    try {
      return await runStarted(deps, received, run, progress, started.job, started.predecessor);
    } catch (error) {
      if (!(error instanceof RunCancelledError)) throw error;
      await endOnCancelRequest(engine, run, error, progress);
      return "ack";
    }
  } catch (error) {
    if (error instanceof FenceLostError) {
      reportLostRun(engine, run, error);
      return "ack";
    }
    // Failed on storage before its handler had the run: not a crash to count (the redrive DLQ).
    if (progress.executedVersion === null)
      await giveStartBackOnStorageError(engine, run, error, progress);
    throw error;
  }
}

async function runStarted(
  deps: WorkerDeps,
  received: ReceivedRun,
  run: HeldRun,
  progress: RunProgress,
  /** The job as read with the run, for a start held unwritten. */
  readWithRun: Job | null | undefined,
  /** A later attempt's predecessor as read with the run (null: gone); absent: not read. */
  predecessor: Run | null | undefined,
): Promise<Disposition> {
  const { engine } = deps;
  // Read after the start write (or with the run, for a start held unwritten), consistently:
  // whatever the job says then is what this run obeys.
  const read = readWithRun === undefined ? await getJob(engine, run.jobId) : readWithRun;
  // A wait for the tenant's concurrent-runs quota before this delivery (at a worker loop's gate,
  // or out in SQS once a loop handed the message back) is not lateness.
  const lateAsOf = new Date(engine.clock().getTime() - (received.waitedForQuotaMs ?? 0));
  // The job the decision was made on: read again when a one-off's floor lowering met a change.
  const { decision, job } = await decideRun(engine, read, run, lateAsOf, predecessor);
  if (decision.action === "wait")
    return requeueUntil(engine, run, decision.reason, decision.recheckAt);
  if (decision.action === "end") {
    await finishRun(
      engine,
      run,
      { ran: false, tracked: false, ...decision.ending },
      engine.clock(),
    );
    if (job?.bufferedRunId === run.runId) await releaseBufferSlot(engine, run.jobId, run.runId);
    if (job?.rerunWaiting === run.runId) await releaseRerunMark(engine, run.jobId, run.runId);
    return "ack";
  }
  if (decision.action === "park") {
    const parked = await parkRun(engine, run, engine.clock());
    // Resumed or cancelled meanwhile: the next delivery decides again.
    if (!parked) await resend(engine, runMessageOf(run), engine.clock());
    return "ack";
  }
  return runAdmitted(deps, received, decision.job, run, progress);
}

/**
 * The tenant's concurrent-runs quota, then the job's overlap policy. A run over the quota waits:
 * back to QUEUED with a fresh message a little later, started before, so its misfire clock does
 * not run while it waits. The slot is freed when the run ends here, whatever the ending; a
 * delivery let off for another start, or that never wrote its own, only leaves its take of it.
 * A tenant with no limit takes no slot.
 */
async function runAdmitted(
  deps: WorkerDeps,
  received: ReceivedRun,
  job: Job,
  run: HeldRun,
  progress: RunProgress,
): Promise<Disposition> {
  const { engine } = deps;
  const taken = await takeTenantSlot(engine, run, engine.clock());
  if (taken.kind === "full") {
    const retryAt = new Date(engine.clock().getTime() + quotaRecheckMs(run.fence, engine.random));
    const reason = `waiting: tenant at its concurrentRuns quota (${taken.limit})`;
    return requeueUntil(engine, run, reason, retryAt);
  }
  if (taken.kind === "unlimited") {
    const disposition = await runInSlot(deps, received, job, run, null, progress);
    return disposition === "held elsewhere" ? "ack" : disposition;
  }
  let heldElsewhere = false;
  try {
    const disposition = await runInSlot(deps, received, job, run, taken.slot, progress);
    if (disposition !== "held elsewhere") return disposition;
    heldElsewhere = true;
    return "ack";
  } catch (error) {
    heldElsewhere = lostToStartAtFence(error, run);
    throw error;
  } finally {
    // Only the start that wrote the run frees its slot whole; other deliveries leave their take.
    const ranHere = !heldElsewhere && (run.unwrittenStart?.written ?? true);
    const release = ranHere ? releaseRunSlot : leaveRunSlot;
    await release(engine, taken.slot).catch((error: unknown) => {
      // Its lease frees it: the slot is held a lease at most by a run that ended.
      engine.obs.log.warn("could not free a concurrent-runs slot", {
        ...runLogKeys(run),
        error: String(error),
      });
    });
  }
}

async function runInSlot(
  deps: WorkerDeps,
  received: ReceivedRun,
  job: Job,
  run: HeldRun,
  slot: RunSlot | null,
  progress: RunProgress,
): Promise<Disposition | "held elsewhere"> {
  const { engine, overlapRecheckMs = OVERLAP_RECHECK_MS } = deps;
  const tracked = isRecurring(job);
  if (tracked) {
    const admission = await admitRun(
      engine,
      job,
      run.runId,
      new Date(run.leaseUntil ?? engine.clock()),
      {
        ...(run.unwrittenStart?.written === false
          ? { unwrittenStart: unwrittenStartOf(run, heartbeatEveryMs(deps), engine.clock()) }
          : {}),
        // A retry or replay waits for the live run: skipped, its occurrence would be dropped.
        rerun: run.attempt > 1,
      },
    ).catch((error: unknown) => {
      if (!(error instanceof JobNotFoundError)) throw error;
      return null;
    });
    if (admission === null) {
      await endForDeletedJob(engine, run, { ran: false, reason: "job deleted" });
      return "ack";
    }
    const decision = admission.decision;
    if (decision.action === "held elsewhere") {
      engine.obs.log.info("another delivery of the run was admitted and runs it; acknowledged", {
        ...runLogKeys(run),
      });
      return "held elsewhere";
    }
    if (decision.action === "skip") {
      await finishRun(
        engine,
        run,
        { status: "SKIPPED", reason: decision.reason, ran: false, tracked: false },
        engine.clock(),
      );
      if (admission.job.bufferedRunId === run.runId)
        await releaseBufferSlot(engine, job.jobId, run.runId);
      return "ack";
    }
    if (decision.action === "buffer") {
      const retryAt = new Date(engine.clock().getTime() + overlapRecheckMs);
      return requeueUntil(engine, run, `waiting: overlap policy ${job.policies.overlap}`, retryAt);
    }
  }

  progress.tracked = tracked;
  const passed = handedOverDeadlinePassed(run, engine.clock());
  if (passed !== null) {
    // An earlier start delivered it and its target went quiet past the attempt's timeout: not
    // delivered again. Under the timeout and version it went with (an edit waits for the next).
    const timedOut = timedOutResult(passed.seconds);
    progress.error = timedOut.error;
    const executedVersion = run.executedVersion ?? job.version;
    await recordResult(engine, job, run, timedOut, engine.clock(), executedVersion);
    return "ack";
  }
  // An async delivery carries a run token made for it; the run holds the token's hash (and its
  // start) before the target, which may call back before it answers, has the token. A cancel
  // asked meanwhile fails this write: the run ends CANCELLED and is not delivered.
  const runToken =
    job.target?.mode === "async"
      ? await issueRunToken(engine, run, job, engine.clock())
      : undefined;
  progress.executedVersion = job.version;
  const outcome = await execute(deps, received, job, run, tracked, slot, runToken);
  const now = engine.clock();
  if (outcome.kind === "fence-lost" || outcome.kind === "cancelled") throw outcome.error;
  if (outcome.kind === "lease-lapsed") {
    // This worker no longer holds the run: another may have taken it over, and any write of it
    // would land beside (or after) that start's. The reaper re-sends it if none has, so the
    // message goes, as a lost fence's does, rather than count a start towards the redrive DLQ.
    // Counted as a lost fence is: the handler stopped part-way, and the run starts again.
    engine.obs.metrics.add(METRICS.leaseLapsed, 1, "Count");
    engine.obs.log.warn(
      "the run's lease lapsed before a heartbeat extended it; this worker writes nothing more",
      {
        ...runLogKeys(run),
        leaseUntil: outcome.error.context.leaseUntil,
      },
    );
    return "ack";
  }
  if (outcome.kind === "released") {
    // Back to QUEUED for whoever runs next; its message may die with this process, the reaper re-sends.
    await requeueRun(engine, run, outcome.reason, now);
    await resend(engine, runMessageOf(run), now).catch(() => undefined);
    return "ack";
  }
  // The run's start lag (the p99 alarm's metric) is recorded here, by the worker that started the
  // run, for every run it ran to an outcome or handed over: an async run ends in the API, maybe
  // hours later, and is counted once, where its start is known, like every other run.
  engine.obs.metrics.add(
    METRICS.schedulingLagMs,
    Math.max(0, startLagMs(run, now)),
    "Milliseconds",
  );
  if (outcome.kind === "handed-over") {
    // The target answered 202: it heartbeats and completes the run itself from now on.
    await handOverRun(engine, run, job, tracked, now);
    return "ack";
  }
  if (outcome.kind === "failed") progress.error = outcome.error;
  await recordResult(engine, job, run, outcome, now, job.version);
  return "ack";
}

/**
 * A run held back (its tenant's quota, its overlap policy, the attempt before it): QUEUED again
 * with why, and its message back at `recheckAt` (resend sets the message's dueAt to it).
 */
async function requeueUntil(
  engine: Engine,
  run: Run,
  reason: string,
  recheckAt: Date,
): Promise<Disposition> {
  await requeueRun(engine, run, reason, recheckAt);
  await resend(engine, runMessageOf(run), recheckAt);
  return "ack";
}
