import {
  BatchWriteCommand,
  type BatchWriteCommandInput,
  GetCommand,
  PutCommand,
} from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../../shared/engine.js";
import { minuteOf, runId, runSortKey } from "../../shared/keys.js";
import type { DueEntry, Job } from "../../shared/model.js";
import type { MisfirePolicy } from "../../shared/policies.js";
import type { ScheduleSpec } from "../../shared/schedule/index.js";
import { dueEntryKey } from "../../shared/storage/due-entries.js";
import { encodeDueEntry, encodeJob, shardLeaseKey } from "../../shared/storage/items.js";
import { type RunRef, runKeyOf } from "../../shared/storage/run-reads.js";
import { type EngineFixture, storedJob, testJob } from "./engine-fixture.js";

export interface SeedSpec {
  readonly jobId: string;
  readonly schedule: ScheduleSpec;
  /** The pending occurrence: where the job's due entry sits. */
  readonly dueAt: Date;
  readonly misfire?: MisfirePolicy;
  readonly type?: string;
  /**
   * When a writer filed the entry: an overdue entry goes into that minute's
   * bucket. By default an overdue entry sits in its own minute's bucket, as if
   * it had been filed on time and no pass had run since.
   */
  readonly filedAt?: Date;
  /** The job's tenant; testJob's by default. */
  readonly tenantId?: string;
}

/**
 * Writes jobs and their pending due entries straight into the table, as if
 * they had been created earlier and the dispatcher had not run since.
 */
export async function seedJobs(
  f: EngineFixture,
  specs: readonly SeedSpec[],
  now: Date,
): Promise<Job[]> {
  const jobs: Job[] = [];
  const items: Record<string, unknown>[] = [];
  for (const spec of specs) {
    const base = testJob({
      schedule: spec.schedule,
      ...(spec.type ? { type: spec.type } : {}),
      ...(spec.tenantId ? { tenantId: spec.tenantId } : {}),
    });
    const policies = { ...base.policies, misfire: spec.misfire ?? base.policies.misfire };
    const entry: DueEntry = {
      key: dueEntryKey(
        spec.jobId,
        spec.dueAt,
        1,
        spec.filedAt ?? (spec.dueAt < now ? spec.dueAt : now),
        f.engine.settings.shardCount,
      ),
      kind: "occurrence",
      jobId: spec.jobId,
      tenantId: base.tenantId,
      dueAt: spec.dueAt.toISOString(),
      scheduledFor: spec.dueAt.toISOString(),
      attempt: 1,
      jobVersion: 1,
      priority: base.priority,
      schedule: spec.schedule,
      misfire: policies.misfire,
    };
    const job: Job = {
      ...storedJob(spec.jobId, now, base),
      policies,
      nextRunAt: entry.scheduledFor,
      nextDueKey: entry.key,
    };
    jobs.push(job);
    items.push(encodeJob(job), encodeDueEntry(entry));
  }
  await putItems(f, f.engine.tables.jobs, items);
  return jobs;
}

/**
 * What writeItems and putItems use of a fixture: its engine's Document client (test/model, which
 * has no fixture, passes its clients' own).
 */
interface WritingFixture {
  readonly engine: Pick<Engine, "doc">;
}

/** One put or delete of a BatchWriteItem. */
type WriteRequest = NonNullable<BatchWriteCommandInput["RequestItems"]>[string][number];

/**
 * Sends `requests` (puts, deletes, or both of other keys) to `table` as BatchWriteItems of 25, 16
 * of them at a time, each sent again with what DynamoDB left unprocessed until none is left.
 */
export async function writeItems(
  f: WritingFixture,
  table: string,
  requests: readonly WriteRequest[],
): Promise<void> {
  const batches: WriteRequest[][] = [];
  for (let i = 0; i < requests.length; i += 25) batches.push(requests.slice(i, i + 25));
  for (let i = 0; i < batches.length; i += 16) {
    await Promise.all(
      batches.slice(i, i + 16).map(async (batch) => {
        let pending = batch;
        while (pending.length > 0) {
          const result = await f.engine.doc.send(
            new BatchWriteCommand({ RequestItems: { [table]: pending } }),
          );
          pending = result.UnprocessedItems?.[table] ?? [];
        }
      }),
    );
  }
}

/** Puts `items` into `table` (writeItems). */
export async function putItems(
  f: WritingFixture,
  table: string,
  items: readonly Record<string, unknown>[],
): Promise<void> {
  await writeItems(
    f,
    table,
    items.map((Item) => ({ PutRequest: { Item } })),
  );
}

/** Pretends the shard was last swept up to `lastSwept`: what a dispatcher outage leaves behind. */
export async function setWatermark(
  f: EngineFixture,
  shard: number,
  lastSwept: Date,
): Promise<void> {
  await f.engine.doc.send(
    new PutCommand({
      TableName: f.engine.tables.jobs,
      Item: {
        ...shardLeaseKey(shard),
        fence: 0,
        leaseUntil: lastSwept.toISOString(),
        watermark: minuteOf(lastSwept),
      },
    }),
  );
}

/**
 * Copies a stored run to another attempt of its occurrence, as if the occurrence had been
 * replayed up to there (each replay is its next attempt); all else is the run's as it stands.
 * Returns the copy's run id.
 */
export async function copyRunToAttempt(
  engine: Engine,
  run: RunRef,
  attempt: number,
): Promise<string> {
  const { Item: item } = await engine.doc.send(
    new GetCommand({ TableName: engine.tables.runs, Key: runKeyOf(run), ConsistentRead: true }),
  );
  if (item === undefined) throw new Error(`no run item for attempt ${run.attempt}`);
  const copyId = runId(run.jobId, run.scheduledFor, attempt);
  await engine.doc.send(
    new PutCommand({
      TableName: engine.tables.runs,
      Item: { ...item, sk: runSortKey(run.scheduledFor, attempt), runId: copyId, attempt },
    }),
  );
  return copyId;
}
