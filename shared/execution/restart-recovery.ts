import { type ReapResult, reap } from "../dispatch/reaper.js";
import type { Engine } from "../engine.js";
import type { Run } from "../model.js";
import { getJob } from "../storage/run-reads.js";
import { repairJobAfterRun } from "./run-endings.js";

/** Every deadline is before this: after a restart, every run still waiting is re-sent. */
const EVERY_DEADLINE = new Date("9999-12-31T00:00:00.000Z");

/**
 * After a restart whose queues lost every message (the sandbox's in-memory emulator): every run
 * in flight is sent again at once rather than a lease later, and an ended run whose worker died
 * between the run's ending and the job's write gets that write, which the lost message's
 * redelivery would have made (a one-off would stay ACTIVE with no lastRun).
 */
export function recoverLostMessages(engine: Engine): Promise<ReapResult> {
  return reap(engine, {
    overdueBefore: EVERY_DEADLINE,
    maxPerShard: Number.POSITIVE_INFINITY,
    repairEnded: (run) => repairEndedRun(engine, run),
  });
}

/** An ended run's side on its job, if the job lacks it (the repair decides on the job as read). */
async function repairEndedRun(engine: Engine, run: Run): Promise<void> {
  const job = await getJob(engine, run.jobId);
  if (job !== null) await repairJobAfterRun(engine, job, run);
}
