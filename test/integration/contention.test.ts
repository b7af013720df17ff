import { TransactionConflictException } from "@aws-sdk/client-dynamodb";
import { PutCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { dispatchShard, type PassResult } from "../../shared/dispatch/dispatcher.js";
import type { JobContext } from "../../shared/execution/job-contract.js";
import { createJob, editJob } from "../../shared/jobs/index.js";
import { METRICS } from "../../shared/observability.js";
import type { ScheduleSpec } from "../../shared/schedule/index.js";
import { listSetAsideEntries } from "../../shared/storage/set-aside.js";

const MAX_CONTENTION_ATTEMPTS = 8;

import { skippedRun } from "../../shared/storage/runs.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { type FaultPlan, type InjectedReason, withFaults } from "../support/faults.js";
import { seedJobs } from "../support/seed.js";

const SECOND = 1000;
const MINUTE = 60 * SECOND;

function swept(pass: PassResult) {
  if (pass.outcome !== "swept") throw new Error(`pass ended ${pass.outcome}`);
  return pass;
}

type Input = Record<string, unknown>;
type TransactItem = Record<
  string,
  { TableName?: string; Key?: Record<string, unknown> } | undefined
>;
const transactItems = (input: Input) => (input.TransactItems as TransactItem[] | undefined) ?? [];

/** A claim's transaction: it deletes a due entry (of `jobId`, when given). */
const isClaimOf =
  (jobId?: string) =>
  (input: Input): boolean =>
    transactItems(input).some((item) => {
      const sk = item.Delete?.Key?.sk;
      return (
        typeof sk === "string" &&
        String(item.Delete?.Key?.pk).startsWith("DUE#") &&
        (jobId === undefined || sk.includes(`#${jobId}#`))
      );
    });

describe("a claim under transaction conflicts and throttling", () => {
  let f: EngineFixture;
  const time = { ms: Math.floor(Date.now() / MINUTE) * MINUTE + 30 * SECOND };
  beforeAll(async () => {
    f = await createEngineFixture({
      settings: { shardCount: 1, maxShardCount: 1 },
      clock: () => new Date(time.ms),
    });
  });
  afterAll(() => f.destroy());

  // A recurring job's claim is a transaction (its next entry rides in it); a one-off's is plain
  // writes with plain claims on (oneOffClaimWrites), whose job update meets the same contention
  // (below).
  // Daily: its next occurrence lies past every later case's pass in this shared fixture.
  const dailyFrom = (due: Date) => ({ every: "PT24H", startAt: due.toISOString() });
  const reasons: InjectedReason[] = ["TransactionConflict", "ThrottlingError"];
  it.each(reasons)(
    "%s on a claim's job item: the claim is sent again and the pass claims every entry",
    async (reason) => {
      time.ms += 10 * MINUTE;
      const now = new Date(time.ms);
      const due = new Date(now.getTime() - 5 * SECOND);
      const jobs = await seedJobs(
        f,
        ["a", "b", "c"].map((x) => ({
          jobId: `${reason}-${x}`,
          schedule: dailyFrom(due),
          dueAt: due,
        })),
        now,
      );
      const before = f.metrics.sum(METRICS.writeContention, { operation: "claim" });
      // A write to the job in flight (a worker's, an edit's): DynamoDB reports the conflict on it.
      const faulty = withFaults(f.engine, {
        operation: "TransactWriteItems",
        times: 3,
        match: isClaimOf(),
        reason,
        conflictOn: (item) => item.Update !== undefined,
      });
      try {
        const pass = swept(await dispatchShard(faulty.engine, 0, `pass-${reason}`));
        expect([pass.runs, pass.failed, pass.setAside]).toEqual([3, 0, 0]);
        expect(faulty.injected.count).toBe(3);
      } finally {
        faulty.destroy();
      }
      const runs = await f.runs();
      for (const job of jobs) {
        expect(runs.filter((r) => r.jobId === job.jobId).map((r) => r.status)).toEqual(["QUEUED"]);
      }
      expect(f.metrics.sum(METRICS.writeContention, { operation: "claim" }) - before).toBe(3);
    },
  );

  it("contention that outlasts the retries leaves the entry in its bucket, and a later pass reads that bucket again", async () => {
    time.ms += 10 * MINUTE;
    const now = new Date(time.ms);
    const due = new Date(now.getTime() - 5 * SECOND);
    await seedJobs(
      f,
      ["contended", "neighbour"].map((jobId) => ({
        jobId,
        schedule: dailyFrom(due),
        dueAt: due,
        filedAt: now,
      })),
      now,
    );
    const faulty = withFaults(f.engine, {
      operation: "TransactWriteItems",
      times: MAX_CONTENTION_ATTEMPTS,
      match: isClaimOf("contended"),
    });
    try {
      const pass = swept(await dispatchShard(faulty.engine, 0, "pass-contended"));
      expect([pass.runs, pass.failed, pass.setAside]).toEqual([1, 1, 0]);
      expect(faulty.injected.count).toBe(MAX_CONTENTION_ATTEMPTS);
    } finally {
      faulty.destroy();
    }
    expect((await f.runs()).map((r) => r.jobId)).toContain("neighbour");
    expect((await f.dueEntries()).map((d) => d.jobId)).toContain("contended");
    expect(f.metrics.sum(METRICS.dueEntryFailures, { handling: "left" })).toBe(1);

    // Ten minutes on, the bucket is far behind the usual two-minute resweep; it is read all the same.
    time.ms += 10 * MINUTE;
    swept(await dispatchShard(f.engine, 0, "pass-later"));
    expect((await f.runs()).filter((r) => r.jobId === "contended")).toHaveLength(1);
    expect(
      (await f.dueEntries()).filter((d) => d.jobId === "contended").map((d) => d.scheduledFor),
    ).not.toContain(due.toISOString());
  });

  it("a claim DynamoDB refuses for good (ValidationError) is set aside, not retried, and the others are claimed", async () => {
    time.ms += 10 * MINUTE;
    const now = new Date(time.ms);
    const due = new Date(now.getTime() - 5 * SECOND);
    await seedJobs(
      f,
      ["refused", "beside-refused"].map((jobId) => ({
        jobId,
        schedule: dailyFrom(due),
        dueAt: due,
        filedAt: now,
      })),
      now,
    );
    const before = f.metrics.sum(METRICS.writeContention, { operation: "claim" });
    const faulty = withFaults(f.engine, {
      operation: "TransactWriteItems",
      times: 1,
      match: isClaimOf("refused"),
      reason: "ValidationError",
      conflictOn: (item) => item.Put !== undefined,
    });
    try {
      const pass = swept(await dispatchShard(faulty.engine, 0, "pass-refused"));
      expect([pass.runs, pass.failed, pass.setAside]).toEqual([1, 0, 1]);
    } finally {
      faulty.destroy();
    }
    expect(f.metrics.sum(METRICS.writeContention, { operation: "claim" })).toBe(before);
    const aside = await listSetAsideEntries(f.engine, 0);
    expect(aside.filter((a) => a.entry.jobId === "refused").map((a) => a.error)).toEqual([
      expect.stringMatching(/^TransactionCanceledException: .*ValidationError/),
    ]);
    expect((await f.runs()).map((r) => r.jobId)).toContain("beside-refused");
    expect((await f.dueEntries()).map((d) => d.jobId)).not.toContain("refused");
  });

  it("an occurrence already recorded SKIPPED is done: the claim goes on without it", async () => {
    time.ms += 10 * MINUTE;
    const now = new Date(time.ms);
    const first = new Date(Math.floor(now.getTime() / MINUTE) * MINUTE - 5 * MINUTE);
    const [job] = await seedJobs(
      f,
      [
        {
          jobId: "recorded",
          misfire: "skip",
          schedule: { cron: "* * * * *", timezone: "UTC" },
          dueAt: first,
          // Filed now, as an edit or a resume files an overdue entry.
          filedAt: now,
        },
      ],
      now,
    );
    if (!job) throw new Error("seed failed");
    // An earlier claim (before an edit moved the entry back) already recorded this occurrence.
    const recordedAt = new Date(first.getTime() + MINUTE);
    await f.engine.doc.send(
      new PutCommand({
        TableName: f.engine.tables.runs,
        Item: skippedRun(
          {
            jobId: job.jobId,
            tenantId: job.tenantId,
            scheduledFor: recordedAt,
            dueAt: recordedAt,
            attempt: 1,
            priority: job.priority,
            jobVersion: 1,
          },
          "misfire: recorded by an earlier claim",
          now,
          f.engine.settings,
        ),
      }),
    );
    const pass = swept(await dispatchShard(f.engine, 0, "pass-recorded"));
    expect([pass.failed, pass.setAside]).toEqual([0, 0]);
    const runs = (await f.runs()).filter((r) => r.jobId === job.jobId);
    const missed = runs.filter((r) => Date.parse(r.scheduledFor) < now.getTime() - MINUTE);
    expect(missed.every((r) => r.status === "SKIPPED")).toBe(true);
    expect(new Set(missed.map((r) => r.scheduledFor)).size).toBe(missed.length);
    expect(missed.find((r) => r.scheduledFor === recordedAt.toISOString())?.reason).toBe(
      "misfire: recorded by an earlier claim",
    );
    const [next] = (await f.dueEntries()).filter((d) => d.jobId === job.jobId);
    expect(Date.parse(next?.dueAt ?? "")).toBeGreaterThan(now.getTime());
  });

  const plainFaults: [string, () => Error][] = [
    [
      "TransactionConflict",
      () =>
        new TransactionConflictException({
          message: "Transaction is ongoing for the item",
          $metadata: { httpStatusCode: 400 },
        }),
    ],
    [
      "Throttling",
      () =>
        Object.assign(new Error("Rate of requests exceeds the allowed throughput."), {
          name: "ThrottlingException",
          $metadata: { httpStatusCode: 400 },
        }),
    ],
  ];
  it.each(plainFaults)(
    "%s on a one-off's job update (its claim's commit, no transaction): sent again, every entry claimed",
    async (name, error) => {
      time.ms += 10 * MINUTE;
      const now = new Date(time.ms);
      const due = new Date(now.getTime() - 5 * SECOND);
      const jobs = await seedJobs(
        f,
        ["a", "b"].map((x) => ({
          jobId: `plain-${name}-${x}`,
          schedule: { runAt: due.toISOString() },
          dueAt: due,
        })),
        now,
      );
      const before = f.metrics.sum(METRICS.writeContention, { operation: "claim" });
      // Plain claims on: by default a one-off's claim is a transaction, as the cases above.
      const plain = {
        ...f.engine,
        settings: { ...f.engine.settings, oneOffClaimWrites: "plain" as const },
      };
      const faulty = withFaults(plain, {
        operation: "UpdateItem",
        times: 2,
        match: (input) =>
          input.TableName === f.engine.tables.jobs &&
          String((input.Key as Input | undefined)?.pk).startsWith("JOB#plain-"),
        error,
      });
      try {
        const pass = swept(await dispatchShard(faulty.engine, 0, `pass-plain-${name}`));
        // Other cases' jobs in this shared fixture may come due in the same pass: these two count.
        expect([pass.failed, pass.setAside]).toEqual([0, 0]);
        expect(faulty.injected.count).toBe(2);
      } finally {
        faulty.destroy();
      }
      const runs = await f.runs();
      for (const job of jobs) {
        expect(runs.filter((r) => r.jobId === job.jobId).map((r) => r.status)).toEqual(["QUEUED"]);
      }
      expect((await f.dueEntries()).filter((d) => d.jobId.startsWith("plain-"))).toEqual([]);
      expect(f.metrics.sum(METRICS.writeContention, { operation: "claim" }) - before).toBe(2);
    },
  );
});

describe("the worker's and the API's writes under transaction conflicts", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({ settings: { shardCount: 1, maxShardCount: 1 } });
  });
  afterAll(() => f.destroy());

  /** Claims a job due now and processes its delivery through an engine with `plan`'s faults. */
  async function runThroughFaults(
    jobId: string,
    type: string,
    plan: FaultPlan,
    schedule: (now: Date) => ScheduleSpec = (now) => ({
      every: "PT1H",
      startAt: now.toISOString(),
    }),
  ) {
    const now = new Date();
    await seedJobs(f, [{ jobId, type, schedule: schedule(now), dueAt: now }], now);
    swept(await dispatchShard(f.engine, 0, `pass-${jobId}`));
    const delivery = await f.nextDelivery(f.engine.queues.normal, jobId);
    const faulty = withFaults(f.engine, plan);
    try {
      const deps = {
        ...f.workerDeps("worker-1", {
          fails: async (_ctx: JobContext) => {
            throw new Error("the handler failed");
          },
        }),
        engine: faulty.engine,
      };
      expect(await f.process(deps, delivery)).toBe("ack");
      expect(faulty.injected.count).toBe(plan.times);
    } finally {
      faulty.destroy();
    }
    return (await f.runs()).filter((r) => r.jobId === jobId);
  }

  it("admission: a conflict on the job item is retried and the run is admitted", async () => {
    const runs = await runThroughFaults("admitted", "noop", {
      operation: "UpdateItem",
      times: 3,
      match: (input) => input.ConditionExpression === "activeRevision = :revision",
    });
    expect(runs.map((r) => r.status)).toEqual(["SUCCEEDED"]);
    expect(f.metrics.sum(METRICS.writeContention, { operation: "admission" })).toBe(3);
  });

  it("finish: a failure's next attempt, put before its ending, rides out a conflict, and the ending follows", async () => {
    const runs = await runThroughFaults("finished-failed", "fails", {
      operation: "PutItem",
      times: 3,
      // The next attempt's put (a QUEUED run: the retry is due within the fast-path window).
      match: (input) => input.TableName === f.engine.tables.runs,
    });
    expect(runs.map((r) => [r.attempt, r.status])).toEqual([
      [1, "FAILED"],
      [2, "QUEUED"],
    ]);
    expect(f.metrics.sum(METRICS.writeContention, { operation: "finish" })).toBe(3);
  });

  it("finish: a one-off's job write after a success rides out a conflict", async () => {
    const runs = await runThroughFaults(
      "finished-ok",
      "noop",
      {
        operation: "UpdateItem",
        times: 2,
        match: (input) => String(input.UpdateExpression).includes("lastRun = :lastRun"),
      },
      (now) => ({ runAt: now.toISOString() }),
    );
    expect(runs.map((r) => r.status)).toEqual(["SUCCEEDED"]);
    const job = (await f.jobs()).find((j) => j.jobId === "finished-ok");
    expect(job?.lastRun?.status).toBe("SUCCEEDED");
    expect(job?.status).toBe("COMPLETED");
  });

  it("edit: a cancelled edit transaction is sent again and the edit lands once", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({
        schedule: { every: "PT1H", startAt: new Date(Date.now() + 3_600_000).toISOString() },
      }),
    );
    const faulty = withFaults(f.engine, {
      operation: "TransactWriteItems",
      times: 3,
      match: (input) => transactItems(input).some((item) => item.Update?.Key?.sk === "JOB"),
      reason: "TransactionConflict",
      conflictOn: (item) => item.Update !== undefined,
    });
    try {
      const edited = await editJob(faulty.engine, job.tenantId, job.jobId, 1, { name: "renamed" });
      expect([edited.version, edited.name]).toEqual([2, "renamed"]);
      expect(faulty.injected.count).toBe(3);
    } finally {
      faulty.destroy();
    }
    const [entry] = (await f.dueEntries()).filter((d) => d.jobId === job.jobId);
    expect(entry?.jobVersion).toBe(2);
    expect(f.metrics.sum(METRICS.writeContention, { operation: "lifecycle" })).toBe(3);
  });
});
