import { UpdateCommand } from "@aws-sdk/lib-dynamodb";
import type { NewJob } from "../../shared/jobs/index.js";
import { newJobId } from "../../shared/keys.js";
import type { Job } from "../../shared/model.js";
import { jobKey } from "../../shared/storage/items.js";
import { newJobItem } from "../../shared/storage/job-create.js";
import { type EngineFixture, storedJob } from "./engine-fixture.js";
import { putItems } from "./seed.js";

/**
 * Writes `count` jobs after `upstream` (its tenant's, each its `testJob` with `overrides`) straight
 * into the table, and links them on it as their creates do (`linkUpstream`: ADD to `dependents`,
 * `linkRevision` one more each): BatchWriteItems (putItems) and one UpdateItem, where each create
 * reads the upstream and writes a transaction, which the others' links on the same item make
 * conflict and retry. For a case about what runs after the upstream, not how the jobs were created.
 * Returns the jobs' ids.
 */
export async function seededDependents(
  f: EngineFixture,
  upstream: Job,
  count: number,
  on: "success" | "completion",
  overrides: Partial<NewJob> = {},
): Promise<string[]> {
  const at = f.engine.clock();
  const jobs = Array.from({ length: count }, () =>
    storedJob(newJobId(at), at, {
      ...overrides,
      tenantId: upstream.tenantId,
      schedule: { after: { jobs: [upstream.jobId], on } },
    }),
  );
  await putItems(
    f,
    f.engine.tables.jobs,
    jobs.map((job) => newJobItem(f.engine, job)),
  );
  const ids = jobs.map((job) => job.jobId);
  await f.engine.doc.send(
    new UpdateCommand({
      TableName: f.engine.tables.jobs,
      Key: jobKey(upstream.jobId),
      ConditionExpression: "attribute_exists(pk)",
      UpdateExpression: "ADD dependents :dependents, linkRevision :count",
      ExpressionAttributeValues: { ":dependents": new Set(ids), ":count": count },
    }),
  );
  return ids;
}
