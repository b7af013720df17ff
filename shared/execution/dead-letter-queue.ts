import type { Engine } from "../engine.js";
import { runLogKeys } from "../observability.js";
import type { RunMessage } from "../queue/run-message.js";
import { recordShardCount } from "../shard-count.js";
import { releaseBufferSlot, releaseRerunMark } from "../storage/admission.js";
import { keepCompletedJobForDeadLetter } from "../storage/job-status.js";
import { ranForLastRun } from "../storage/last-run.js";
import { recordRunOnJob } from "../storage/run-on-job.js";
import { getJob, getRun } from "../storage/run-reads.js";
import { triggerEntryOf } from "../storage/trigger.js";
import { endsOneOff, endUnownedRun, reportRunCancelled } from "./run-endings.js";
import { reportRunFinished } from "./run-outcome.js";

/**
 * A message lands in the SQS redrive DLQ when workers received it
 * maxReceiveCount times without acknowledging it. That alone does not make
 * its run a poison: a worker that dies holding a batch loses every message it
 * had not started yet, and a delivery that fails on a storage error charges a
 * receive without running anything. So the run is marked DEAD (listed for
 * replay) only when every delivery of this message started it, each start
 * ending in a crash: maxReceiveCount starts, or maxReceiveCount − 1 for a
 * message sent while its run was never started, whose first delivery may run
 * it without writing its start (`takeRun`), and the last start left it RUNNING
 * (a start that parked it or made it wait left it QUEUED). Otherwise it stays
 * QUEUED, or RUNNING with a lapsed lease, and its wait, or the reaper once its
 * deadline passes, sends it again, as for any run whose message went missing.
 */
export async function handleCrashedRun(
  engine: Engine,
  message: RunMessage,
  receiveCount: number | null,
): Promise<void> {
  const seen = await getRun(engine, message);
  if (seen === null) return;
  // A DEAD ending files its dependents' trigger entry.
  await recordShardCount(engine);
  const sentAt = message.fence ?? 0;
  const starts = seen.fence - sentAt;
  // The first delivery of a message sent for a run never started may hold its start unwritten
  // (takeRun) and leave no trace when it crashes; every later delivery writes its start, and so
  // does every delivery of a message sent for a run started before.
  const poisonAt =
    sentAt > 0 ? engine.settings.maxReceiveCount : Math.max(1, engine.settings.maxReceiveCount - 1);
  if (starts < poisonAt) {
    if (seen.status === "QUEUED" || seen.status === "RUNNING")
      engine.obs.log.warn(
        "redrive: the run was not started on every delivery; left to the reaper",
        {
          ...runLogKeys(seen),
          starts,
          deliveries: receiveCount,
        },
      );
    return;
  }
  // A crash leaves its start RUNNING, its lease lapsing. A start that ended in a park (a paused job)
  // or a wait (overlap, the tenant's quota, the attempt before it), or that its delivery gave back
  // on a storage error, put the run back QUEUED: counted as a start, it crashed nothing, and the
  // run's own message (or its resume, or the reaper) comes for it. Its deliveries were
  // acknowledged, or failed without running it; the batch they came in was lost.
  if (seen.status === "QUEUED") {
    engine.obs.log.warn("redrive: the run's last start did not crash it; left to its wait", {
      ...runLogKeys(seen),
      starts,
      deliveries: receiveCount,
      reason: seen.reason,
    });
    return;
  }
  const times = receiveCount ? ` after ${receiveCount} deliveries` : "";
  const now = engine.clock();
  // A DEAD ending triggers the job's `failure` and `completion` dependents like a worker's does;
  // the next dispatcher pass fans the entry out.
  const job = await getJob(engine, seen.jobId);
  const trigger =
    job !== null && job.dependents.length > 0
      ? triggerEntryOf(engine, job, seen, "DEAD", now)
      : undefined;
  // Its dead letter's job kept as long as it is listed, before the ending (a run asked to cancel
  // ends CANCELLED instead, no dead letter).
  if (job !== null && !seen.cancelRequestedAt)
    await keepCompletedJobForDeadLetter(engine, job, seen, now);
  const run = await endUnownedRun(
    engine,
    message,
    "DEAD",
    `worker crashed: the run never recorded a result${times}`,
    now,
    seen,
    { trigger, crashedRunning: true },
  );
  if (run) {
    // A buffer_one job's waiting run may be the one that died; the next overlap may wait again.
    await releaseBufferSlot(engine, run.jobId, run.runId);
    // A retry or replay that died waiting leaves its mark: the job's next occurrences need not
    // yield to it (an admission would drop it too, reading the run ended).
    if (job?.rerunWaiting === run.runId) await releaseRerunMark(engine, run.jobId, run.runId);
    if (run.status === "DEAD") {
      engine.obs.log.error("run dead-lettered by the redrive DLQ", { ...runLogKeys(run) });
      // Counted per tenant as a worker's ending is (TENANT_LOG_EVENTS): the runs that crash
      // workers are the ones whose tenant an operator looks for first.
      reportRunFinished(engine, run, "DEAD", now);
    } else {
      // Asked to cancel while it ran, it ends CANCELLED as asked (endUnownedRun), and is counted
      // and logged as a worker's cancelled ending is: no dead run to alarm on or to replay.
      reportRunCancelled(engine, run, {
        cancelledBy: run.cancelledBy ?? null,
        cancelRequestedAt: run.cancelRequestedAt ?? null,
      });
    }
  }
  // A one-off's own occurrence ended here has ended for good, as a worker's ending has: the job
  // completes. Also when the run had already ended so (this message again, after a failure here):
  // CANCELLED as asked, or DEAD unless it was replayed since: the replay's run is the occurrence's
  // now, and its ending completes the job (SQS may deliver the message again hours later, after a
  // resume).
  const endedBefore =
    seen.status === "CANCELLED" || (seen.status === "DEAD" && !seen.replayedBy) ? seen : null;
  const ended = run ?? endedBefore;
  if (ended === null || job === null) return;
  const status = ended.status === "CANCELLED" ? "CANCELLED" : "DEAD";
  // A run ended here ran, DEAD or CANCELLED as asked: every delivery of its message started it and
  // crashed its worker (`crashedRunning`). It is its job's lastRun, as a worker's ending is (only
  // over a run that finished later), so the job does not go on naming the run before it.
  const ran = ranForLastRun(ended);
  const completesJob = job.status === "ACTIVE" && endsOneOff(job, ended, status);
  if (ran || completesJob)
    await recordRunOnJob(engine, ended, { status, ran, tracked: false, completesJob });
}
