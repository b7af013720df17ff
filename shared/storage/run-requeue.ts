import type { Engine } from "../engine.js";
import type { Run } from "../model.js";
import { keepCompletedJobForWaitingRun } from "./job-status.js";
import { runExpiresAt } from "./retention.js";
import { fencedRunUpdate } from "./run-fence.js";
import { boundedText } from "./stored-text.js";

/**
 * Puts a started run back to QUEUED (overlap made it wait, or its worker shut
 * down), with a reaper deadline a lease after `dueAt`; its new message is sent
 * by the caller. Throws FenceLostError once another worker has taken it over.
 * Its TTL moves to a retention from now: a run may wait longer than the
 * retention (its tenant at its concurrent-runs quota all that time), and TTL
 * must not delete a run that has not ended, nor its COMPLETED job
 * (`keepCompletedJobForWaitingRun`).
 */
export async function requeueRun(
  engine: Engine,
  run: Run,
  reason: string,
  dueAt: Date,
): Promise<void> {
  const deadline = new Date(dueAt.getTime() + engine.settings.leaseMs).toISOString();
  await fencedRunUpdate(engine, run, {
    set: "#status = :queued, reason = :reason, dueAt = :dueAt, inflightSk = :deadline, expiresAt = :expiresAt",
    remove: "leaseUntil",
    values: {
      ":queued": "QUEUED",
      ":reason": boundedText(reason),
      ":dueAt": dueAt.toISOString(),
      ":deadline": deadline,
      ":expiresAt": runExpiresAt(engine.clock(), engine.settings),
    },
    // Its answer lost, taken for a lost fence, the caller would send no fresh message, and the
    // run would wait for the reaper, a lease on, instead of its recheck.
    applied: (old) =>
      old.status === "QUEUED" && old.dueAt === dueAt.toISOString() && old.inflightSk === deadline,
  });
  await keepCompletedJobForWaitingRun(engine, run, engine.clock());
}
