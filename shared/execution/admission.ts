import { UpdateCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import { parseRunId } from "../keys.js";
import type { Job } from "../model.js";
import { decideOverlap, type OverlapDecision } from "../policies.js";
import { isConditionalCheckFailed, retryOnContention } from "../storage/dynamo-errors.js";
import { jobKey } from "../storage/items.js";
import { getJob, getRun } from "../storage/run-reads.js";

/**
 * Overlap is decided when a run starts, against the job's runs whose leases
 * are live (job.activeRuns). Admissions of one job are serialised by the
 * job's activeRevision, so two runs starting at once cannot both see a free
 * slot. Lapsed entries are dropped on the way, which is why a crashed run
 * blocks its job for one lease at most.
 */
export type Admission = { readonly decision: OverlapDecision; readonly job: Job };

const MAX_ADMISSION_ATTEMPTS = 8;

export function liveRunIds(job: Job, now: Date): { live: string[]; lapsed: string[] } {
  const live: string[] = [];
  const lapsed: string[] = [];
  const nowIso = now.toISOString();
  for (const [runId, leaseUntil] of Object.entries(job.activeRuns)) {
    (leaseUntil > nowIso ? live : lapsed).push(runId);
  }
  return { live, lapsed };
}

export async function admitRun(
  engine: Engine,
  initial: Job,
  runId: string,
  leaseUntil: Date,
): Promise<Admission> {
  let job = initial;
  for (let attempt = 0; attempt < MAX_ADMISSION_ATTEMPTS; attempt++) {
    const now = engine.clock();
    const { live, lapsed } = liveRunIds(job, now);
    // A buffered run that ended without being admitted no longer holds the slot, whichever path
    // ended it: this run takes the slot over.
    const buffered =
      job.bufferedRunId !== null &&
      job.bufferedRunId !== runId &&
      live.some((id) => id !== runId) &&
      job.policies.overlap === "buffer_one" &&
      (await stillWaiting(engine, job.bufferedRunId))
        ? job.bufferedRunId
        : null;
    const decision = decideOverlap({
      policy: job.policies.overlap,
      maxConcurrent: job.policies.maxConcurrent,
      runId,
      liveRunIds: live,
      bufferedRunId: buffered,
    });
    if (decision.action === "skip") return { decision, job };
    const names: Record<string, string> = { "#runId": runId };
    const removals = lapsed
      .filter((id) => id !== runId)
      .map((id, i) => {
        names[`#lapsed${i}`] = id;
        return `activeRuns.#lapsed${i}`;
      });
    let update: string;
    const values: Record<string, unknown> = { ":revision": job.activeRevision, ":one": 1 };
    if (decision.action === "start") {
      update = "SET activeRuns.#runId = :leaseUntil, activeRevision = activeRevision + :one";
      values[":leaseUntil"] = leaseUntil.toISOString();
      if (job.bufferedRunId === runId) removals.push("bufferedRunId");
    } else if (job.policies.overlap === "buffer_one") {
      update = "SET bufferedRunId = :runId, activeRevision = activeRevision + :one";
      values[":runId"] = runId;
    } else {
      // allow at its bound: nothing to record, the run just waits its turn.
      return { decision, job };
    }
    const usesRunId = decision.action === "start";
    try {
      await retryOnContention(engine, "admission", () =>
        engine.doc.send(
          new UpdateCommand({
            TableName: engine.tables.jobs,
            Key: jobKey(job.jobId),
            ConditionExpression: "activeRevision = :revision",
            UpdateExpression: `${update}${removals.length ? ` REMOVE ${removals.join(", ")}` : ""}`,
            ExpressionAttributeNames: usesRunId ? names : withoutRunId(names),
            ExpressionAttributeValues: values,
          }),
        ),
      );
      return { decision, job };
    } catch (error) {
      if (!isConditionalCheckFailed(error)) throw error;
      const fresh = await getJob(engine, job.jobId);
      if (fresh === null) throw error;
      job = fresh;
    }
  }
  // Heavy contention on one job: let the run wait and try again rather than spin.
  return { decision: { action: "buffer" }, job };
}

async function stillWaiting(engine: Engine, runId: string): Promise<boolean> {
  const ref = parseRunId(runId);
  const run = ref ? await getRun(engine, ref) : null;
  return run !== null && (run.status === "QUEUED" || run.status === "RUNNING");
}

function withoutRunId(names: Record<string, string>): Record<string, string> | undefined {
  const { "#runId": _, ...rest } = names;
  return Object.keys(rest).length ? rest : undefined;
}

/** Keeps the job's view of a running run's lease current, so overlap sees it as live. */
export async function extendAdmission(
  engine: Engine,
  jobId: string,
  runId: string,
  leaseUntil: Date,
) {
  try {
    await engine.doc.send(
      new UpdateCommand({
        TableName: engine.tables.jobs,
        Key: jobKey(jobId),
        ConditionExpression: "attribute_exists(activeRuns.#runId)",
        UpdateExpression: "SET activeRuns.#runId = :leaseUntil",
        ExpressionAttributeNames: { "#runId": runId },
        ExpressionAttributeValues: { ":leaseUntil": leaseUntil.toISOString() },
      }),
    );
  } catch (error) {
    if (!isConditionalCheckFailed(error)) throw error;
  }
}

/**
 * Frees the buffer_one slot a run held when that run ends without being
 * admitted (skipped, cancelled, dead). Conditioned on the run still holding
 * it, so a newer buffered run keeps its slot. Admission also takes over a slot
 * whose run has ended, for an ending that could not get here (a crash).
 */
export async function releaseBufferSlot(engine: Engine, jobId: string, runId: string) {
  try {
    // The job item is also written by claims' transactions: a conflict is waited out.
    await retryOnContention(engine, "buffer release", () =>
      engine.doc.send(
        new UpdateCommand({
          TableName: engine.tables.jobs,
          Key: jobKey(jobId),
          ConditionExpression: "bufferedRunId = :runId",
          UpdateExpression: "SET activeRevision = activeRevision + :one REMOVE bufferedRunId",
          ExpressionAttributeValues: { ":runId": runId, ":one": 1 },
        }),
      ),
    );
  } catch (error) {
    if (!isConditionalCheckFailed(error)) throw error;
  }
}
