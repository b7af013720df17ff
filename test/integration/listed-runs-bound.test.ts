import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Engine } from "../../shared/engine.js";
import { completeAsyncRun } from "../../shared/execution/async-runs.js";
import { builtInHandlers } from "../../shared/execution/built-in-handlers.js";
import { processRun, type WorkerDeps } from "../../shared/execution/worker.js";
import { cancelRun, createJob, pauseJob, triggerJob } from "../../shared/jobs/index.js";
import type { Run } from "../../shared/model.js";
import { MAX_CONCURRENT_LIMIT } from "../../shared/policies.js";
import { MAX_LISTED_RUNS } from "../../shared/storage/admission.js";
import { getJob, getRun } from "../../shared/storage/run-reads.js";
import { cachedSigningSecrets } from "../../shared/webhooks/secrets.js";
import {
  createEngineFixture,
  deliveryOfRun,
  type EngineFixture,
  engineAt,
  testJob,
} from "../support/engine-fixture.js";

/** Far enough apart that every lease of a round has lapsed by the next (a round takes seconds). */
const ROUND_MS = 10 * 60_000;

/**
 * A job's `activeRuns` lives on its own item, which DynamoDB holds to 400 KB. A run whose lease
 * lapsed without its ending stays listed (its own admission reads it there when it comes back),
 * and counts for overlap only while its lease is live: a long-job target that takes every run
 * over (202) and then goes quiet leaves each run listed for up to its 24 h timeout, while the
 * job's next runs are admitted beside them. Unbounded, the list grew by maxConcurrent runs a
 * lease, filled the item, and every admission of the job failed on DynamoDB's limit from then on.
 */
describe("the runs a job lists as under way", () => {
  let f: EngineFixture;
  let target: Server;
  let targetUrl: string;
  let handedOver = 0;
  /** The run token each run's latest delivery carried, by run id: what its target completes it with. */
  const tokens = new Map<string, string>();
  beforeAll(async () => {
    f = await createEngineFixture();
    target = createServer((request, response) => {
      request.resume();
      request.on("end", () => {
        handedOver++;
        tokens.set(
          String(request.headers["x-scheduler-run-id"]),
          String(request.headers["x-scheduler-run-token"]),
        );
        response.writeHead(202).end();
      });
    });
    await new Promise<void>((resolve) => target.listen(0, "127.0.0.1", resolve));
    targetUrl = `http://127.0.0.1:${(target.address() as AddressInfo).port}/long`;
  });
  afterAll(async () => {
    await new Promise((resolve) => target?.close(resolve));
    await f?.destroy();
  });

  const workerAt = (engine: Engine): WorkerDeps => ({
    engine,
    workerId: "w",
    handlers: builtInHandlers(
      {
        signingSecrets: cachedSigningSecrets(engine),
        allowPrivateTargets: true,
        apiUrl: "http://127.0.0.1:1/never-called",
        leaseSeconds: engine.settings.leaseMs / 1000,
      },
      engine.clock,
    ),
  });

  /** Triggers `count` runs of the job at `engine`'s clock and delivers each once. */
  const triggerAndDeliver = async (engine: Engine, jobId: string, count: number) => {
    const runs: Run[] = [];
    for (let i = 0; i < count; i++) {
      const run = await triggerJob(engine, "tenant-a", jobId);
      await processRun(workerAt(engine), deliveryOfRun(engine, run));
      runs.push(run);
    }
    return runs;
  };

  /**
   * An allow job at its largest maxConcurrent, whose async target has taken over its most listed
   * runs and gone quiet: rounds of maxConcurrent runs, each round a lease after the one before, so
   * none is live. Returns the job, the runs and the instant after the last round.
   */
  const jobFullOfQuietRuns = async (
    schedule: { cron: string; timezone: string } = { cron: "0 0 1 1 *", timezone: "UTC" },
  ) => {
    const { job } = await createJob(
      f.engine,
      testJob({
        type: "http",
        target: { url: targetUrl, mode: "async" },
        timeoutSeconds: 86_400,
        schedule,
        policies: { ...testJob().policies, overlap: "allow", maxConcurrent: MAX_CONCURRENT_LIMIT },
      }),
    );
    const start = Date.now();
    const before = handedOver;
    const rounds = Math.ceil(MAX_LISTED_RUNS / MAX_CONCURRENT_LIMIT);
    const quiet: Run[] = [];
    for (let round = 0; round < rounds; round++)
      quiet.push(
        ...(await triggerAndDeliver(
          engineAt(f.engine, start + round * ROUND_MS),
          job.jobId,
          Math.min(MAX_CONCURRENT_LIMIT, MAX_LISTED_RUNS - round * MAX_CONCURRENT_LIMIT),
        )),
      );
    expect(handedOver - before).toBe(MAX_LISTED_RUNS);
    const full = await getJob(f.engine, job.jobId);
    expect(Object.keys(full?.activeRuns ?? {})).toHaveLength(MAX_LISTED_RUNS);
    return { job, quiet, after: start + rounds * ROUND_MS };
  };

  it("stays bounded when a long-job target takes runs over and goes quiet: the next runs wait until a listed one ends", async () => {
    const { job, quiet, after: afterRounds } = await jobFullOfQuietRuns();

    // The next run finds the list full of runs not ended: it waits, as at the job's bound.
    const later = engineAt(f.engine, afterRounds);
    const [next] = await triggerAndDeliver(later, job.jobId, 1);
    if (next === undefined) throw new Error("no run triggered");
    const listed = Object.keys((await getJob(f.engine, job.jobId))?.activeRuns ?? {});
    expect(listed.length).toBeLessThanOrEqual(MAX_LISTED_RUNS);
    expect(listed).not.toContain(next.runId);
    expect(tokens.has(next.runId)).toBe(false);
    expect(await getRun(f.engine, next)).toMatchObject({
      status: "QUEUED",
      reason: "waiting: overlap policy allow",
    });

    // One of them ends (cancelled here; a timeout or its target's completion alike): its place
    // frees, and the waiting run is admitted and handed over when it comes back.
    const [first] = quiet;
    if (first === undefined) throw new Error("no run handed over");
    await cancelRun(later, "tenant-a", job.jobId, first.runId);
    const waiting = await getRun(f.engine, next);
    if (waiting === null) throw new Error("the waiting run is gone");
    const recheck = engineAt(f.engine, Date.parse(waiting.dueAt) + 1_000);
    await processRun(workerAt(recheck), deliveryOfRun(recheck, waiting));
    expect(tokens.has(next.runId)).toBe(true);
    const after = Object.keys((await getJob(f.engine, job.jobId))?.activeRuns ?? {});
    expect(after).toHaveLength(MAX_LISTED_RUNS);
    expect(after).toContain(next.runId);
    expect(after).not.toContain(first.runId);
  }, 180_000);
  it("drops them all once they have ended, at the next admission or at a pause, though one write may not name them all", async () => {
    for (const ending of ["admission", "pause"] as const) {
      // Hourly: its next run comes within the hour, so a run's ending leaves its entry and the
      // job's lastRun to that run's admission (nextAdmissionSoon), not writing the job.
      const { job, quiet, after } = await jobFullOfQuietRuns({
        cron: "0 * * * *",
        timezone: "UTC",
      });
      // Their targets complete them all.
      const later = engineAt(f.engine, after);
      for (const run of quiet)
        await completeAsyncRun(later, run.runId, tokens.get(run.runId) ?? "", {
          status: "succeeded",
        });
      expect(Object.keys((await getJob(f.engine, job.jobId))?.activeRuns ?? {})).toHaveLength(
        MAX_LISTED_RUNS,
      );
      if (ending === "admission") {
        // It drops what one write may name; the rest, read ended again, go with the next.
        const [next] = await triggerAndDeliver(later, job.jobId, 1);
        if (next === undefined) throw new Error("no run triggered");
        expect(tokens.has(next.runId)).toBe(true);
        expect((await getRun(f.engine, next))?.status).toBe("RUNNING");
        const left = Object.keys((await getJob(f.engine, job.jobId))?.activeRuns ?? {});
        expect(left).toContain(next.runId);
        expect(left.length).toBeLessThan(MAX_LISTED_RUNS);
        const [another] = await triggerAndDeliver(later, job.jobId, 1);
        if (another === undefined) throw new Error("no run triggered");
        expect(Object.keys((await getJob(f.engine, job.jobId))?.activeRuns ?? {}).sort()).toEqual(
          [next.runId, another.runId].sort(),
        );
      } else {
        // The pause writes them all out, in as many writes as it takes.
        await pauseJob(later, "tenant-a", job.jobId);
        const paused = await getJob(f.engine, job.jobId);
        expect(paused?.status).toBe("PAUSED");
        expect(paused?.activeRuns).toEqual({});
      }
      expect((await getJob(f.engine, job.jobId))?.lastRun?.status).toBe("SUCCEEDED");
    }
  }, 300_000);
});
