import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { isDeepStrictEqual } from "node:util";
import { QueryCommand, UpdateCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Engine } from "../../shared/engine.js";
import { handOverRun, issueRunToken } from "../../shared/execution/async-delivery.js";
import { completeAsyncRun } from "../../shared/execution/async-runs.js";
import { builtInHandlers } from "../../shared/execution/built-in-handlers.js";
import { nextAdmissionSoon } from "../../shared/execution/run-endings.js";
import { heartbeatEveryMs } from "../../shared/execution/run-execution.js";
import { processRun, type WorkerDeps } from "../../shared/execution/worker.js";
import {
  cancelJob,
  cancelRun,
  createJob,
  editJob,
  pauseJob,
  replayDeadLetter,
  triggerJob,
} from "../../shared/jobs/index.js";
import { runDueNow } from "../../shared/jobs/run-now.js";
import { runId } from "../../shared/keys.js";
import type { Job, Run } from "../../shared/model.js";
import { MAX_CONCURRENT_LIMIT } from "../../shared/policies.js";
import { MAX_LISTED_RUNS } from "../../shared/storage/admission.js";
import { putRunsUnconditionally } from "../../shared/storage/claim.js";
import { decodeRun, jobKey } from "../../shared/storage/items.js";
import { getJob, getRun, getRunItem, runKeyOf } from "../../shared/storage/run-reads.js";
import { startRun } from "../../shared/storage/run-start.js";
import { newRunToken, runTokenHash } from "../../shared/webhooks/run-token.js";
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

const HOUR_MS = 60 * 60_000;

type Item = Record<string, unknown>;
/**
 * How far past an hour jobFullOfQuietRuns creates its job and starts its runs. A job created
 * within a fast-path window (lookahead and margin: 7 min) of its next occurrence claims that
 * occurrence at once, and its nextRunAt is the occurrence after: created from HH:53 on, an hourly
 * job records its next run at HH+2:00, more than an hour after the endings a few minutes on, so
 * its runs' endings write the job at once (nextAdmissionSoon) and leave no entry listed, where
 * the hourly cases need the endings to leave their entries to the next admission.
 * At ten past, an hourly job's next occurrence is 50 min off (nothing claimed, the endings a few
 * minutes on within the hour of it), and a yearly one's (1 January, 00:00) 50 min off at least.
 */
const START_PAST_HOUR_MS = 10 * 60_000;

/**
 * A job's `activeRuns` lives on its own item, which DynamoDB holds to 400 KB. A run whose lease
 * lapsed without its ending stays listed (its own admission reads it there when it comes back),
 * and counts for overlap only while its lease is live: a long-job target that takes every run
 * over (202) and then goes quiet leaves each run listed for up to its 24 h timeout, while the
 * job's next runs are admitted beside them. Unbounded, the list grew by maxConcurrent runs a
 * lease, filled the item, and every admission of the job failed on DynamoDB's limit from then on.
 */
/**
 * The cases run side by side (describe.concurrent), each on a job of its own in the one pair of
 * tables, each at clocks of its own (engineAt); deliveries are counted by job, tokens by run.
 */
describe.concurrent("the runs a job lists as under way", () => {
  let f: EngineFixture;
  let target: Server;
  let targetUrl: string;
  /** The deliveries its target took over, by job id. */
  const handedOver = new Map<string, number>();
  /** The run token each run's latest delivery carried, by run id: what its target completes it with. */
  const tokens = new Map<string, string>();
  beforeAll(async () => {
    f = await createEngineFixture();
    target = createServer((request, response) => {
      request.resume();
      request.on("end", () => {
        const jobId = String(request.headers["x-scheduler-job-id"]);
        handedOver.set(jobId, (handedOver.get(jobId) ?? 0) + 1);
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
   * An async job on a quiet target that takes each run over (202) and never calls back, created
   * at `engine`'s clock.
   */
  const quietTargetJob = async (
    engine: Engine,
    schedule: { cron: string; timezone: string },
    overlap: "allow" | "skip" | "buffer_one",
  ) =>
    (
      await createJob(
        engine,
        testJob({
          type: "http",
          target: { url: targetUrl, mode: "async" },
          timeoutSeconds: 86_400,
          schedule,
          policies: {
            ...testJob().policies,
            overlap,
            ...(overlap === "allow" ? { maxConcurrent: MAX_CONCURRENT_LIMIT } : {}),
          },
        }),
      )
    ).job;

  /**
   * How many runs of the first case's list the worker admits and hands over, one at a time, beside
   * the lapsed entries of those before, up to the bound.
   */
  const WORKER_ROUND = 10;

  /** The items runDueNow makes for runs of `job` triggered at `instants`, not yet written. */
  const queuedAt = (job: Job, instants: readonly number[]) =>
    instants.map((instant) => {
      const at = engineAt(f.engine, instant);
      const { run, item } = runDueNow(at, {
        jobId: job.jobId,
        tenantId: job.tenantId,
        scheduledFor: at.clock(),
        attempt: 1,
        priority: job.priority,
        jobVersion: job.version,
        triggered: true,
      });
      return { at, run, item };
    });

  /**
   * Queues a run of `job` at each instant as a trigger queues it: its item from runDueNow (the
   * trigger's write adds only a check of the job's status), the items put 25 to a request (each
   * id is its own instant's, so no put meets an item), their messages left unsent (the cases
   * deliver by hand). Each comes with an engine whose clock reads its instant from now on.
   */
  const queueRuns = async (job: Job, instants: readonly number[]) => {
    const queued = queuedAt(job, instants);
    await putRunsUnconditionally(
      f.engine,
      queued.map((q) => q.item),
    );
    return queued;
  };

  /** A run's item as stored. */
  const runItem = async (run: Run): Promise<Item> =>
    (await getRunItem(f.engine, runKeyOf(run))) ?? {};

  /** The job's runs as stored, read a page at a time (a read a run was 200 requests). */
  const runsOf = async (jobId: string) => {
    const runs: Run[] = [];
    let from: Record<string, unknown> | undefined;
    do {
      const page = await f.engine.doc.send(
        new QueryCommand({
          TableName: f.engine.tables.runs,
          KeyConditionExpression: "pk = :pk",
          ExpressionAttributeValues: { ":pk": jobKey(jobId).pk },
          ConsistentRead: true,
          ExclusiveStartKey: from,
        }),
      );
      runs.push(...(page.Items ?? []).map(decodeRun));
      from = page.LastEvaluatedKey;
    } while (from !== undefined);
    return runs;
  };

  /** What the product's writes did to a run's item, from `before` to `after`. */
  const writtenBetween = (before: Item, after: Item) => ({
    set: Object.fromEntries(
      Object.entries(after).filter(([name, value]) => !isDeepStrictEqual(before[name], value)),
    ),
    removed: Object.keys(before).filter((name) => !(name in after)),
  });

  /**
   * `item` as the writes `written` found between two items of another run left it, with each value
   * in `replacing` (that run's own: its token's hash) replaced by this run's.
   */
  const withWritten = (
    item: Item,
    written: ReturnType<typeof writtenBetween>,
    replacing: ReadonlyMap<unknown, unknown> = new Map(),
  ): Item => {
    const kept = Object.fromEntries(
      Object.entries(item).filter(([name]) => !written.removed.includes(name)),
    );
    const set = Object.fromEntries(
      Object.entries(written.set).map(([name, value]) => [name, replacing.get(value) ?? value]),
    );
    return { ...kept, ...set };
  };

  /**
   * Hands `job`'s runs at `instants` over to its quiet target without the worker, for the cases
   * whose subject is what happens at a full list, all at the instant of the last: a run's
   * hand-over is none of what they assert, and three writes a run (start, token, hand-over) would
   * be most of the file's requests. The first two runs are queued as a trigger queues them
   * (queuedAt), then started, given their run token and handed over by the operations the worker
   * calls for them (startRun, issueRunToken, handOverRun). The others' items are what those writes
   * made of the first's, on each run's own queued item with a token of its own, put 25 to a
   * request; the second run, so made, must equal the one the operations wrote. The job's
   * activeRuns and the marks its admissions leave (activeRevision, firstWriteLeadMs) are written
   * at once, as the worker's admissions would have. Compared item by item with a worker's fill,
   * the job's and the runs' items differ only in instants, ids, token hashes and the admissions'
   * marks (admissionMarks, which only an admission whose answer was lost reads). Returns the runs,
   * their items as handed over, and the instant at which their leases lapse.
   */
  const handOverQuietRuns = async (job: Job, instants: readonly number[]) => {
    const { leaseMs } = f.engine.settings;
    const queued = queuedAt(job, instants);
    const [model, check] = queued;
    if (model === undefined || check === undefined) throw new Error("fewer than two runs");
    const at = engineAt(f.engine, Math.max(...instants));
    const now = at.clock();
    await putRunsUnconditionally(f.engine, [model.item, check.item]);
    for (const { run } of [model, check]) {
      const started = await startRun(at, run, "w", now);
      if (started.kind !== "started") throw new Error(`run ${run.runId} not started`);
      tokens.set(run.runId, await issueRunToken(at, started.run, job, now));
      await handOverRun(at, started.run, job, false, now);
    }
    const modelItem = await runItem(model.run);
    const handedOver = writtenBetween(model.item, modelItem);
    const hashOf = (run: Run) => runTokenHash(tokens.get(run.runId) ?? "");
    const asHandedOver = ({ run, item }: (typeof queued)[number]) =>
      withWritten(item, handedOver, new Map([[hashOf(model.run), hashOf(run)]]));
    expect(asHandedOver(check)).toEqual(await runItem(check.run));
    for (const { run } of queued.slice(2))
      tokens.set(run.runId, newRunToken(Number(modelItem.fence)));
    const items = new Map(queued.map((q) => [q.run.runId, asHandedOver(q)]));
    await putRunsUnconditionally(f.engine, [...items.values()].slice(2));
    const lease = new Date(now.getTime() + leaseMs).toISOString();
    // A write per 100: DynamoDB holds an update expression to 4 KB (admission.ts).
    const ids = queued.map((q) => q.run.runId);
    for (let from = 0; from < ids.length; from += MAX_LISTED_RUNS / 2) {
      const some = ids.slice(from, from + MAX_LISTED_RUNS / 2);
      await f.engine.doc.send(
        new UpdateCommand({
          TableName: f.engine.tables.jobs,
          Key: jobKey(job.jobId),
          UpdateExpression: `SET activeRevision = activeRevision + :admissions, firstWriteLeadMs = :lead, ${some
            .map((_, i) => `activeRuns.#r${i} = :lease`)
            .join(", ")}`,
          ExpressionAttributeNames: Object.fromEntries(some.map((id, i) => [`#r${i}`, id])),
          ExpressionAttributeValues: {
            ":admissions": some.length,
            ":lead": leaseMs - heartbeatEveryMs(workerAt(f.engine)),
            ":lease": lease,
          },
        }),
      );
    }
    return { quiet: queued.map((q) => q.run), items, lastLease: Date.parse(lease) };
  };

  /**
   * An allow job at its largest maxConcurrent, whose async target has taken over its most listed
   * runs and gone quiet, the last WORKER_ROUND of them through the worker, a lease after the runs
   * before, so that none of those is live. The runs before are handed over without it
   * (handOverQuietRuns). The round's runs are queued at once, a second apart (queueRuns:
   * a trigger a run, its transaction and its message, is none of what the case asserts), and each
   * is delivered through the worker to the target at its own instant, one at a time (deliveries
   * side by side lose their admissions to the job's revision): the worker admits each beside the
   * lapsed entries, which it reads and keeps, then starts, hands over and lists it as it did a
   * triggered one, up to the bound. Returns the job, the runs and the instant after the round.
   */
  const jobFilledByWorker = async () => {
    const job = await quietTargetJob(f.engine, { cron: "0 0 1 1 *", timezone: "UTC" }, "allow");
    // Half past a second: no run's instant is an occurrence of the schedule, which a trigger
    // leaves to it.
    const start = Math.floor(Date.now() / 1_000) * 1_000 + 500;
    const before = MAX_LISTED_RUNS - WORKER_ROUND;
    const { quiet, lastLease } = await handOverQuietRuns(
      job,
      Array.from({ length: before }, (_, i) => start + i * 1_000),
    );
    const round = Math.floor((lastLease + ROUND_MS) / 1_000) * 1_000 + 500;
    const queued = await queueRuns(
      job,
      Array.from({ length: WORKER_ROUND }, (_, i) => round + i * 1_000),
    );
    for (const { at, run } of queued) {
      await processRun(workerAt(at), deliveryOfRun(at, run));
      quiet.push(run);
    }
    expect(handedOver.get(job.jobId)).toBe(WORKER_ROUND);
    const full = await getJob(f.engine, job.jobId);
    expect(Object.keys(full?.activeRuns ?? {})).toHaveLength(MAX_LISTED_RUNS);
    return { job, quiet, after: round + ROUND_MS };
  };

  /**
   * A job whose async target has taken over its most listed runs and gone quiet
   * (handOverQuietRuns), for the cases whose subject is what happens at a full list. The job is
   * created and its runs handed over at clocks from ten past the current hour, whatever the wall
   * clock reads (START_PAST_HOUR_MS). Returns the job, the runs, their items as handed over and an
   * instant at which every lease has lapsed.
   */
  const jobFullOfQuietRuns = async (
    schedule: { cron: string; timezone: string } = { cron: "0 0 1 1 *", timezone: "UTC" },
    overlap: "allow" | "skip" | "buffer_one" = "allow",
  ) => {
    // Half past a second: no instant of the runs is an occurrence of a cron schedule, which a
    // trigger leaves to the schedule.
    const start = Math.floor(Date.now() / HOUR_MS) * HOUR_MS + START_PAST_HOUR_MS + 500;
    const job = await quietTargetJob(engineAt(f.engine, start), schedule, overlap);
    const { quiet, items, lastLease } = await handOverQuietRuns(
      job,
      Array.from({ length: MAX_LISTED_RUNS }, (_, i) => start + i * 1_000),
    );
    const full = await getJob(f.engine, job.jobId);
    expect(Object.keys(full?.activeRuns ?? {})).toHaveLength(MAX_LISTED_RUNS);
    // The leases run from the hand-over, at the last run's instant and the time taken since.
    const { leaseMs } = f.engine.settings;
    const lapsed = Math.max(start + MAX_LISTED_RUNS * 1_000 + leaseMs, lastLease) + 1_000;
    return { job, quiet, items, after: lapsed };
  };

  /**
   * Their targets complete the runs: the first two through the API's completion (completeAsyncRun),
   * which writes the run alone and, with the job's next admission within the hour
   * (nextAdmissionSoon), leaves the job's item to it; the others' items are what that completion
   * made of the first's, put 25 to a request, the second so made equal to the one it wrote.
   * `items` are the runs' items as handed over (handOverQuietRuns).
   */
  const completeAll = async (
    at: Engine,
    runs: readonly Run[],
    items: ReadonlyMap<string, Item>,
  ) => {
    const [model, check] = runs;
    if (model === undefined || check === undefined) throw new Error("fewer than two runs");
    const handedOver = (run: Run) => items.get(run.runId) ?? {};
    // At one instant, so that the two endings' instants and durations are one.
    const instant = at.clock().getTime();
    const stopped: Engine = { ...at, clock: () => new Date(instant) };
    for (const run of [model, check])
      await completeAsyncRun(stopped, run.runId, tokens.get(run.runId) ?? "", {
        status: "succeeded",
      });
    const completed = writtenBetween(handedOver(model), await runItem(model));
    expect(withWritten(handedOver(check), completed)).toEqual(await runItem(check));
    await putRunsUnconditionally(
      f.engine,
      runs.slice(2).map((run) => withWritten(handedOver(run), completed)),
    );
  };

  it("stays bounded when a long-job target takes runs over and goes quiet: the next runs wait until a listed one ends; an edit and a cancel with 200 listed end them all", async () => {
    const { job, quiet, after: afterRounds } = await jobFilledByWorker();

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

    // Edited and cancelled with 200 listed: the cancel ends every one of them and lists none.
    const version = (await getJob(f.engine, job.jobId))?.version ?? job.version;
    const edited = await editJob(later, "tenant-a", job.jobId, version, { name: "renamed" });
    expect(edited).toMatchObject({ name: "renamed", version: version + 1 });
    expect(Object.keys(edited.activeRuns)).toHaveLength(MAX_LISTED_RUNS);
    expect((await cancelJob(later, "tenant-a", job.jobId)).status).toBe("CANCELLED");
    const statuses = new Map((await runsOf(job.jobId)).map((run) => [run.runId, run.status]));
    expect(new Set([...quiet, next].map((run) => statuses.get(run.runId)))).toEqual(
      new Set(["CANCELLED"]),
    );
    expect((await getJob(f.engine, job.jobId))?.activeRuns).toEqual({});
  }, 180_000);
  it("drops them all once they have ended, at the next admission or at a pause, though one write may not name them all", async () => {
    // The two endings side by side, each on a job of its own.
    const endings = ["admission", "pause"] as const;
    await Promise.all(
      endings.map(async (ending) => {
        // Hourly: its next run comes within the hour, so a run's ending leaves its entry and the
        // job's lastRun to that run's admission (nextAdmissionSoon), not writing the job.
        const { job, quiet, items, after } = await jobFullOfQuietRuns({
          cron: "0 * * * *",
          timezone: "UTC",
        });
        const [earliest] = quiet;
        if (earliest === undefined) throw new Error("no run handed over");
        expect(nextAdmissionSoon(job, earliest, new Date(after))).toBe(true);
        // Their targets complete them all.
        const later = engineAt(f.engine, after);
        await completeAll(later, quiet, items);
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
      }),
    );
  }, 300_000);
  it("under skip, skips while its 200 listed runs are under way and runs again once they have ended, with no operator", async () => {
    const { job, quiet, items, after } = await jobFullOfQuietRuns(
      { cron: "0 * * * *", timezone: "UTC" },
      "skip",
    );
    const [earliest] = quiet;
    if (earliest === undefined) throw new Error("no run handed over");
    expect(nextAdmissionSoon(job, earliest, new Date(after))).toBe(true);
    const later = engineAt(f.engine, after);
    const [skipped] = await triggerAndDeliver(later, job.jobId, 1);
    if (skipped === undefined) throw new Error("no run triggered");
    expect((await getRun(f.engine, skipped))?.status).toBe("SKIPPED");
    // Their targets complete them all; their endings leave their entries (hourly: an admission
    // comes within the hour), so the job lists 200 ended runs.
    await completeAll(later, quiet, items);
    expect(Object.keys((await getJob(f.engine, job.jobId))?.activeRuns ?? {})).toHaveLength(
      MAX_LISTED_RUNS,
    );
    const [next] = await triggerAndDeliver(later, job.jobId, 1);
    if (next === undefined) throw new Error("no run triggered");
    expect((await getRun(f.engine, next))?.status).toBe("RUNNING");
    expect(tokens.has(next.runId)).toBe(true);
    const left = Object.keys((await getJob(f.engine, job.jobId))?.activeRuns ?? {});
    expect(left).toContain(next.runId);
    expect(left.length).toBeLessThan(MAX_LISTED_RUNS);
  }, 300_000);
  it("under buffer_one, keeps one run in the waiting place while 200 listed runs are under way, and starts it once one ends", async () => {
    const { job, quiet, after } = await jobFullOfQuietRuns(
      { cron: "0 0 1 1 *", timezone: "UTC" },
      "buffer_one",
    );
    const later = engineAt(f.engine, after);
    const [waiting, second] = await triggerAndDeliver(later, job.jobId, 2);
    if (waiting === undefined || second === undefined) throw new Error("no run triggered");
    expect(await getRun(f.engine, waiting)).toMatchObject({
      status: "QUEUED",
      reason: "waiting: overlap policy buffer_one",
    });
    expect((await getRun(f.engine, second))?.status).toBe("SKIPPED");
    expect((await getJob(f.engine, job.jobId))?.bufferedRunId).toBe(waiting.runId);
    const [first] = quiet;
    if (first === undefined) throw new Error("no run handed over");
    await cancelRun(later, "tenant-a", job.jobId, first.runId);
    const requeued = await getRun(f.engine, waiting);
    if (requeued === null) throw new Error("the waiting run is gone");
    const recheck = engineAt(f.engine, Math.max(Date.parse(requeued.dueAt), after) + 1_000);
    await processRun(workerAt(recheck), deliveryOfRun(recheck, requeued));
    expect(tokens.has(waiting.runId)).toBe(true);
    const listed = await getJob(f.engine, job.jobId);
    expect(Object.keys(listed?.activeRuns ?? {})).toHaveLength(MAX_LISTED_RUNS);
    expect(listed?.bufferedRunId).toBeNull();
  }, 300_000);
  it("keeps a replay waiting while 200 listed runs are under way, ahead of the next first attempt, and runs it once one ends", async () => {
    const { job, quiet, after } = await jobFullOfQuietRuns();
    const later = engineAt(f.engine, after);
    // One of them dies: its place is taken by the next run, so the job lists 200 under way again.
    const [dead, first] = quiet;
    if (dead === undefined || first === undefined) throw new Error("no run handed over");
    await completeAsyncRun(later, dead.runId, tokens.get(dead.runId) ?? "", {
      status: "failed",
      retryable: false,
    });
    expect((await getRun(f.engine, dead))?.status).toBe("DEAD");
    const [taken] = await triggerAndDeliver(later, job.jobId, 1);
    if (taken === undefined) throw new Error("no run triggered");
    expect(tokens.has(taken.runId)).toBe(true);
    const { run: replay } = await replayDeadLetter(later, "tenant-a", dead.runId);
    await processRun(workerAt(later), deliveryOfRun(later, replay));
    expect(await getRun(f.engine, replay)).toMatchObject({
      status: "QUEUED",
      reason: "waiting: overlap policy allow",
    });
    expect((await getJob(f.engine, job.jobId))?.rerunWaiting).toBe(replay.runId);
    // A first attempt that comes meanwhile leaves it the place that frees.
    const [behind] = await triggerAndDeliver(later, job.jobId, 1);
    if (behind === undefined) throw new Error("no run triggered");
    expect((await getRun(f.engine, behind))?.status).toBe("QUEUED");
    await cancelRun(later, "tenant-a", job.jobId, first.runId);
    const waiting = await getRun(f.engine, replay);
    if (waiting === null) throw new Error("the replay is gone");
    const recheck = engineAt(f.engine, Math.max(Date.parse(waiting.dueAt), after) + 1_000);
    await processRun(workerAt(recheck), deliveryOfRun(recheck, waiting));
    expect(tokens.has(replay.runId)).toBe(true);
    const listed = await getJob(f.engine, job.jobId);
    expect(Object.keys(listed?.activeRuns ?? {})).toHaveLength(MAX_LISTED_RUNS);
    expect(listed?.activeRuns).toHaveProperty([replay.runId]);
    expect(listed?.rerunWaiting ?? null).toBeNull();
  }, 300_000);
  it("comes back within the bound from a list an earlier worker grew past it (docs/deploy.md)", async () => {
    const { job, quiet, after } = await jobFullOfQuietRuns();
    const later = engineAt(f.engine, after);
    // An earlier worker listed 65 more: 5 runs under way (queued again after their lease lapsed)
    // and 60 that have ended since (their items gone), 265 in all.
    const underWay = await Promise.all(
      Array.from({ length: 5 }, () => triggerJob(later, "tenant-a", job.jobId)),
    );
    const ended = Array.from({ length: 60 }, (_, i) =>
      runId(job.jobId, new Date(Date.UTC(2021, 0, 1) + i * 1000), 1),
    );
    const lapsed = new Date(after - ROUND_MS).toISOString();
    const extra = [...underWay.map((run) => run.runId), ...ended];
    await f.engine.doc.send(
      new UpdateCommand({
        TableName: f.engine.tables.jobs,
        Key: jobKey(job.jobId),
        UpdateExpression: `SET ${extra.map((_, i) => `activeRuns.#r${i} = :lapsed`).join(", ")}`,
        ExpressionAttributeNames: Object.fromEntries(extra.map((id, i) => [`#r${i}`, id])),
        ExpressionAttributeValues: { ":lapsed": lapsed },
      }),
    );
    const listedNow = async () =>
      Object.keys((await getJob(f.engine, job.jobId))?.activeRuns ?? {});
    expect(await listedNow()).toHaveLength(MAX_LISTED_RUNS + extra.length);
    // 205 under way: a run not listed waits.
    const [next] = await triggerAndDeliver(later, job.jobId, 1);
    if (next === undefined) throw new Error("no run triggered");
    expect((await getRun(f.engine, next))?.status).toBe("QUEUED");
    // 6 of them end: 199 under way, and the waiting run gets in, taking the ended ones out.
    for (const run of quiet.slice(0, underWay.length + 1))
      await cancelRun(later, "tenant-a", job.jobId, run.runId);
    const waiting = await getRun(f.engine, next);
    if (waiting === null) throw new Error("the waiting run is gone");
    const recheck = engineAt(f.engine, Math.max(Date.parse(waiting.dueAt), after) + 1_000);
    await processRun(workerAt(recheck), deliveryOfRun(recheck, waiting));
    expect(tokens.has(next.runId)).toBe(true);
    const listed = await listedNow();
    expect(listed).toHaveLength(MAX_LISTED_RUNS);
    expect(listed).toContain(next.runId);
    for (const id of ended) expect(listed).not.toContain(id);
  }, 300_000);
});
