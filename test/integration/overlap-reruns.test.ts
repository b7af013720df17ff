import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sleep } from "../../shared/clock.js";
import { JobError, type JobHandler } from "../../shared/execution/job-contract.js";
import { runWorkerLoop } from "../../shared/execution/worker-loop.js";
import { createJob, replayDeadLetter, triggerJob } from "../../shared/jobs/index.js";
import { listDeadLetters } from "../../shared/jobs/queries.js";
import type { Job, Run } from "../../shared/model.js";
import type { OverlapPolicy } from "../../shared/policies.js";
import { setVisibility } from "../../shared/queue/work-queue.js";
import { getJob, getRun } from "../../shared/storage/run-reads.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { waitFor } from "../support/wait.js";

let f: EngineFixture;
beforeAll(async () => {
  f = await createEngineFixture();
});
afterAll(() => f.destroy());

type Behaviour = "fail" | "fail retryable" | "block" | "succeed";

/**
 * A recurring job whose schedule stays out of the way (once a year) and whose runs do what the
 * test says when they start: fail (for good, or retryably), block until released, or succeed.
 */
async function jobWithBehaviours(overlap: OverlapPolicy) {
  let behaviour: Behaviour = "succeed";
  let release: () => void = () => undefined;
  const blocking = new Promise<void>((resolve) => {
    release = resolve;
  });
  const handlers: Record<string, JobHandler> = {
    gate: async () => {
      if (behaviour === "fail") throw new JobError("target down", { retryable: false });
      if (behaviour === "fail retryable") throw new JobError("target down", { retryable: true });
      if (behaviour === "block") await blocking;
    },
  };
  const { job } = await createJob(
    f.engine,
    testJob({
      type: "gate",
      schedule: { cron: "0 0 1 1 *", timezone: "UTC" },
      policies: {
        ...testJob().policies,
        overlap,
        retry: { maxAttempts: 2, initialDelayMs: 1000, maxDelayMs: 1000 },
      },
    }),
  );
  return {
    job,
    handlers,
    release,
    set: (next: Behaviour) => {
      behaviour = next;
    },
  };
}

async function deliveryOf(run: Pick<Run, "jobId" | "scheduledFor" | "attempt">) {
  for (;;) {
    const received = await f.nextDelivery(f.engine.queues.normal, run.jobId);
    const { scheduledFor, attempt } = received.message;
    if (scheduledFor === run.scheduledFor && attempt === run.attempt) return received;
    // Another run's message of the job (a retry due meanwhile): back for its own turn.
    await setVisibility(f.engine.sqs, received.queueUrl, received.receiptHandle, 0);
  }
}

/** A run of the job under way (its handler blocks until released), listed in its activeRuns. */
async function runAhead(job: Job, handlers: Record<string, JobHandler>) {
  const ahead = await triggerJob(f.engine, job.tenantId, job.jobId);
  const running = f.process(f.workerDeps("ahead", handlers, 200), await deliveryOf(ahead));
  await waitFor("the run ahead to be admitted", async () => {
    const current = await getJob(f.engine, job.jobId);
    return current?.activeRuns[ahead.runId] !== undefined;
  });
  // Wrapped: an async function's returned promise would wait for the run to end.
  return { running };
}

/** Under buffer_one, another run takes the one waiting place first; returns its run id. */
async function fillTheBuffer(job: Job, handlers: Record<string, JobHandler>) {
  const waiting = await triggerJob(f.engine, job.tenantId, job.jobId);
  await f.process(f.workerDeps("buffered", handlers), await deliveryOf(waiting));
  expect((await getJob(f.engine, job.jobId))?.bufferedRunId).toBe(waiting.runId);
  return waiting.runId;
}

/** Delivers a retry or replay while the run ahead is live: it waits, then runs once that ends. */
async function waitsThenRuns(
  rerun: Pick<Run, "jobId" | "scheduledFor" | "attempt">,
  overlap: OverlapPolicy,
  handlers: Record<string, JobHandler>,
  ahead: { release: () => void; running: Promise<"ack" | "keep"> },
  buffered: string | null,
) {
  await f.process(f.workerDeps("rerun", handlers), await deliveryOf(rerun));
  const waiting = await getRun(f.engine, rerun);
  expect(waiting).toMatchObject({ status: "QUEUED" });
  expect(waiting?.reason).toBe(`waiting: overlap policy ${overlap}`);
  // It waits beside buffer_one's waiting run without taking its place.
  expect((await getJob(f.engine, rerun.jobId))?.bufferedRunId ?? null).toBe(buffered);

  ahead.release();
  expect(await ahead.running).toBe("ack");
  await f.process(f.workerDeps("rerun again", handlers), await deliveryOf(rerun));
  expect((await getRun(f.engine, rerun))?.status).toBe("SUCCEEDED");
}

describe("a retry or replay of a recurring job that meets a run under way waits for it", () => {
  it.each<OverlapPolicy>(["skip", "buffer_one"])(
    "a replayed dead letter under %s is not skipped: the dead occurrence runs once the run ahead ends",
    async (overlap) => {
      const { job, handlers, release, set } = await jobWithBehaviours(overlap);

      // The target is down: a run goes DEAD and is listed.
      set("fail");
      const failing = await triggerJob(f.engine, job.tenantId, job.jobId);
      await f.process(f.workerDeps("first", handlers), await deliveryOf(failing));
      expect((await getRun(f.engine, failing))?.status).toBe("DEAD");

      // Another run of the job is under way (and under buffer_one, another waits) when the
      // operator replays the dead letter, which leaves the list.
      set("block");
      const { running } = await runAhead(job, handlers);
      const buffered = overlap === "buffer_one" ? await fillTheBuffer(job, handlers) : null;
      set("succeed");
      const replay = await replayDeadLetter(f.engine, job.tenantId, failing.runId);
      const dead = await listDeadLetters(f.engine, job.tenantId, { limit: 100 });
      expect(dead.items.map((r) => r.runId)).not.toContain(failing.runId);

      await waitsThenRuns(replay, overlap, handlers, { release, running }, buffered);
    },
    60_000,
  );

  it.each<OverlapPolicy>(["skip", "buffer_one"])(
    "a retry under %s is not skipped: the failed occurrence's next attempt runs once the run ahead ends",
    async (overlap) => {
      const { job, handlers, release, set } = await jobWithBehaviours(overlap);

      // The target fails an attempt; its retry is due a second later.
      set("fail retryable");
      const failing = await triggerJob(f.engine, job.tenantId, job.jobId);
      await f.process(f.workerDeps("first", handlers), await deliveryOf(failing));
      expect((await getRun(f.engine, failing))?.status).toBe("FAILED");

      // Meanwhile another run of the job gets under way.
      set("block");
      const { running } = await runAhead(job, handlers);
      const buffered = overlap === "buffer_one" ? await fillTheBuffer(job, handlers) : null;
      set("succeed");

      await waitsThenRuns(
        { ...failing, attempt: 2 },
        overlap,
        handlers,
        { release, running },
        buffered,
      );
    },
    60_000,
  );
});

describe("a triggered run meets the overlap policy as a first attempt", () => {
  it("under skip it is recorded skipped while another run of the job is under way", async () => {
    const { job, handlers, release, set } = await jobWithBehaviours("skip");
    set("block");
    const { running } = await runAhead(job, handlers);
    const triggered = await triggerJob(f.engine, job.tenantId, job.jobId);
    await f.process(f.workerDeps("trigger", handlers), await deliveryOf(triggered));
    const skipped = await getRun(f.engine, triggered);
    expect(skipped?.status).toBe("SKIPPED");
    expect(skipped?.reason).toMatch(/^overlap: run \S+ still running; policy skip$/);
    release();
    expect(await running).toBe("ack");
  }, 60_000);
});

describe("replaying every dead letter of one job at once, through a worker loop", () => {
  let g: EngineFixture;
  beforeAll(async () => {
    g = await createEngineFixture();
  });
  afterAll(() => g.destroy());

  it("runs each replay once: none is skipped because another replay of the job was running", async () => {
    let targetUp = false;
    const handlers: Record<string, JobHandler> = {
      flaky: async () => {
        if (!targetUp) throw new JobError("target down", { retryable: false });
        await sleep(300);
      },
    };
    const { job } = await createJob(
      g.engine,
      testJob({ type: "flaky", schedule: { cron: "0 0 1 1 *", timezone: "UTC" } }),
    );
    // The target is down: one run after another dies (one at a time: under skip, triggered runs
    // that overlapped would be skipped, which is the policy).
    const failed: Run[] = [];
    for (let i = 0; i < 4; i++) {
      const run = await triggerJob(g.engine, job.tenantId, job.jobId);
      let received = await g.nextDelivery(g.engine.queues.normal, job.jobId);
      while (received.message.scheduledFor !== run.scheduledFor)
        received = await g.nextDelivery(g.engine.queues.normal, job.jobId);
      await g.process(g.workerDeps("outage", handlers), received);
      failed.push(run);
    }
    const listed = await listDeadLetters(g.engine, job.tenantId, { limit: 100 });
    expect(listed.items).toHaveLength(failed.length);
    const stop = new AbortController();
    const loop = runWorkerLoop(g.workerDeps("loop", handlers), {
      concurrency: 4,
      signal: stop.signal,
    });
    try {
      targetUp = true;
      const replays: Run[] = [];
      for (const dead of listed.items)
        replays.push(await replayDeadLetter(g.engine, job.tenantId, dead.runId));
      const ended = await waitFor(
        "every replay to end",
        async () => {
          const runs = await Promise.all(replays.map((r) => getRun(g.engine, r)));
          return runs.every((r) => r !== null && r.status !== "QUEUED" && r.status !== "RUNNING")
            ? runs
            : undefined;
        },
        60_000,
      );
      expect(ended.map((r) => r?.status)).toEqual(replays.map(() => "SUCCEEDED"));
    } finally {
      stop.abort();
      await loop;
    }
  }, 90_000);
});
