import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { offsetClock } from "../../shared/clock.js";
import { processRecords } from "../../shared/execution/event-source.js";
import { createJob } from "../../shared/jobs/index.js";
import type { Run } from "../../shared/model.js";
import type { RunMessage } from "../../shared/queue/run-message.js";
import { encodeRunMessage } from "../../shared/queue/work-queue.js";
import { runMessageOf } from "../../shared/storage/items.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { sqsEvent } from "../support/lambda-events.js";

const SECOND = 1_000;

/**
 * A worker loop hands a message its tenant's full gate turned away back to SQS (hand-back.ts),
 * with `quotaWaitSince`: the time out is its run's wait for the quota, not lateness. The Lambda
 * worker receives such a message where a container's loop shares the queues with the worker
 * function; it counts that wait as the loop does, so a run the misfire policy would have let
 * run at the loop is not skipped for having waited out its quota.
 */
describe("a handed-back message the Lambda worker receives", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  /** The first queued run of a per-minute job under misfire `skip`. */
  async function firstRun(): Promise<Run> {
    const policies = { ...testJob().policies, misfire: "skip" as const };
    const { job } = await createJob(f.engine, testJob({ policies }));
    const [run] = (await f.runs())
      .filter((r) => r.jobId === job.jobId && r.status === "QUEUED")
      .sort((a, b) => (a.scheduledFor < b.scheduledFor ? -1 : 1));
    if (run === undefined) throw new Error("the job has no queued run");
    return run;
  }

  /** `message`, sent to SQS at `sentAt`, handed to the Lambda worker's path (`processRecords`) at `at`. */
  async function deliverAt(message: RunMessage, at: number, sentAt = at) {
    const queueName = f.engine.queues.normal.split("/").at(-1) ?? "";
    const event = sqsEvent(`arn:aws:sqs:us-east-1:000000000000:${queueName}`, [
      {
        MessageId: "handed-back",
        ReceiptHandle: "delivered-in-test",
        Body: encodeRunMessage(message),
        Attributes: { SentTimestamp: String(sentAt) },
      },
    ]);
    const deps = {
      ...f.workerDeps("lambda"),
      engine: { ...f.engine, clock: offsetClock(at - Date.now()) },
    };
    return processRecords(deps, event.Records);
  }

  const stored = async (run: Run) => (await f.runs()).find((r) => r.runId === run.runId);

  it("counts the time out since quotaWaitSince as the quota's wait: the run runs, not skipped late", async () => {
    const run = await firstRun();
    const due = Date.parse(run.scheduledFor);
    const grace = f.engine.settings.misfireGraceMs;
    // Held at a loop's gate from a second after it was due, handed back 10 s before it was
    // received, past the grace.
    const handedBack = {
      ...runMessageOf(run),
      quotaWaitSince: new Date(due + SECOND).toISOString(),
    };
    const received = due + grace + 30 * SECOND;
    expect(await deliverAt(handedBack, received, received - 10 * SECOND)).toEqual({
      batchItemFailures: [],
    });
    const ended = await stored(run);
    // Before, its reason read "misfire: started 90 s late, past the 60 s grace; policy skip".
    expect(ended?.reason ?? "").toBe("");
    expect(ended).toMatchObject({ status: "SUCCEEDED" });
  });

  it("still skips a run as late when its message never waited for the quota", async () => {
    const run = await firstRun();
    const due = Date.parse(run.scheduledFor);
    const grace = f.engine.settings.misfireGraceMs;
    expect(await deliverAt(runMessageOf(run), due + grace + 30 * SECOND)).toEqual({
      batchItemFailures: [],
    });
    expect(await stored(run)).toMatchObject({
      status: "SKIPPED",
      reason: expect.stringMatching(
        /^misfire: started \d+ s late, past the \d+ s grace; policy skip$/,
      ),
    });
  });

  // Review r121: a loop hands a message back for as long as its run has waited, 1 s at least and
  // 60 s at most (handBackDelayMs): that is its time out for the quota. Once it is back on the
  // queue, a wait for a worker (the workers down, a priority's invocations full) is the lateness
  // the misfire policy is for ("Policies": a claimed run that starts late because the workers or
  // the queue were down); counting everything since quotaWaitSince runs it under `skip`, where the
  // same run never handed back is skipped. Passes with main's event-source.ts.
  it("counts only the time it was out for the quota, not a worker outage after it came back", async () => {
    const run = await firstRun();
    const due = Date.parse(run.scheduledFor);
    // Held 2 s at a loop's gate from a second after it was due, handed back for 2 s at most
    // (handBackDelayMs of a 2 s wait): back on the queue by due + 5 s. No worker received it for
    // half an hour after that.
    const handedBack = {
      ...runMessageOf(run),
      quotaWaitSince: new Date(due + SECOND).toISOString(),
    };
    expect(await deliverAt(handedBack, due + 30 * 60 * SECOND, due + 3 * SECOND)).toEqual({
      batchItemFailures: [],
    });
    expect(await stored(run)).toMatchObject({
      status: "SKIPPED",
      reason: expect.stringMatching(/^misfire: started \d+ s late/),
    });
  });
});
