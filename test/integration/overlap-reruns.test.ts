import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sleep } from "../../shared/clock.js";
import { JobError, type JobHandler } from "../../shared/execution/job-contract.js";
import type { WorkerDeps } from "../../shared/execution/worker.js";
import { runWorkerLoop } from "../../shared/execution/worker-loop.js";
import { cancelRun, createJob, replayDeadLetter, triggerJob } from "../../shared/jobs/index.js";
import { listDeadLetters } from "../../shared/jobs/queries.js";
import { runId } from "../../shared/keys.js";
import type { Job, Run } from "../../shared/model.js";
import type { OverlapPolicy } from "../../shared/policies.js";
import { getJob, getRun } from "../../shared/storage/run-reads.js";
import {
  caseFixture,
  createEngineFixture,
  type EngineFixture,
  testJob,
} from "../support/engine-fixture.js";
import { waitFor } from "../support/wait.js";

/** Retries and replays held back by the overlap policy look again a second later, not 5 s: the tests wait for those looks. */
const recheckingSoon = <Deps extends WorkerDeps>(deps: Deps): Deps => ({
  ...deps,
  overlapRecheckMs: 1_000,
});

type Behaviour = "fail" | "fail retryable" | "block" | "succeed";

type Rerun = "retry" | "replay";

/** The helpers below on the fixture given: each case has tables and queues of its own. */
function casesOn(f: EngineFixture) {
  /**
   * A recurring job whose schedule stays out of the way (once a year) and whose runs do what the
   * test says when they start: fail (for good, or retryably), block until released, or succeed.
   */
  async function jobWithBehaviours(overlap: OverlapPolicy) {
    let behaviour: Behaviour = "succeed";
    const blocked = new Set<string>();
    let release: () => void = () => undefined;
    const blocking = new Promise<void>((resolve) => {
      release = resolve;
    });
    const handlers: Record<string, JobHandler> = {
      gate: async (ctx) => {
        if (behaviour === "fail") throw new JobError("target down", { retryable: false });
        if (behaviour === "fail retryable") throw new JobError("target down", { retryable: true });
        if (behaviour === "block") {
          blocked.add(ctx.runId);
          await blocking;
        }
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
      blocked: blocked as ReadonlySet<string>,
      release,
      set: (next: Behaviour) => {
        behaviour = next;
      },
    };
  }

  /**
   * A run of the job under way, listed in its activeRuns and its handler blocking until released.
   * Admitted is not enough: a handler that starts after the case sets "succeed" ends at once.
   */
  async function runAhead(
    job: Job,
    handlers: Record<string, JobHandler>,
    blocked: ReadonlySet<string>,
  ) {
    const ahead = await triggerJob(f.engine, job.tenantId, job.jobId);
    const running = f.process(
      f.workerDeps("ahead", handlers, 200),
      await f.nextDeliveryOfRun(ahead),
    );
    await waitFor("the run ahead to be admitted and blocking", async () => {
      if (!blocked.has(ahead.runId)) return false;
      const current = await getJob(f.engine, job.jobId);
      return current?.activeRuns[ahead.runId] !== undefined;
    });
    // Wrapped: an async function's returned promise would wait for the run to end.
    return { running };
  }

  /** Under buffer_one, another run takes the one waiting place first; returns its run id. */
  async function fillTheBuffer(job: Job, handlers: Record<string, JobHandler>) {
    const waiting = await triggerJob(f.engine, job.tenantId, job.jobId);
    await f.process(f.workerDeps("buffered", handlers), await f.nextDeliveryOfRun(waiting));
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
    await f.process(
      recheckingSoon(f.workerDeps("rerun", handlers)),
      await f.nextDeliveryOfRun(rerun),
    );
    const waiting = await getRun(f.engine, rerun);
    expect(waiting).toMatchObject({ status: "QUEUED" });
    expect(waiting?.reason).toBe(`waiting: overlap policy ${overlap}`);
    // It waits beside buffer_one's waiting run without taking its place.
    expect((await getJob(f.engine, rerun.jobId))?.bufferedRunId ?? null).toBe(buffered);

    ahead.release();
    expect(await ahead.running).toBe("ack");
    await f.process(
      recheckingSoon(f.workerDeps("rerun again", handlers)),
      await f.nextDeliveryOfRun(rerun),
    );
    expect((await getRun(f.engine, rerun))?.status).toBe("SUCCEEDED");
  }

  /**
   * A recurring job whose runs follow one another with no gap: each run blocks until the test
   * releases it, and the next occurrence (a trigger, which meets the overlap policy as one) comes the
   * moment it ends. Runs listed in `failing` fail (retryably, or for good); a retry or replay succeeds.
   */
  async function backToBackJob(overlap: OverlapPolicy, maxConcurrent?: number) {
    const failing = new Map<string, boolean>();
    const releases = new Map<string, () => void>();
    const blocked = new Map<string, Promise<void>>();
    const blockerOf = (runId: string) => {
      let gate = blocked.get(runId);
      if (gate === undefined) {
        gate = new Promise<void>((resolve) => releases.set(runId, resolve));
        blocked.set(runId, gate);
      }
      return gate;
    };
    const handlers: Record<string, JobHandler> = {
      busy: async (ctx) => {
        const retryable = failing.get(ctx.runId);
        if (retryable !== undefined) throw new JobError("target down", { retryable });
        if (ctx.attempt > 1) return;
        await blockerOf(ctx.runId);
      },
    };
    const { job } = await createJob(
      f.engine,
      testJob({
        type: "busy",
        schedule: { cron: "0 0 1 1 *", timezone: "UTC" },
        policies: {
          ...testJob().policies,
          overlap,
          ...(maxConcurrent === undefined ? {} : { maxConcurrent }),
          retry: { maxAttempts: 2, initialDelayMs: 1000, maxDelayMs: 1000 },
        },
      }),
    );
    const release = (runId: string) => {
      blockerOf(runId);
      releases.get(runId)?.();
    };
    return { job, handlers, failing, release };
  }

  /**
   * Delivers a run of the job and processes it until it is either admitted (listed in activeRuns,
   * its handler blocking) or done deciding (skipped, buffered). Returns whether it was admitted,
   * and the processing, which ends once the run does.
   */
  async function deliverNext(
    job: Job,
    run: Pick<Run, "runId" | "jobId" | "scheduledFor" | "attempt">,
    handlers: Record<string, JobHandler>,
  ) {
    let done = false;
    const running = f.process(
      f.workerDeps("occurrence", handlers, 200),
      await f.nextDeliveryOfRun(run),
    );
    void running.finally(() => {
      done = true;
    });
    const admitted = await waitFor("the run to be admitted or done", async () => {
      const current = await getJob(f.engine, job.jobId);
      if (current?.activeRuns[run.runId] !== undefined) return "admitted";
      return done ? "decided" : undefined;
    });
    return { admitted: admitted === "admitted", running };
  }
  return { jobWithBehaviours, runAhead, fillTheBuffer, waitsThenRuns, backToBackJob, deliverNext };
}

/** A fixture of the case's own, destroyed when the case ends, and the helpers on it. */
async function ownFixture(atEnd: (cleanup: () => Promise<void>) => void) {
  const f = await caseFixture(atEnd);
  return { f, ...casesOn(f) };
}

/**
 * Each case waits a second or more at a time on rechecks, retries and runs held by a gate (the file
 * took 36 s, 11 s of CPU, one case after another). Side by side, each on tables and queues of its
 * own (another case's receive would take its messages, and each receive counts towards a
 * message's redrive), they take the longest case's time.
 */
describe.concurrent("retries, replays and triggers that meet the overlap policy, side by side", () => {
  describe("a retry or replay of a recurring job that meets a run under way waits for it", () => {
    it.for<OverlapPolicy>(["skip", "buffer_one"])(
      "a replayed dead letter under %s is not skipped: the dead occurrence runs once the run ahead ends",
      { timeout: 60_000 },
      async (overlap, { onTestFinished }) => {
        const { f, jobWithBehaviours, runAhead, fillTheBuffer, waitsThenRuns } =
          await ownFixture(onTestFinished);
        const { job, handlers, blocked, release, set } = await jobWithBehaviours(overlap);

        // The target is down: a run goes DEAD and is listed.
        set("fail");
        const failing = await triggerJob(f.engine, job.tenantId, job.jobId);
        await f.process(f.workerDeps("first", handlers), await f.nextDeliveryOfRun(failing));
        expect((await getRun(f.engine, failing))?.status).toBe("DEAD");

        // Another run of the job is under way (and under buffer_one, another waits) when the
        // operator replays the dead letter, which leaves the list.
        set("block");
        const { running } = await runAhead(job, handlers, blocked);
        const buffered = overlap === "buffer_one" ? await fillTheBuffer(job, handlers) : null;
        set("succeed");
        const replay = (await replayDeadLetter(f.engine, job.tenantId, failing.runId)).run;
        const dead = await listDeadLetters(f.engine, job.tenantId, { limit: 100 });
        expect(dead.items.map((r) => r.runId)).not.toContain(failing.runId);

        await waitsThenRuns(replay, overlap, handlers, { release, running }, buffered);
      },
    );

    it.for<OverlapPolicy>(["skip", "buffer_one"])(
      "a retry under %s is not skipped: the failed occurrence's next attempt runs once the run ahead ends",
      { timeout: 60_000 },
      async (overlap, { onTestFinished }) => {
        const { f, jobWithBehaviours, runAhead, fillTheBuffer, waitsThenRuns } =
          await ownFixture(onTestFinished);
        const { job, handlers, blocked, release, set } = await jobWithBehaviours(overlap);

        // The target fails an attempt; its retry is due a second later.
        set("fail retryable");
        const failing = await triggerJob(f.engine, job.tenantId, job.jobId);
        await f.process(f.workerDeps("first", handlers), await f.nextDeliveryOfRun(failing));
        expect((await getRun(f.engine, failing))?.status).toBe("FAILED");

        // Meanwhile another run of the job gets under way.
        set("block");
        const { running } = await runAhead(job, handlers, blocked);
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
    );
  });

  describe("a triggered run meets the overlap policy as a first attempt", () => {
    it("under skip it is recorded skipped while another run of the job is under way", async ({
      onTestFinished,
    }) => {
      const { f, jobWithBehaviours, runAhead } = await ownFixture(onTestFinished);
      const { job, handlers, blocked, release, set } = await jobWithBehaviours("skip");
      set("block");
      const { running } = await runAhead(job, handlers, blocked);
      const triggered = await triggerJob(f.engine, job.tenantId, job.jobId);
      await f.process(f.workerDeps("trigger", handlers), await f.nextDeliveryOfRun(triggered));
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
        await g.process(recheckingSoon(g.workerDeps("outage", handlers)), received);
        failed.push(run);
      }
      const listed = await listDeadLetters(g.engine, job.tenantId, { limit: 100 });
      expect(listed.items).toHaveLength(failed.length);
      const stop = new AbortController();
      const loop = runWorkerLoop(recheckingSoon(g.workerDeps("loop", handlers)), {
        concurrency: 4,
        signal: stop.signal,
      });
      try {
        targetUp = true;
        const replays: Run[] = [];
        for (const dead of listed.items)
          replays.push((await replayDeadLetter(g.engine, job.tenantId, dead.runId)).run);
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

  describe("a retry or replay of a job whose runs follow one another with no gap", () => {
    const cases: [OverlapPolicy, Rerun][] = [
      ["skip", "retry"],
      ["skip", "replay"],
      ["buffer_one", "retry"],
      ["buffer_one", "replay"],
    ];
    it.for(cases)(
      "under %s, a %s gets in at the next period instead of waiting for a gap",
      { timeout: 90_000 },
      async ([overlap, kind], { onTestFinished }) => {
        const { f, backToBackJob, deliverNext } = await ownFixture(onTestFinished);
        const { job, handlers, failing, release } = await backToBackJob(overlap);

        // An occurrence fails: its retry is due a second later (or, failing for good, it is
        // dead-lettered and replayed once the next run is under way).
        const failed = await triggerJob(f.engine, job.tenantId, job.jobId);
        failing.set(failed.runId, kind === "retry");
        await f.process(f.workerDeps("first", handlers), await f.nextDeliveryOfRun(failed));
        expect((await getRun(f.engine, failed))?.status).toBe(kind === "retry" ? "FAILED" : "DEAD");

        // The next occurrence is under way (and under buffer_one, the one after it waits).
        let ahead = await triggerJob(f.engine, job.tenantId, job.jobId);
        let aheadRunning = (await deliverNext(job, ahead, handlers)).running;
        let buffered: Run | null = null;
        if (overlap === "buffer_one") {
          buffered = await triggerJob(f.engine, job.tenantId, job.jobId);
          await (await deliverNext(job, buffered, handlers)).running;
          expect((await getJob(f.engine, job.jobId))?.bufferedRunId).toBe(buffered.runId);
        }
        const rerun =
          kind === "retry"
            ? { ...failed, runId: runId(failed.jobId, failed.scheduledFor, 2), attempt: 2 }
            : (await replayDeadLetter(f.engine, job.tenantId, failed.runId)).run;
        await f.process(
          recheckingSoon(f.workerDeps("rerun", handlers)),
          await f.nextDeliveryOfRun(rerun),
        );
        expect((await getRun(f.engine, rerun))?.reason).toBe(`waiting: overlap policy ${overlap}`);

        // Period after period, the run ahead ends and the next one starts at once: the rerun, which
        // checks again a second after each wait, must still get in at the first of them.
        const skipped: string[] = [];
        let periods = 0;
        for (; periods < 3; periods++) {
          release(ahead.runId);
          expect(await aheadRunning).toBe("ack");
          // buffer_one sends its waiting run the moment the run ahead ends.
          if (buffered !== null) {
            const woken = await deliverNext(job, buffered, handlers);
            if (woken.admitted) {
              ahead = buffered;
              aheadRunning = woken.running;
              buffered = null;
            }
          }
          const next = await triggerJob(f.engine, job.tenantId, job.jobId);
          const delivered = await deliverNext(job, next, handlers);
          if (delivered.admitted) {
            ahead = next;
            aheadRunning = delivered.running;
          } else {
            const decided = await getRun(f.engine, next);
            if (decided?.status === "SKIPPED") skipped.push(decided.reason ?? "");
            else if (buffered === null) buffered = next;
          }
          await f.process(
            recheckingSoon(f.workerDeps("rerun", handlers)),
            await f.nextDeliveryOfRun(rerun),
          );
          if ((await getRun(f.engine, rerun))?.status !== "QUEUED") break;
        }
        const ended = await getRun(f.engine, rerun);
        expect({ status: ended?.status, periods }).toEqual({ status: "SUCCEEDED", periods: 0 });
        // The occurrence that met it yielded to it, and the job's runs go on after it.
        if (overlap === "skip")
          expect(skipped).toEqual([
            `overlap: a retry or replay (${rerun.runId}) waits to run first; policy skip`,
          ]);
        expect((await getJob(f.engine, job.jobId))?.rerunWaiting ?? null).toBeNull();
        // Its ending is awaited: left running, its writes landed after onTestFinished deleted the
        // case's tables, an unhandled ResourceNotFoundException in whichever file ran next in this
        // process (isolate: false).
        release(ahead.runId);
        expect(await aheadRunning).toBe("ack");
        if (buffered !== null) {
          const woken = await deliverNext(job, buffered, handlers);
          expect(woken.admitted).toBe(true);
          release(buffered.runId);
          expect(await woken.running).toBe("ack");
        }
      },
    );
  });

  describe("a retry or replay of an allow job kept at its maxConcurrent bound by back-to-back runs", () => {
    it.for<Rerun>(["retry", "replay"])(
      "a %s takes the slot that frees next instead of waiting for a gap",
      { timeout: 90_000 },
      async (kind, { onTestFinished }) => {
        const { f, backToBackJob, deliverNext } = await ownFixture(onTestFinished);
        const maxConcurrent = 2;
        const { job, handlers, failing, release } = await backToBackJob("allow", maxConcurrent);

        const failed = await triggerJob(f.engine, job.tenantId, job.jobId);
        failing.set(failed.runId, kind === "retry");
        await f.process(f.workerDeps("first", handlers), await f.nextDeliveryOfRun(failed));
        expect((await getRun(f.engine, failed))?.status).toBe(kind === "retry" ? "FAILED" : "DEAD");

        // The job is at its bound: two runs under way, oldest first.
        const ahead: { runId: string; running: Promise<"ack" | "keep"> }[] = [];
        for (let i = 0; i < maxConcurrent; i++) {
          const run = await triggerJob(f.engine, job.tenantId, job.jobId);
          const delivered = await deliverNext(job, run, handlers);
          expect(delivered.admitted).toBe(true);
          ahead.push({ runId: run.runId, running: delivered.running });
        }
        const rerun =
          kind === "retry"
            ? { ...failed, runId: runId(failed.jobId, failed.scheduledFor, 2), attempt: 2 }
            : (await replayDeadLetter(f.engine, job.tenantId, failed.runId)).run;
        await f.process(
          recheckingSoon(f.workerDeps("rerun", handlers)),
          await f.nextDeliveryOfRun(rerun),
        );
        expect((await getRun(f.engine, rerun))?.reason).toBe("waiting: overlap policy allow");

        // Period after period, the oldest run ends and the next occurrence comes at once: the
        // rerun, which checks again a second after each wait, must take the slot that freed.
        const waiting: Run[] = [];
        let periods = 0;
        for (; periods < 3; periods++) {
          const oldest = ahead.shift();
          if (oldest === undefined) throw new Error("no run ahead");
          release(oldest.runId);
          expect(await oldest.running).toBe("ack");
          const next = await triggerJob(f.engine, job.tenantId, job.jobId);
          const delivered = await deliverNext(job, next, handlers);
          if (delivered.admitted) ahead.push({ runId: next.runId, running: delivered.running });
          else {
            // It waits, as allow's runs at the bound do.
            const decided = await getRun(f.engine, next);
            expect(decided?.reason).toBe("waiting: overlap policy allow");
            waiting.push(next);
          }
          await f.process(
            recheckingSoon(f.workerDeps("rerun", handlers)),
            await f.nextDeliveryOfRun(rerun),
          );
          if ((await getRun(f.engine, rerun))?.status !== "QUEUED") break;
        }
        const ended = await getRun(f.engine, rerun);
        expect({ status: ended?.status, periods }).toEqual({ status: "SUCCEEDED", periods: 0 });
        expect(waiting.map((r) => r.runId)).toHaveLength(1);
        expect((await getJob(f.engine, job.jobId))?.rerunWaiting ?? null).toBeNull();

        // The occurrence that gave way runs next; the job's runs go on after the rerun.
        for (const run of waiting) {
          const woken = await deliverNext(job, run, handlers);
          expect(woken.admitted).toBe(true);
          release(run.runId);
          expect(await woken.running).toBe("ack");
        }
        for (const run of ahead) {
          release(run.runId);
          expect(await run.running).toBe("ack");
        }
      },
    );
  });

  describe("a waiting retry's mark on its job", () => {
    it.for<OverlapPolicy>(["skip", "allow"])(
      "under %s, blocks no occurrence once the retry has ended without running (cancelled while it waited)",
      { timeout: 60_000 },
      async (overlap, { onTestFinished }) => {
        const { f, backToBackJob, deliverNext } = await ownFixture(onTestFinished);
        const { job, handlers, failing, release } = await backToBackJob(overlap);
        const failed = await triggerJob(f.engine, job.tenantId, job.jobId);
        failing.set(failed.runId, true);
        await f.process(f.workerDeps("first", handlers), await f.nextDeliveryOfRun(failed));
        const ahead = await triggerJob(f.engine, job.tenantId, job.jobId);
        const { running } = await deliverNext(job, ahead, handlers);
        const retry = { ...failed, runId: runId(failed.jobId, failed.scheduledFor, 2), attempt: 2 };
        await f.process(
          recheckingSoon(f.workerDeps("retry", handlers)),
          await f.nextDeliveryOfRun(retry),
        );
        expect((await getJob(f.engine, job.jobId))?.rerunWaiting).toBe(retry.runId);

        // Cancelled while it waits: the cancel writes the run alone, and the mark stays behind.
        expect((await cancelRun(f.engine, job.tenantId, job.jobId, retry.runId)).status).toBe(
          "CANCELLED",
        );
        release(ahead.runId);
        expect(await running).toBe("ack");

        // The next occurrence reads the marked run ended: it starts, and its admission drops the mark.
        const next = await triggerJob(f.engine, job.tenantId, job.jobId);
        const delivered = await deliverNext(job, next, handlers);
        expect(delivered.admitted).toBe(true);
        expect((await getJob(f.engine, job.jobId))?.rerunWaiting ?? null).toBeNull();
        release(next.runId);
        expect(await delivered.running).toBe("ack");
        expect((await getRun(f.engine, next))?.status).toBe("SUCCEEDED");
      },
    );
  });
});
