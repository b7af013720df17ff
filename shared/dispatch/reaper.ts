import { QueryCommand, UpdateCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import type { Run } from "../model.js";
import { METRICS } from "../observability.js";
import { sendRuns } from "../queue/work-queue.js";
import { isConditionalCheckFailed } from "../storage/dynamo-errors.js";
import { decodeRun, inflightPk, runMessageOf } from "../storage/items.js";
import { runKey } from "../storage/runs.js";

export interface ReapResult {
  readonly examined: number;
  readonly resent: number;
}

/** Bounds one reaper pass; the rest waits for the next tick. */
const MAX_PER_SHARD = 500;

/**
 * Finds runs whose message should have been acted on by now and was not:
 * QUEUED past its start deadline (claimed but never sent, or the message was
 * lost), or RUNNING a lease past its lapsed lease (no worker picked the
 * message up again). Sends each again and pushes its deadline on by a lease.
 * Repeating a send is harmless: a run starts only once.
 */
export async function reap(engine: Engine, now: Date = engine.clock()): Promise<ReapResult> {
  let examined = 0;
  let resent = 0;
  for (let shard = 0; shard < engine.settings.maxShardCount; shard++) {
    const overdue = await overdueRuns(engine, shard, now);
    examined += overdue.length;
    const toSend: Run[] = [];
    for (const run of overdue) {
      if (await pushDeadline(engine, run, now)) toSend.push(run);
    }
    if (toSend.length > 0) {
      await sendRuns(
        engine.sqs,
        engine.queues,
        toSend.map((run) => ({ message: runMessageOf(run), dueAt: new Date(run.dueAt) })),
        now,
      );
      resent += toSend.length;
      engine.obs.metrics.add(METRICS.reaperResends, toSend.length, "Count");
      engine.obs.log.warn("reaper re-sent runs", { shard, runs: toSend.map((r) => r.runId) });
    }
  }
  return { examined, resent };
}

async function overdueRuns(
  engine: Engine,
  shard: number,
  now: Date,
): Promise<(Run & { inflightSk: string })[]> {
  const found: (Run & { inflightSk: string })[] = [];
  let startKey: Record<string, unknown> | undefined;
  do {
    const page = await engine.doc.send(
      new QueryCommand({
        TableName: engine.tables.runs,
        IndexName: "inflight",
        KeyConditionExpression: "inflightPk = :pk AND inflightSk < :now",
        ExpressionAttributeValues: { ":pk": inflightPk(shard), ":now": now.toISOString() },
        ExclusiveStartKey: startKey,
        Limit: MAX_PER_SHARD,
      }),
    );
    for (const item of page.Items ?? []) {
      found.push({ ...decodeRun(item), inflightSk: String(item.inflightSk) });
    }
    startKey = found.length < MAX_PER_SHARD ? page.LastEvaluatedKey : undefined;
  } while (startKey);
  return found;
}

/** Moves the run's deadline a lease on, only if nobody touched it since the index was read. */
async function pushDeadline(
  engine: Engine,
  run: Run & { inflightSk: string },
  now: Date,
): Promise<boolean> {
  try {
    await engine.doc.send(
      new UpdateCommand({
        TableName: engine.tables.runs,
        Key: runKey(run.jobId, run.scheduledFor, run.attempt),
        ConditionExpression: "inflightSk = :seen AND #status = :status AND fence = :fence",
        UpdateExpression: "SET inflightSk = :deadline",
        ExpressionAttributeNames: { "#status": "status" },
        ExpressionAttributeValues: {
          ":seen": run.inflightSk,
          ":status": run.status,
          ":fence": run.fence,
          ":deadline": new Date(now.getTime() + engine.settings.leaseMs).toISOString(),
        },
      }),
    );
    return true;
  } catch (error) {
    if (isConditionalCheckFailed(error)) return false;
    throw error;
  }
}
