import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sleep } from "../../shared/clock.js";
import type { JobContext } from "../../shared/execution/job-contract.js";
import { LeaseLapsedError } from "../../shared/execution/lease-watch.js";
import { processRun } from "../../shared/execution/worker.js";
import { createJob } from "../../shared/jobs/index.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { runOf } from "../support/held-runs.js";
import { createTestClients } from "../support/namespace.js";

/**
 * The lease watch stops a handler when the lease its worker last wrote runs out: the moment the
 * reaper and a redelivery read it lapsed, not a slow write's answer later, and not a lease late.
 * Its signal's reason names that lease.
 */
const LEASE_MS = 3000;
/**
 * How late past the lease's end the handler may be stopped on a loaded machine: a timer armed
 * for twice what is left, or a lease timed from the write's answer rather than its sending, stops
 * it 2 s late or more here.
 */
const LATE_MS = 1200;
/** The run's lease write that answers slowly, then the beats after it fail. */
const SLOW_ANSWER_MS = 2000;
/** A lease write that hangs past the lease (a request that does not answer), then fails. */
const HUNG_MS = 8000;
const BEAT = "#status = :running, leaseUntil =";

let f: EngineFixture;
beforeAll(async () => {
  f = await createEngineFixture({ settings: { leaseMs: LEASE_MS } });
});
afterAll(() => f.destroy());

/**
 * An engine like the fixture's whose heartbeats' lease writes (`UpdateItem` of the run's lease)
 * go through `onBeat`, which sees the lease sent and returns what to do with the write.
 */
function beatsThrough(onBeat: (leaseUntil: string) => "pass" | "slow" | "hang" | "fail") {
  const clients = createTestClients({ maxSockets: 16 });
  clients.doc.middlewareStack.add(
    (next, context) => async (args) => {
      const input = args.input as Record<string, unknown>;
      if (
        (context.commandName ?? "").startsWith("UpdateItem") &&
        String(input.UpdateExpression).includes(BEAT)
      ) {
        const values = input.ExpressionAttributeValues as Record<string, unknown>;
        const action = onBeat(String(values[":leaseUntil"]));
        if (action === "hang") await sleep(HUNG_MS);
        if (action === "fail" || action === "hang")
          throw Object.assign(new Error("rate of requests exceeds the allowed throughput"), {
            name: "ThrottlingException",
          });
        const answer = await next(args);
        if (action === "slow") await sleep(SLOW_ANSWER_MS);
        return answer;
      }
      return next(args);
    },
    { step: "initialize", name: "beatsThrough" },
  );
  return { engine: { ...f.engine, doc: clients.doc }, destroy: () => clients.destroy() };
}

/** A handler that waits for its signal and records when it aborted. */
function stoppedHandler() {
  const seen: { signal?: AbortSignal; abortedAt?: number } = {};
  const handler = (ctx: JobContext) =>
    new Promise<void>((resolve) => {
      seen.signal = ctx.signal;
      ctx.signal.addEventListener(
        "abort",
        () => {
          seen.abortedAt = Date.now();
          resolve();
        },
        { once: true },
      );
    });
  return { seen, handler };
}

/**
 * A waiting job's run, processed to its ack by a worker whose beats' lease writes go through
 * `onBeat` (see `beatsThrough`); the job, and what its handler saw of its signal.
 */
async function runUnderBeats(onBeat: Parameters<typeof beatsThrough>[0]) {
  const faulty = beatsThrough(onBeat);
  const { seen, handler } = stoppedHandler();
  try {
    const worker = {
      ...f.workerDeps("worker-a", { waiting: handler }, 500),
      engine: faulty.engine,
    };
    const { job } = await createJob(
      f.engine,
      testJob({
        type: "waiting",
        schedule: { runAt: new Date().toISOString() },
        timeoutSeconds: 60,
      }),
    );
    const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    expect(await processRun(worker, received)).toBe("ack");
    return { job, seen };
  } finally {
    faulty.destroy();
  }
}

describe("a worker whose lease write answered slowly, its beats failing after it", () => {
  it("stops its handler when the lease it wrote runs out, its reason naming that lease", async () => {
    let beats = 0;
    let written = "";
    const { job, seen } = await runUnderBeats((leaseUntil) => {
      beats++;
      if (beats === 1) return "pass";
      if (beats === 2) {
        written = leaseUntil;
        return "slow";
      }
      return "fail";
    });
    expect(written).not.toBe("");
    expect(await runOf(f, job.jobId)).toMatchObject({ status: "RUNNING", leaseUntil: written });
    const reason: unknown = seen.signal?.reason;
    expect(reason).toBeInstanceOf(LeaseLapsedError);
    expect(reason instanceof LeaseLapsedError ? reason.context.leaseUntil : "").toBe(written);
    expect(seen.abortedAt ?? 0).toBeLessThanOrEqual(Date.parse(written) + LATE_MS);
  }, 30_000);
});

describe("a worker whose next lease write hangs past the lease", () => {
  it("stops its handler when the lease it wrote runs out, not when the write gives up", async () => {
    let beats = 0;
    let written = "";
    const { seen } = await runUnderBeats((leaseUntil) => {
      beats++;
      if (beats === 1) {
        written = leaseUntil;
        return "pass";
      }
      return "hang";
    });
    expect(written).not.toBe("");
    expect(seen.signal?.reason).toBeInstanceOf(LeaseLapsedError);
    // No beat looked at the lease while the write hung: the watch's timer stopped the handler.
    expect(seen.abortedAt ?? 0).toBeLessThanOrEqual(Date.parse(written) + LATE_MS);
  }, 30_000);
});
