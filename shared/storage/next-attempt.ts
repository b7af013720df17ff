import { DeleteCommand, PutCommand, UpdateCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import type { DueEntry, RunStatus } from "../model.js";
import { conditionalWrite, retryOnContention } from "./dynamo-errors.js";
import { encodeDueEntry } from "./items.js";
import { boundedText } from "./stored-text.js";

type Item = Record<string, unknown>;

/** A failed run's next attempt: a QUEUED run to send at once, or a due entry for the dispatcher. */
export type NextAttemptWrite = { readonly runItem: Item } | { readonly dueEntry: DueEntry };

/** A next attempt is written once: its item must not exist yet. */
const NOT_WRITTEN_YET = "attribute_not_exists(pk)";
/**
 * A next attempt taken back only as this failure wrote it: a run still QUEUED and never started,
 * or an entry not yet claimed, naming the failed attempt under this start's fence.
 */
const RUN_AS_PUT = "#status = :queued AND fence = :unstarted AND retryOf.fence = :fence";
const ENTRY_AS_PUT = "attribute_exists(pk) AND retryOf.fence = :fence";

/**
 * Puts a failed run's next attempt (it carries `retryOf`), before the run's FAILED ending: one
 * conditional PutItem, where the ending and the attempt in one transaction billed every item twice.
 * An item already at its key is this attempt: this very put, sent again by the SDK after its answer
 * was lost, or an earlier start's of the same failed attempt that died (or lost its fence) before
 * its ending; either waits for the attempt to say FAILED, so the ending that follows is what lets
 * it run. A retry entry's key holds its due time and the minute it was filed, so an earlier start's
 * entry lies elsewhere: both are claimed, and the run's put (one key) lets the attempt run once.
 * Answers whether it was written (false: an item was there).
 */
export function putNextAttempt(
  engine: Engine,
  next: NextAttemptWrite,
  operation = "finish",
): Promise<boolean> {
  const put =
    "runItem" in next
      ? { TableName: engine.tables.runs, Item: next.runItem }
      : { TableName: engine.tables.jobs, Item: encodeDueEntry(next.dueEntry) };
  return conditionalWrite(() =>
    retryOnContention(engine, operation, () =>
      engine.doc.send(new PutCommand({ ...put, ConditionExpression: NOT_WRITTEN_YET })),
    ),
  );
}

/** Why a next attempt does not run: the attempt before it ended otherwise than FAILED. */
export function retryNotRunReason(predecessor: {
  readonly runId: string;
  readonly status: RunStatus;
}): string {
  return `${predecessor.runId} ended ${predecessor.status}, not FAILED: this retry does not run`;
}

/**
 * Takes back a next attempt this failure put, once its ending was refused on a run that will never
 * say FAILED (a cancel asked of it, or another ending written): the run SKIPPED with the reason, the
 * entry deleted, so nothing waits for the reaper and the history shows no retry pending. Only as the
 * put left it (`RUN_AS_PUT`, `ENTRY_AS_PUT`): one that a worker or a claim reached since is left to
 * its worker, which decides the same. Best effort: the caller logs a failure.
 */
export async function retractNextAttempt(
  engine: Engine,
  next: NextAttemptWrite,
  fence: number,
  reason: string,
  now: Date,
): Promise<void> {
  await conditionalWrite(async () => {
    if ("runItem" in next) {
      await engine.doc.send(
        new UpdateCommand({
          TableName: engine.tables.runs,
          Key: { pk: next.runItem.pk, sk: next.runItem.sk },
          ConditionExpression: RUN_AS_PUT,
          UpdateExpression: "SET #status = :skipped, reason = :reason, finishedAt = :now",
          ExpressionAttributeNames: { "#status": "status" },
          ExpressionAttributeValues: {
            ":queued": "QUEUED",
            ":unstarted": 0,
            ":fence": fence,
            ":skipped": "SKIPPED",
            ":reason": boundedText(reason),
            ":now": now.toISOString(),
          },
        }),
      );
    } else {
      await engine.doc.send(
        new DeleteCommand({
          TableName: engine.tables.jobs,
          Key: next.dueEntry.key,
          ConditionExpression: ENTRY_AS_PUT,
          ExpressionAttributeValues: { ":fence": fence },
        }),
      );
    }
  });
}
