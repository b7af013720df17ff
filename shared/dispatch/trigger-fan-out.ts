import { forEachConcurrently } from "../concurrency.js";
import type { Engine } from "../engine.js";
import { ConcurrentUpdateError } from "../errors.js";
import type { DueEntry, Job, Run, RunTrigger, TriggerFanOut } from "../model.js";
import { sendRuns } from "../queue/work-queue.js";
import { isAfterSchedule } from "../schedule/index.js";
import { recordShardCount } from "../shard-count.js";
import { detachFromUpstream } from "../storage/dependents.js";
import { runMessageOf } from "../storage/items.js";
import { getJob } from "../storage/run-reads.js";
import { queuedRun, skippedRun } from "../storage/runs.js";
import { removeTriggerEntry, writeTriggeredRun } from "../storage/trigger.js";

/** Dependents written at once. */
const FAN_OUT_CONCURRENCY = 16;
/** Reads of a dependent whose status kept changing under the write before giving up for this pass. */
const JOB_CHANGE_ATTEMPTS = 5;
/** Milliseconds tried past the fan-out's instant when other runs hold those keys. */
const KEY_ATTEMPTS = 1_000;

export interface FanOutResult {
  /** Runs queued (and sent) by this fan-out. */
  readonly queued: number;
  /** Dependents that were paused: their run is recorded SKIPPED. */
  readonly skipped: number;
}

/**
 * Fans a `trigger` entry out to its dependents: each dependent still `after` the upstream with an
 * `on` that matches gets one run (QUEUED, or SKIPPED while it is paused; a cancelled, completed or
 * deleted dependent gets nothing, and a cancelled or gone one is taken out of the upstream's
 * `dependents`, where a cancel killed before its unlink left it), then the entry goes. An upstream job cancelled or deleted
 * before a dependent's run is written triggers nothing (each write checks it), even when its run
 * ended before the cancel reached it. Safe to repeat, and to run twice at once
 * (the worker right after the ending and a dispatcher pass): each dependent's run is written with
 * a record keyed by the upstream run, so a second fan-out finds it and writes nothing. A crash
 * midway leaves the entry for the next pass, which writes the dependents not done yet. A run
 * written but never sent is re-sent by the reaper, like any QUEUED run whose message was lost.
 */
export async function fanOutTrigger(engine: Engine, entry: DueEntry): Promise<FanOutResult> {
  await recordShardCount(engine);
  const fanOut = entry.fanOut;
  let queued = 0;
  let skipped = 0;
  if (fanOut !== undefined) {
    const upstream: RunTrigger = {
      jobId: entry.jobId,
      runId: fanOut.runId,
      scheduledFor: entry.scheduledFor,
    };
    const toSend: Run[] = [];
    // Every dependent is tried even when one cannot be written: what was written is sent, and
    // then the failure keeps the entry for the next pass.
    const failure = await forEachConcurrently(
      fanOut.dependents,
      FAN_OUT_CONCURRENCY,
      async (dependentId) => {
        const written = await triggerDependent(engine, entry, fanOut, upstream, dependentId);
        if (written === null) return;
        if (written.status === "QUEUED") toSend.push(written);
        else skipped++;
      },
    ).then(
      () => undefined,
      (error: unknown) => ({ error }),
    );
    queued = toSend.length;
    const now = engine.clock();
    await sendRuns(
      engine.sqs,
      engine.queues,
      toSend.map((run) => ({ message: runMessageOf(run), dueAt: new Date(run.dueAt) })),
      now,
    ).catch((error: unknown) => {
      // Each run is QUEUED with its reaper deadline: the reaper sends what this could not.
      engine.obs.log.warn("a fan-out could not send every run; the reaper will", {
        tenantId: entry.tenantId,
        jobId: entry.jobId,
        upstreamRunId: fanOut.runId,
        runs: toSend.map((run) => run.runId),
        error: String(error),
      });
    });
    if (failure !== undefined) throw failure.error;
  }
  await removeTriggerEntry(engine, entry.key);
  return { queued, skipped };
}

/** The dependent's run this fan-out wrote, or null when it wrote none (not wanted, or done before). */
async function triggerDependent(
  engine: Engine,
  entry: DueEntry,
  fanOut: TriggerFanOut,
  upstream: RunTrigger,
  dependentId: string,
): Promise<Run | null> {
  for (let read = 0; read < JOB_CHANGE_ATTEMPTS; read++) {
    const dependent = await getJob(engine, dependentId);
    if (dependent === null || dependent.status === "CANCELLED") {
      // A cancel or delete takes its job out of its upstreams' dependents after its commit; one
      // killed in between left it listed, for good unless repeated: the fan-out takes it out.
      await detachFromUpstream(engine, entry.jobId, dependentId);
      return null;
    }
    if (!wantsTrigger(dependent, entry, fanOut)) return null;
    const now = engine.clock();
    for (let offset = 0; offset < KEY_ATTEMPTS; offset++) {
      const at = new Date(now.getTime() + offset);
      const { run, item } = runFor(engine, dependent, upstream, at, now);
      const outcome = await writeTriggeredRun(engine, dependent, upstream, item, now);
      if (outcome === "written") return run;
      if (outcome === "done-before" || outcome === "upstream-ended") return null;
      if (outcome === "job-changed") break;
    }
  }
  // Left in its bucket (not set aside): the next pass tries again.
  throw new ConcurrentUpdateError(
    `fan-out of ${fanOut.runId} to ${dependentId} could not be written; the next pass tries again`,
  );
}

/**
 * The dependent's run at `at` (its occurrence key): QUEUED to start now, or, while it is paused,
 * SKIPPED with the reason (a paused job's triggers are not kept for its resume). Due at `at`, not
 * `now`: a run moved a few milliseconds on, past another fan-out's in the same millisecond, is due
 * at that instant, so its worker (which waits for a message's dueAt) does not start it before its
 * `scheduledFor`.
 */
function runFor(
  engine: Engine,
  dependent: Job,
  upstream: RunTrigger,
  at: Date,
  now: Date,
): { run: Run; item: Record<string, unknown> } {
  const spec = {
    jobId: dependent.jobId,
    tenantId: dependent.tenantId,
    scheduledFor: at,
    dueAt: at,
    attempt: 1,
    priority: dependent.priority,
    jobVersion: dependent.version,
    trigger: upstream,
  };
  if (dependent.status === "ACTIVE") return queuedRun(spec, now, engine.settings);
  const reason = `job paused: not run after ${upstream.runId}`;
  const item = skippedRun(spec, reason, now, engine.settings);
  return { run: { ...queuedRun(spec, now, engine.settings).run, status: "SKIPPED", reason }, item };
}

/**
 * The dependent is the upstream's tenant's, ACTIVE or PAUSED, and its schedule still runs after
 * the upstream on this ending (it may have been edited since the upstream run started).
 */
function wantsTrigger(dependent: Job, entry: DueEntry, fanOut: TriggerFanOut): boolean {
  if (dependent.tenantId !== entry.tenantId) return false;
  if (dependent.status !== "ACTIVE" && dependent.status !== "PAUSED") return false;
  const schedule = dependent.schedule;
  if (!isAfterSchedule(schedule) || !schedule.after.jobs.includes(entry.jobId)) return false;
  const on = schedule.after.on;
  return (
    on === "completion" ||
    (on === "success" && fanOut.status === "SUCCEEDED") ||
    (on === "failure" && fanOut.status === "DEAD")
  );
}
