import { UpdateCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import type { Job, Run } from "../model.js";
import { startOwedElsewhere } from "./admission.js";
import { batchGetByTable } from "./batch-get.js";
import {
  failedConditionItem,
  isConditionalCheckFailed,
  sentMoreThanOnce,
} from "./dynamo-errors.js";
import { decodeJob, decodeRun, jobKey } from "./items.js";
import { hasExpired } from "./retention.js";
import type { HeldRun } from "./run-fence.js";
import { type RunRef, runKeyOf } from "./run-reads.js";

type StartResult =
  | {
      readonly kind: "started";
      readonly run: HeldRun;
      /** The job as read with the run, for a start held unwritten; absent: read it after the start. */
      readonly job?: Job | null;
      /**
       * A later attempt's: the attempt before it as read with the run (null: gone), for a
       * failure's next attempt to decide on (retry-predecessor.ts); absent: not read.
       */
      readonly predecessor?: Run | null;
    }
  /** Already finished: a duplicate or late delivery. */
  | {
      readonly kind: "finished";
      readonly run: Run;
      /** The job as read with the run (null: gone); absent: not read. */
      readonly job?: Job | null;
    }
  /** Another worker holds a live lease on it. */
  | { readonly kind: "busy"; readonly run: Run }
  | { readonly kind: "missing" };

/** The run exists and is QUEUED, or RUNNING under a lease that has lapsed (its worker died). */
const STARTABLE =
  "attribute_exists(pk) AND (#status = :queued OR (#status = :running AND leaseUntil < :now))";

/** RUNNING under this worker, with a fence one higher than any start before. */
const START =
  "SET #status = :running, fence = fence + :one, leaseUntil = :leaseUntil, workerId = :workerId, startedAt = :now REMOVE reason";

/**
 * Takes the run: QUEUED, or RUNNING whose lease has lapsed (its worker died),
 * becomes RUNNING under a fence one higher than before. Every later write by
 * this worker is conditioned on that fence (`FENCE_HELD`).
 */
export async function startRun(
  engine: Engine,
  ref: RunRef,
  workerId: string,
  now: Date,
): Promise<StartResult> {
  const leaseUntil = new Date(now.getTime() + engine.settings.leaseMs);
  try {
    const result = await engine.doc.send(
      new UpdateCommand({
        TableName: engine.tables.runs,
        Key: runKeyOf(ref),
        ConditionExpression: STARTABLE,
        UpdateExpression: START,
        ExpressionAttributeNames: { "#status": "status" },
        ExpressionAttributeValues: {
          ":queued": "QUEUED",
          ":running": "RUNNING",
          ":now": now.toISOString(),
          ":one": 1,
          ":leaseUntil": leaseUntil.toISOString(),
          ":workerId": workerId,
        },
        ReturnValues: "ALL_NEW",
        ReturnValuesOnConditionCheckFailure: "ALL_OLD",
      }),
    );
    return { kind: "started", run: decodeRun(result.Attributes ?? {}) };
  } catch (error) {
    if (!isConditionalCheckFailed(error)) throw error;
    const old = failedConditionItem(error);
    if (old === null) return { kind: "missing" };
    const run = decodeRun(old);
    // Sent again by the SDK after its answer was lost, the start fails on itself: the run stands
    // RUNNING under this worker, started at this instant with this lease. Taken for another
    // worker's, the run would be acknowledged and left held by nobody until its lease lapsed and
    // the reaper sent it again. Only a request sent more than once can meet itself, so two
    // deliveries of one run in one batch (one worker id, perhaps one instant) stay apart.
    if (
      sentMoreThanOnce(error) &&
      run.status === "RUNNING" &&
      run.workerId === workerId &&
      run.startedAt === now.toISOString() &&
      run.leaseUntil === leaseUntil.toISOString()
    )
      return { kind: "started", run };
    return run.status === "RUNNING" ? { kind: "busy", run } : { kind: "finished", run };
  }
}

/** How long before the reaper's deadline for a run an unwritten start must be written, for clocks that disagree. */
const START_WRITE_MARGIN_MS = 1_000;

/**
 * Takes the run as `startRun` does, but a run never started (QUEUED, fence 0) is read
 * (consistently) and held as started under fence 1 with its start unwritten (`UnwrittenStart`):
 * its worker's first write to the run writes the start with it, at the latest `firstWriteWithinMs`
 * after now (its first heartbeat), so a run that ends sooner is written once. The start can wait
 * only while that first write still comes before the reaper's deadline for the run (the reaper
 * re-sends a run still QUEUED then). Otherwise, and for a run started before (its waits, parks and
 * releases come back by several messages, of which one must start it) or RUNNING under a lapsed
 * lease (a takeover), the start is written now.
 */
export async function takeRun(
  engine: Engine,
  ref: RunRef,
  workerId: string,
  now: Date,
  firstWriteWithinMs: number,
): Promise<StartResult> {
  // The run and its job in one request: a start held unwritten decides on this read of the job,
  // whatever came first (every write it makes is conditioned on the run as read); a start written
  // now reads the job again after it.
  // A later attempt's predecessor rides in the same request: a failure's next attempt decides on
  // it, and an ending it read (FAILED or another) stands whatever the start finds.
  const { runs, jobs } = engine.tables;
  const key = runKeyOf(ref);
  const before = ref.attempt > 1 ? [runKeyOf({ ...ref, attempt: ref.attempt - 1 })] : [];
  const found = await batchGetByTable(
    engine,
    { [runs]: [key, ...before], [jobs]: [jobKey(ref.jobId)] },
    { consistentRead: true },
  );
  const item = found[runs]?.find((i) => i.sk === key.sk);
  if (item === undefined) return { kind: "missing" };
  const jobItem = found[jobs]?.[0];
  // An expired job is gone here too (as getJob takes it): TTL deletes it within days.
  const job = jobItem === undefined || hasExpired(jobItem, now) ? null : decodeJob(jobItem);
  const predecessorItem = found[runs]?.find((i) => i.sk !== key.sk);
  const read =
    before.length === 0
      ? {}
      : { predecessor: predecessorItem === undefined ? null : decodeRun(predecessorItem) };
  const startNow = async (): Promise<StartResult> => {
    const started = await startRun(engine, ref, workerId, now);
    return started.kind === "started" ? { ...started, ...read } : started;
  };
  const run = decodeRun(item);
  if (run.status === "RUNNING") {
    const lapsed = run.leaseUntil !== null && Date.parse(run.leaseUntil) < now.getTime();
    return lapsed ? startNow() : { kind: "busy", run };
  }
  if (run.status !== "QUEUED") return { kind: "finished", run, job };
  if (run.fence > 0) return startNow();
  const deadline = typeof item.inflightSk === "string" ? Date.parse(item.inflightSk) : Number.NaN;
  const writeBy = deadline - START_WRITE_MARGIN_MS;
  if (!(now.getTime() + firstWriteWithinMs < writeBy)) {
    // Another delivery holds the start unwritten and is still within its time for the first write
    // (a worker of a deploy with a shorter lease, whose time is not this one's): a start written
    // now would fence it out while its handler runs, and the run would run twice. Its admission
    // lets this delivery off when the start is held here too.
    const own = { leaseMs: engine.settings.leaseMs, firstWriteWithinMs };
    if (job !== null && startOwedElsewhere(job, run.runId, now, own)) return { kind: "busy", run };
    return startNow();
  }
  return {
    kind: "started",
    job,
    ...read,
    run: {
      ...run,
      status: "RUNNING",
      fence: run.fence + 1,
      leaseUntil: new Date(now.getTime() + engine.settings.leaseMs).toISOString(),
      workerId,
      startedAt: now.toISOString(),
      reason: null,
      unwrittenStart: {
        fromFence: run.fence,
        jobVersion: run.jobVersion,
        writeBy: new Date(writeBy),
        written: false,
      },
    },
  };
}
