import type { Engine } from "../engine.js";
import { idempotencyRecordPut, readIdempotencyRecordAt } from "./idempotency-records.js";
import { jobStatusCheck, triggerIdempotencyKey } from "./items.js";
import { ConditionsFailedError, type NamedWrite, writeTransaction } from "./transaction.js";

/** A trigger's idempotency key, for the job it triggers. */
export interface TriggerKey {
  readonly tenantId: string;
  readonly jobId: string;
  readonly key: string;
}

/** What writing a triggered run came to. */
export type TriggeredRunWrite = "written" | "instantTaken" | "keyTaken" | "jobChanged";

/**
 * Puts a triggered run's QUEUED item, conditioned on its key being free and on its job still
 * existing with the status and version the trigger read (a cancel, delete or pause between the
 * read and this write would otherwise be outrun: a run queued for a worker to end unrun, or to
 * wait out a pause the trigger is refused under; an edit, a run at its one-off's new runAt), and with an idempotency key its record in the same transaction
 * (a record past its window is replaced). `instantTaken` when the job already has a run for that
 * occurrence (another trigger in the same millisecond, or a claimed occurrence of the schedule at
 * that instant); `keyTaken` when another trigger with this key was written meanwhile;
 * `jobChanged` when the job is gone, or its status or version moved on. Nothing is written but on `written`.
 */
export async function writeTriggeredRun(
  engine: Engine,
  job: { readonly jobId: string; readonly status: string; readonly version: number },
  item: Record<string, unknown>,
  key: TriggerKey | undefined,
): Promise<TriggeredRunWrite> {
  const writes: NamedWrite<"run" | "idempotency" | "job">[] = [
    {
      name: "run",
      write: {
        Put: {
          TableName: engine.tables.runs,
          Item: item,
          ConditionExpression: "attribute_not_exists(pk)",
        },
      },
    },
    {
      name: "job",
      write: jobStatusCheck(engine.tables.jobs, job.jobId, job.status, job.version),
    },
  ];
  if (key) {
    writes.push({
      name: "idempotency",
      write: idempotencyRecordPut(
        engine,
        triggerIdempotencyKey(key.tenantId, key.jobId, key.key),
        { scheduledFor: item.scheduledFor },
        engine.clock(),
      ),
    });
  }
  try {
    await writeTransaction(engine, "trigger", writes);
    return "written";
  } catch (error) {
    if (!(error instanceof ConditionsFailedError)) throw error;
    if (error.has("idempotency")) return "keyTaken";
    if (error.has("job")) return "jobChanged";
    if (error.has("run")) return "instantTaken";
    throw error;
  }
}

/** The occurrence of the run an earlier trigger with this key queued, within the key's window. */
export async function readTriggerRecord(engine: Engine, key: TriggerKey): Promise<string | null> {
  const record = await readIdempotencyRecordAt(
    engine,
    triggerIdempotencyKey(key.tenantId, key.jobId, key.key),
  );
  return record === null ? null : String(record.scheduledFor);
}
