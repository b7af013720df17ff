import { DeleteCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { IllegalTransitionError, NotReplayableError } from "../../shared/errors.js";
import { handleCrashedRun } from "../../shared/execution/dead-letter-queue.js";
import {
  cancelJob,
  createJob,
  deleteJob,
  pauseJob,
  replayDeadLetter,
  resumeJob,
} from "../../shared/jobs/index.js";
import { listDeadLetters } from "../../shared/jobs/queries.js";
import type { Run } from "../../shared/model.js";
import { requestRunCancel } from "../../shared/storage/run-cancel.js";
import { getJob, runKeyOf } from "../../shared/storage/run-reads.js";
import { startRun } from "../../shared/storage/run-start.js";
import {
  createEngineFixture,
  type EngineFixture,
  jobWithDeadRun,
  testJob,
} from "../support/engine-fixture.js";
import { withFaults, withLostAnswers } from "../support/faults.js";

const TENANT = "tenant-a";

/**
 * A replay reads its job, then writes its run: a cancel or delete of the job that lands between
 * the two must not be outrun. The replay is refused as it is once the job is cancelled or gone,
 * and the dead letter stays listed, as a cancelled or deleted job's dead letters do.
 */
describe("a replay racing its job's cancel or delete", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  const runsOf = async (jobId: string): Promise<Run[]> =>
    (await f.runs()).filter((r) => r.jobId === jobId).sort((a, b) => a.attempt - b.attempt);

  const deadRun = async (): Promise<Run> =>
    (await jobWithDeadRun(f, { schedule: { every: "PT1H" } })).dead;

  /** Runs `change` once, just before the replay's transaction goes out. */
  function beforeReplayWrite(change: () => Promise<unknown>) {
    const name = "changeBeforeReplayWrite";
    let ran = 0;
    f.engine.doc.middlewareStack.add(
      (next, context) => async (args) => {
        const items = (args.input as { TransactItems?: unknown[] }).TransactItems;
        if (
          ran === 0 &&
          context.commandName === "TransactWriteItemsCommand" &&
          JSON.stringify(items ?? []).includes("replayedBy")
        ) {
          ran++;
          await change();
        }
        return next(args);
      },
      { step: "initialize", name },
    );
    return { ran: () => ran, remove: () => f.engine.doc.middlewareStack.remove(name) };
  }

  it.each([
    ["deleted", deleteJob, NotReplayableError],
    ["cancelled", cancelJob, IllegalTransitionError],
  ] as const)(
    "a job %s between the replay's read and its write: refused, no run written, the dead letter still listed",
    async (_, change, refusal) => {
      const dead = await deadRun();
      const hook = beforeReplayWrite(() => change(f.engine, TENANT, dead.jobId));
      try {
        await expect(replayDeadLetter(f.engine, TENANT, dead.runId)).rejects.toBeInstanceOf(
          refusal,
        );
      } finally {
        hook.remove();
      }
      expect(hook.ran()).toBe(1);
      const runs = await runsOf(dead.jobId);
      expect(runs.filter((r) => r.attempt > dead.attempt)).toEqual([]);
      expect(runs.find((r) => r.runId === dead.runId)).toMatchObject({
        status: "DEAD",
        replayedBy: null,
      });
      const listed = await listDeadLetters(f.engine, TENANT, { limit: 100 });
      expect(listed.items.map((r) => r.runId)).toContain(dead.runId);
    },
  );

  it.each([
    ["the SDK's resend answers it", 1],
    ["every resend loses its answer too", 10],
  ])(
    "a keyed replay whose transaction applied but whose answer was lost (%s) answers its run and sends it",
    async (_, times) => {
      const dead = await deadRun();
      const lossy = withLostAnswers(f.engine, { operation: "TransactWriteItems", times });
      let replayed: Awaited<ReturnType<typeof replayDeadLetter>>;
      try {
        replayed = await replayDeadLetter(lossy.engine, TENANT, dead.runId, "lost-answer");
      } finally {
        lossy.destroy();
      }
      expect(lossy.injected.count).toBeGreaterThanOrEqual(1);
      expect(replayed.earlier).toBe(false);
      expect((await runsOf(dead.jobId)).map((r) => [r.attempt, r.status])).toEqual([
        [1, "DEAD"],
        [2, "QUEUED"],
      ]);
      const received = await f.nextDelivery(f.engine.queues.normal, dead.jobId, 5_000);
      expect(received.message.attempt).toBe(2);
    },
  );

  it.each([
    ["deleted", deleteJob],
    ["cancelled", cancelJob],
  ] as const)(
    "a keyed replay refused because its job was %s after a same-key replay was made answers that replay's run as earlier (200), and sends nothing",
    async (_, change) => {
      // Two sends of one keyed replay: the other one's transaction applies, then the job goes, and
      // this one's is refused on the job (and on the dead run). Refused, it wrote nothing: the run
      // is the other send's, which answers 202 and sends it.
      const dead = await deadRun();
      let other: Awaited<ReturnType<typeof replayDeadLetter>> | undefined;
      const hook = beforeReplayWrite(async () => {
        other = await replayDeadLetter(f.engine, TENANT, dead.runId, "one-request");
        await change(f.engine, TENANT, dead.jobId);
      });
      let replayed: Awaited<ReturnType<typeof replayDeadLetter>>;
      try {
        replayed = await replayDeadLetter(f.engine, TENANT, dead.runId, "one-request");
      } finally {
        hook.remove();
      }
      expect(hook.ran()).toBe(1);
      expect(other?.earlier).toBe(false);
      expect(replayed.run.runId).toBe(other?.run.runId);
      expect(replayed.earlier).toBe(true);
      const sent = (await f.receiveAll(f.engine.queues.normal)).filter(
        (r) => r.message.jobId === dead.jobId && r.message.attempt === dead.attempt + 1,
      );
      expect(sent).toHaveLength(1);
    },
  );

  it("a keyed repeat once the replay's run has expired, the dead run still kept, is 409 naming the replay", async () => {
    // With deadLetterRetentionDays longer than retentionDays a replayed dead run outlives its
    // replay's run: the key has no run left to answer, and the dead run is replayed all the same.
    const dead = await deadRun();
    const { run } = await replayDeadLetter(f.engine, TENANT, dead.runId, "outlived");
    await f.engine.doc.send(
      new DeleteCommand({ TableName: f.engine.tables.runs, Key: runKeyOf(run) }),
    );
    const repeat = replayDeadLetter(f.engine, TENANT, dead.runId, "outlived");
    await expect(repeat).rejects.toBeInstanceOf(NotReplayableError);
    await expect(repeat).rejects.toThrow(`already replayed as ${run.runId}`);
    expect((await runsOf(dead.jobId)).map((r) => [r.attempt, r.status])).toEqual([[1, "DEAD"]]);
  });

  it("a completed one-off's replay landing inside its delete, after the runs' cancel and before the item goes: refused as a deleted job's, no run written", async () => {
    const { job, dead } = await jobWithDeadRun(f);
    expect((await getJob(f.engine, job.jobId))?.status).toBe("COMPLETED");
    const name = "replayBeforeItemDelete";
    let refusal: unknown;
    let ran = false;
    f.engine.doc.middlewareStack.add(
      (next, context) => async (args) => {
        if (!ran && context.commandName === "DeleteItemCommand") {
          ran = true;
          refusal = await replayDeadLetter(f.engine, TENANT, dead?.runId ?? "").then(
            () => null,
            (error: unknown) => error,
          );
        }
        return next(args);
      },
      { step: "initialize", name },
    );
    try {
      await deleteJob(f.engine, TENANT, job.jobId);
    } finally {
      f.engine.doc.middlewareStack.remove(name);
    }
    expect(ran).toBe(true);
    expect(refusal).toBeInstanceOf(NotReplayableError);
    expect(String(refusal)).toContain("its job was deleted");
    expect((await runsOf(job.jobId)).map((r) => [r.attempt, r.status, r.replayedBy])).toEqual([
      [1, "DEAD", null],
    ]);
  });
});

/**
 * The redrive DLQ's message of a poison run may come again after the consumer ended the run DEAD
 * (its delete failed, SQS delivers at least once). By then the run may have been replayed: a
 * one-off's dead run is no longer its occurrence's latest attempt, and the repeat must leave the
 * job's completion to the replay's ending, as a repair of a replayed run's ending does.
 */
describe("a redrive DLQ message repeated after its dead run was replayed", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  it("a one-off paused when its run died, replayed and resumed, stays active until the replay ends", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({ tenantId: TENANT, schedule: { runAt: new Date().toISOString() } }),
    );
    const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    // Every delivery but the first started it and crashed; the last one's lease lapsed since.
    const { maxReceiveCount, leaseMs } = f.engine.settings;
    for (let start = 1; start < maxReceiveCount; start++) {
      const at = new Date(Date.now() - (maxReceiveCount - start) * (leaseMs + 1000));
      expect((await startRun(f.engine, received.message, `crash-${start}`, at)).kind).toBe(
        "started",
      );
    }
    await pauseJob(f.engine, TENANT, job.jobId);
    await handleCrashedRun(f.engine, received.message, maxReceiveCount);
    const [dead] = (await f.runs()).filter((r) => r.jobId === job.jobId);
    expect(dead).toMatchObject({ status: "DEAD" });
    // Paused, the job is not completed by its run's death; the tenant replays it and resumes.
    const { run: replay } = await replayDeadLetter(f.engine, TENANT, dead?.runId ?? "");
    await resumeJob(f.engine, TENANT, job.jobId);
    expect(await getJob(f.engine, job.jobId)).toMatchObject({ status: "ACTIVE" });

    await handleCrashedRun(f.engine, received.message, maxReceiveCount);
    expect(await getJob(f.engine, job.jobId)).toMatchObject({ status: "ACTIVE" });
    // The replay runs, and its ending completes the one-off.
    const delivery = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    expect(delivery.message.attempt).toBe(replay.attempt);
    expect(await f.process(f.workerDeps("w"), delivery)).toBe("ack");
    const ran = (await f.runs()).find((r) => r.runId === replay.runId);
    expect(ran).toMatchObject({ status: "SUCCEEDED" });
    expect(await getJob(f.engine, job.jobId)).toMatchObject({ status: "COMPLETED" });
  });

  it("a one-off's poison run asked to cancel, ended CANCELLED by a delivery that failed before completing the job: the message again completes it", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({ tenantId: TENANT, schedule: { runAt: new Date().toISOString() } }),
    );
    const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    const { maxReceiveCount, leaseMs } = f.engine.settings;
    let started: Run | null = null;
    for (let start = 1; start < maxReceiveCount; start++) {
      const at = new Date(Date.now() - (maxReceiveCount - start) * (leaseMs + 1000));
      const result = await startRun(f.engine, received.message, `crash-${start}`, at);
      if (result.kind !== "started") throw new Error(`start ${start}: ${result.kind}`);
      started = result.run;
    }
    if (started === null) throw new Error("never started");
    // The tenant cancels it while its last worker holds it; that worker crashes too.
    expect(await requestRunCancel(f.engine, started, "api", new Date())).not.toBeNull();
    // The consumer ends the run CANCELLED, then fails to complete the job (its Lambda timed out,
    // storage failed): SQS delivers the message again.
    const failing = withFaults(f.engine, {
      operation: "UpdateItem",
      times: 1,
      match: (input) => {
        const key = input.Key as { pk?: unknown; sk?: unknown } | undefined;
        return key?.pk === `JOB#${job.jobId}` && key.sk === "JOB";
      },
      error: () => new Error("injected: the job's completion failed"),
    });
    try {
      await expect(
        handleCrashedRun(failing.engine, received.message, maxReceiveCount),
      ).rejects.toThrow(/injected/);
      expect(failing.injected.count).toBe(1);
    } finally {
      failing.destroy();
    }
    const [run] = (await f.runs()).filter((r) => r.jobId === job.jobId);
    expect(run).toMatchObject({ status: "CANCELLED", cancelledBy: "api" });
    expect(await getJob(f.engine, job.jobId)).toMatchObject({ status: "ACTIVE" });

    await handleCrashedRun(f.engine, received.message, maxReceiveCount);
    expect(await getJob(f.engine, job.jobId)).toMatchObject({ status: "COMPLETED" });
  });
});
