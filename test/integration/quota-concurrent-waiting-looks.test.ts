import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createJob } from "../../shared/jobs/index.js";
import { quotaRecheckMs } from "../../shared/quotas/recheck.js";
import { writeQuotaOverride } from "../../shared/storage/tenant-quotas.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { heldHandler } from "../support/held-runs.js";
import { createTestClients } from "../support/namespace.js";
import { byCommand, countingEngine } from "../support/request-count.js";
import { waitFor } from "../support/wait.js";

/**
 * On the Lambda worker a run over its tenant's `concurrentRuns` quota goes back to QUEUED with a
 * fresh message, and looks again for as long as the tenant's slots stay held, however long: a
 * tenant whose slot is held by a target that never answers (up to its `timeoutSeconds`) and that
 * starts runs faster than they drain keeps each of them looking. The review (h77) measured 12 runs
 * behind one held slot making 80 looks in 40 s, with a ceiling of 16 s between looks ('expected 80
 * to be less than or equal to 12'). The ceiling now grows to 60 s, and docs/api.md ("Quotas")
 * states a look's requests and the looks an hour; these cases pin both without waiting them out:
 * the wait between looks as a function of the looks had, and one look's requests, counted.
 */
const HOUR_MS = 3_600_000;

/** The looks a run makes in `spanMs` of waiting from its first, every wait drawn with `random`. */
function looksIn(spanMs: number, random: () => number): number {
  let looks = 0;
  for (let waited = 0, fence = 1; waited <= spanMs; fence++) {
    looks++;
    waited += quotaRecheckMs(fence, random);
  }
  return looks;
}

describe("the wait between a waiting run's looks", () => {
  it("is 1 s after its first start, doubling with each start to 60 s, less up to half at random", () => {
    const fences = Array.from({ length: 9 }, (_, i) => i + 1);
    expect(fences.map((fence) => quotaRecheckMs(fence, () => 0) / 1000)).toEqual([
      1, 2, 4, 8, 16, 32, 60, 60, 60,
    ]);
    expect(fences.map((fence) => quotaRecheckMs(fence, () => 1) / 1000)).toEqual([
      0.5, 1, 2, 4, 8, 16, 30, 30, 30,
    ]);
  });

  it("comes to at most 125 looks in a run's first hour of waiting, 120 an hour after, about 80 on average", () => {
    // Every wait its shortest: 6 looks in the first 31.5 s, then one every 30 s.
    expect(looksIn(HOUR_MS, () => 1)).toBe(125);
    expect(looksIn(2 * HOUR_MS, () => 1) - looksIn(HOUR_MS, () => 1)).toBe(120);
    // The waits' mean, 45 s at the ceiling.
    expect(looksIn(2 * HOUR_MS, () => 0.5) - looksIn(HOUR_MS, () => 0.5)).toBe(80);
  });
});

describe("a look of a run waiting at concurrentRuns on the Lambda worker", () => {
  let f: EngineFixture;
  let counting: ReturnType<typeof countingEngine>;
  const sqsSent: string[] = [];
  const sqs = createTestClients();
  beforeAll(async () => {
    f = await createEngineFixture({ settings: { quotaCacheMs: 0 } });
    counting = countingEngine(f.engine);
    sqs.sqs.middlewareStack.add(
      (next, context) => async (args) => {
        sqsSent.push(context.commandName ?? "");
        return next(args);
      },
      { step: "initialize", name: "countSqsRequests" },
    );
  });
  afterAll(async () => {
    counting.destroy();
    sqs.destroy();
    await f.destroy();
  });

  it("reads the run and the job, the override and the quota partition, writes the run and sends its message", async () => {
    const tenant = "waiting-look";
    await writeQuotaOverride(f.engine, tenant, { concurrentRuns: 1 }, new Date());
    // A target that never answers while the case lasts: the run holding the slot.
    const held = heldHandler();
    const oneOff = () =>
      createJob(
        f.engine,
        testJob({ tenantId: tenant, type: "probe", schedule: { runAt: new Date().toISOString() } }),
      );
    const holder = await oneOff();
    const holding = f.process(
      f.workerDeps("holder", { probe: held.handler }),
      await f.nextDelivery(f.engine.queues.normal, holder.job.jobId),
    );
    await waitFor("the holder's handler", () => held.contexts.length === 1);

    const waiter = await oneOff();
    const received = await f.nextDelivery(f.engine.queues.normal, waiter.job.jobId);
    const lookAt = new Date(Date.now());
    const engine = { ...counting.engine, sqs: sqs.sqs, clock: () => lookAt, random: () => 0 };
    counting.sent.splice(0);
    expect(await f.process({ ...f.workerDeps("waiter"), engine }, received)).toBe("ack");
    const sent = counting.sent.splice(0);

    const [run] = (await f.runs()).filter((r) => r.jobId === waiter.job.jobId);
    expect(run?.status).toBe("QUEUED");
    expect(run?.reason).toMatch(/concurrentRuns quota \(1\)/);
    // Its first start: back 1 s later (random 0: the ceiling itself).
    expect(Date.parse(run?.dueAt ?? "")).toBe(lookAt.getTime() + quotaRecheckMs(1, () => 0));
    // The run and its job in one BatchGetItem; the tenant's override (a GetItem here, where the
    // process keeps it for no time: a deployed process keeps it 10 s); the consistent Query of
    // the quota partition that finds no free slot; the run's write back to QUEUED.
    expect(byCommand(sent)).toEqual({
      BatchGetItemCommand: 1,
      GetItemCommand: 1,
      QueryCommand: 1,
      UpdateItemCommand: 1,
    });
    expect(sent.map((s) => s.itemsAsked)).toEqual([2, 0, 0, 0]);
    expect(sent.filter((s) => s.touchesQuota).map((s) => s.command)).toEqual([
      "GetItemCommand",
      "QueryCommand",
    ]);
    // Its message sent again (the delivery's receive and the ack's delete are the other two).
    expect(sqsSent).toEqual(["SendMessageBatchCommand"]);

    held.release();
    await holding;
  }, 60_000);
});
