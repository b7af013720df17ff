import { DeleteCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import type { Job } from "../model.js";
import { conditionalWrite, retryOnContention } from "./dynamo-errors.js";
import { jobKey } from "./items.js";

/** Only an ended job's item goes: a cancel (or completion) comes first, with its due entry. */
const JOB_ENDED = "#status IN (:cancelled, :completed)";

/**
 * Deletes an ended (CANCELLED or COMPLETED) job's item: its definition, and
 * with it its place in the tenant's index. Its runs stay in the runs table
 * until their TTL. A failed condition means a concurrent delete removed it
 * first (no writer moves a job out of an ended status), which is the same
 * outcome.
 */
export async function deleteEndedJob(engine: Engine, job: Job): Promise<void> {
  await conditionalWrite(() =>
    retryOnContention(engine, "delete", () =>
      engine.doc.send(
        new DeleteCommand({
          TableName: engine.tables.jobs,
          Key: jobKey(job.jobId),
          ConditionExpression: JOB_ENDED,
          ExpressionAttributeNames: { "#status": "status" },
          ExpressionAttributeValues: { ":cancelled": "CANCELLED", ":completed": "COMPLETED" },
        }),
      ),
    ),
  );
}
