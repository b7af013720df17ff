import { PutCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import { ConcurrentUpdateError, IdempotencyKeyTakenError } from "../errors.js";
import type { DueEntry, Job } from "../model.js";
import { ValidationError } from "../validation.js";
import { type UpstreamWriteName, upstreamOfWriteName } from "./dependents.js";
import { failedConditionItem, isConditionalCheckFailed } from "./dynamo-errors.js";
import { idempotencyRecordPut, readIdempotencyRecordAt } from "./idempotency-records.js";
import { encodeDueEntry, encodeJob, idempotencyKey } from "./items.js";
import { putDueEntry } from "./job-update.js";
import { completedJobExpiresAt, runsOnAfterEndMs } from "./retention.js";
import { ConditionsFailedError, type NamedWrite, writeTransaction } from "./transaction.js";

/**
 * An `after` job's create found a job of its chain changed since its check read it (an edit):
 * what the new job counts towards runsPerMinute may have changed with it. Nothing was written;
 * the create is planned again from fresh reads.
 */
export class UpstreamChangedError extends ConcurrentUpdateError {}

/** A create's idempotency key and a hash of its request, so a repeat returns the same job. */
export interface IdempotentRequest {
  readonly key: string;
  /** The hash of the request normalized (`idempotentCreate`). */
  readonly requestHash: string;
  /** The hash of the body as sent, which the version before normalizing compares with. */
  readonly earlierHash?: string;
}

/**
 * What an earlier create under an idempotency key recorded: the job it made and the hashes a
 * repeat is compared with. `requestHash` is the hash of the body as sent, which the version before
 * normalizing wrote and reads (a rollback, or its functions still answering during a deploy);
 * `normalizedHash` the hash of the normalized request. A record written by this version between
 * normalizing and this split holds the normalized hash in `requestHash` and no `normalizedHash`.
 */
export interface IdempotencyRecord {
  readonly jobId: string;
  readonly requestHash: string;
  readonly normalizedHash?: string;
}

/** The record's attributes for `idempotency`: what both versions compare a repeat with. */
function idempotencyRecordFields(
  idempotency: IdempotentRequest,
): Pick<IdempotencyRecord, "requestHash" | "normalizedHash"> {
  return idempotency.earlierHash === undefined
    ? { requestHash: idempotency.requestHash }
    : { requestHash: idempotency.earlierHash, normalizedHash: idempotency.requestHash };
}

/** An idempotency record as stored. */
export function decodeIdempotencyRecord(item: Record<string, unknown>): IdempotencyRecord {
  return {
    jobId: String(item.jobId),
    requestHash: String(item.requestHash),
    ...(typeof item.normalizedHash === "string" ? { normalizedHash: item.normalizedHash } : {}),
  };
}

/** What an earlier create with this idempotency key recorded, if any. */
export async function readIdempotencyRecord(
  engine: Engine,
  tenantId: string,
  key: string,
): Promise<IdempotencyRecord | null> {
  const record = await readIdempotencyRecordAt(engine, idempotencyKey(tenantId, key));
  return record ? decodeIdempotencyRecord(record) : null;
}

/** A new job's item; one created COMPLETED (nothing of its schedule is left to run) expires at its retention. */
export function newJobItem(engine: Engine, job: Job): Record<string, unknown> {
  return {
    ...encodeJob(job),
    ...(job.status === "COMPLETED"
      ? {
          expiresAt: completedJobExpiresAt(
            new Date(job.createdAt),
            runsOnAfterEndMs(job),
            engine.settings,
          ),
        }
      : {}),
  };
}

/**
 * A new job's plain put (its id is new, so its key is free). The SDK sends a put again when its
 * answer is lost (a dropped connection, a 500 after DynamoDB applied it), and the put then fails
 * its condition on the job it wrote: a failure that finds this job there (its tenant, created at
 * its instant) is the put having been made. Taken for a refusal, the create would answer an error
 * for a job that exists (a client's retry creates it twice) and give back its quota share.
 */
async function putNewJob(
  engine: Engine,
  putJob: { TableName: string; Item: Record<string, unknown>; ConditionExpression: string },
  job: Job,
): Promise<void> {
  try {
    await engine.doc.send(
      new PutCommand({ ...putJob, ReturnValuesOnConditionCheckFailure: "ALL_OLD" }),
    );
  } catch (error) {
    const found = isConditionalCheckFailed(error) ? failedConditionItem(error) : null;
    const written =
      found !== null && found.tenantId === job.tenantId && found.createdAt === job.createdAt;
    if (!written) throw error;
  }
}

/**
 * Writes a new job with its pending due entry and idempotency record, all or
 * nothing, each conditioned on its key being free (an idempotency record past
 * its window is free: it is replaced). A taken idempotency key is
 * `IdempotencyKeyTakenError`. An `after` job adds itself to its upstreams'
 * dependents in the same transaction, holding the chain above them as read
 * (`upstreams`, see dependents.ts): an upstream gone or another tenant's
 * meanwhile is a `ValidationError` naming `schedule.after.jobs`, one edited
 * meanwhile an `UpstreamChangedError`. Alone (no entry, no key, no upstream) the job is one
 * plain put: a transaction would bill it twice. With only an entry that no pass
 * sweeps yet (`pendingUnswept`: due past the fast-path window), two plain puts, the entry
 * first: the job's put is the commit, and an entry whose job was never written
 * is removed as an orphan by the claim that finds no job pointing at it. An
 * entry inside the window goes in a transaction with its job: a pass could
 * sweep it between two puts, find no job and remove it, and the job would
 * name an entry that is gone. A job created COMPLETED (nothing of its schedule
 * is left to run) expires at its retention.
 */
export async function writeNewJob(
  engine: Engine,
  job: Job,
  pending: DueEntry | null,
  idempotency: IdempotentRequest | undefined,
  upstreams: readonly NamedWrite<UpstreamWriteName>[] = [],
  pendingUnswept = false,
): Promise<void> {
  const createdAt = new Date(job.createdAt);
  const putJob = {
    TableName: engine.tables.jobs,
    Item: newJobItem(engine, job),
    ConditionExpression: "attribute_not_exists(pk)",
  };
  const writes: NamedWrite<"job" | "dueEntry" | "idempotency" | UpstreamWriteName>[] = [
    { name: "job", write: { Put: putJob } },
    ...upstreams,
  ];
  if (pending) writes.push({ name: "dueEntry", write: putDueEntry(engine, pending) });
  if (idempotency) {
    writes.push({
      name: "idempotency",
      write: idempotencyRecordPut(
        engine,
        idempotencyKey(job.tenantId, idempotency.key),
        { jobId: job.jobId, ...idempotencyRecordFields(idempotency), createdAt: job.createdAt },
        createdAt,
      ),
    });
  }
  if (writes.length === 1) {
    await putNewJob(engine, putJob, job);
    return;
  }
  if (writes.length === 2 && pending !== null && pendingUnswept) {
    await engine.doc.send(
      new PutCommand({ TableName: engine.tables.jobs, Item: encodeDueEntry(pending) }),
    );
    await putNewJob(engine, putJob, job);
    return;
  }
  try {
    await writeTransaction(engine, "create", writes);
  } catch (error) {
    if (idempotency && error instanceof ConditionsFailedError && error.has("idempotency"))
      throw new IdempotencyKeyTakenError(idempotency.key, { cause: error });
    if (error instanceof ConditionsFailedError) {
      const failed = [...error.failed].filter((name) => upstreamOfWriteName(name) !== null);
      // A failed condition returns the item as it stands: a named upstream with none, or another
      // tenant's, is gone. A job further up that is gone changed the chain: planned again.
      const named = new Set("after" in job.schedule ? job.schedule.after.jobs : []);
      const gone = failed
        .map((name) => ({ id: upstreamOfWriteName(name) ?? "", item: error.item(name) }))
        .filter(({ id, item }) => named.has(id) && item?.tenantId !== job.tenantId)
        .map(({ id }) => id);
      if (gone.length > 0)
        throw new ValidationError(
          [{ field: "schedule.after.jobs", message: `no job ${gone.join(", ")} of this tenant` }],
          { cause: error },
        );
      if (failed.length > 0)
        throw new UpstreamChangedError(
          `job ${failed.map(upstreamOfWriteName).join(", ")} changed since this job's check read it; try again`,
          { cause: error },
        );
    }
    throw error;
  }
}
