import { expect } from "vitest";
import { claimDueEntry } from "../../shared/dispatch/claim.js";
import { NotReplayableError } from "../../shared/errors.js";
import { JobError, type JobHandler } from "../../shared/execution/job-contract.js";
import { processRun } from "../../shared/execution/worker.js";
import { cancelRun, createJob, editJob, replayDeadLetter } from "../../shared/jobs/index.js";
import { getTenantJob } from "../../shared/jobs/queries.js";
import type { DueEntry, Job, Run } from "../../shared/model.js";
import type { MisfirePolicy } from "../../shared/policies.js";
import { startRun } from "../../shared/storage/run-start.js";
import { SECOND, type useClaimRace } from "./claim-race.js";
import { deliveryOfRun, testJob } from "./engine-fixture.js";
import { dyingAtFailedEnding } from "./faults.js";

const HOUR = 3_600_000;

/**
 * A one-off's occurrence whose attempt 1 failed and attempt 2 was cancelled, run by attempt 3
 * (`attemptsOf`): as the files on filing it again after that cancel expect it.
 */
export const RAN_AT_ATTEMPT_3 = [
  [1, "FAILED"],
  [2, "CANCELLED"],
  [3, "SUCCEEDED"],
];

/**
 * A one-off's run that fails or dies while an edit moves the one-off away, and what the tests of
 * moving it back, its retries and its replays read: bound to one `useClaimRace`.
 */
export function useOneOffMoves(race: ReturnType<typeof useClaimRace>) {
  const { clock, claimOptions, seedOne, runsOf, fixture, entriesOf, withHooks, isRunPut } = race;

  const moveTo = (job: Job, version: number, at: Date) =>
    editJob(fixture().engine, job.tenantId, job.jobId, version, {
      schedule: { runAt: at.toISOString() },
    });

  /** The runs of the job's occurrence at `at`, [attempt, status], by attempt. */
  const attemptsOf = async (jobId: string, at: Date) =>
    (await runsOf(jobId))
      .filter((r) => r.scheduledFor === at.toISOString())
      .sort((a, b) => a.attempt - b.attempt)
      .map((r) => [r.attempt, r.status]);

  /**
   * A one-off due 5 s ago whose run, while it runs, has the job moved 10 minutes away (version 2)
   * and then dies of a non-retryable error: attempt 1 DEAD, on the dead-letter list, and the job
   * ACTIVE for its new time (the ending leaves a one-off moved meanwhile alone).
   */
  async function deadWhileMovedAway(jobId: string, misfire?: MisfirePolicy) {
    const f = fixture();
    const now = clock();
    const due = new Date(now.getTime() - 5 * SECOND);
    const away = new Date(now.getTime() + 600 * SECOND);
    const { job, entry } = await seedOne(jobId, { runAt: due.toISOString() }, due, now, misfire);
    expect((await claimDueEntry(f.engine, entry, claimOptions(now))).outcome).toBe("claimed");
    const [first] = await runsOf(jobId);
    if (!first) throw new Error("the claim queued no run");
    const dies = async () => {
      await moveTo(job, 1, away);
      throw new JobError("bad request", { retryable: false });
    };
    await f.process(f.workerDeps("w", { noop: dies }), deliveryOfRun(f.engine, first));
    expect(await attemptsOf(jobId, due)).toEqual([[1, "DEAD"]]);
    const moved = await getTenantJob(f.engine, job.tenantId, jobId);
    expect([moved.status, moved.version]).toEqual(["ACTIVE", 2]);
    const dead = (await runsOf(jobId)).find((r) => r.status === "DEAD");
    if (!dead) throw new Error("no dead run");
    return { job, due, away, dead };
  }

  /**
   * A one-off created due 5 s ago (up to 3 attempts, retries `retryApartMs` apart, an hour unless
   * told, misfire `misfire`): the job, its time and its first run, which the create queued.
   */
  async function retryingOneOff(misfire: MisfirePolicy = "fire_once", retryApartMs = HOUR) {
    const due = new Date(clock().getTime() - 5 * SECOND);
    const { job } = await createJob(
      fixture().engine,
      testJob({
        schedule: { runAt: due.toISOString() },
        policies: {
          ...testJob().policies,
          misfire,
          retry: { maxAttempts: 3, initialDelayMs: retryApartMs, maxDelayMs: retryApartMs },
        },
      }),
    );
    const [first] = await runsOf(job.jobId);
    if (!first) throw new Error("the create queued no run");
    return { job, due, first };
  }

  /**
   * A one-off due 5 s ago (retries `retryApartMs` apart, an hour unless told, `random` drawing the
   * backoff's jitter, misfire `misfire`) whose first run fails retryably: attempt 1 FAILED, its
   * next attempt filed (a retry entry for a draw near the top, a QUEUED run for one near 0); with
   * `retryable` false it dies: attempt 1 DEAD. With `moveAway`, the run, while it runs, has the job
   * moved 10 minutes away (version 2), and the job stays ACTIVE for its new time.
   */
  async function failedOnce(
    random: number,
    {
      moveAway = false,
      misfire = "fire_once" as MisfirePolicy,
      retryable = true,
      retryApartMs = HOUR,
    } = {},
  ) {
    const away = new Date(clock().getTime() + 600 * SECOND);
    const { job, due, first } = await retryingOneOff(misfire, retryApartMs);
    await failRun(first, {
      random,
      retryable,
      ...(moveAway ? { before: () => moveTo(job, 1, away) } : {}),
    });
    expect(await attemptsOf(job.jobId, due)).toContainEqual([1, retryable ? "FAILED" : "DEAD"]);
    return { job, due, away, first };
  }

  /**
   * A one-off whose attempt 1 failed while it was moved 10 minutes away: its retry, attempt 2,
   * QUEUED at the old time.
   */
  async function retryAtOldTime() {
    const { job, due } = await failedOnce(0, { moveAway: true });
    const retry = (await runsOf(job.jobId)).find((r) => r.attempt === 2);
    if (!retry) throw new Error("no retry");
    return { job, due, retry };
  }

  /** As `retryAtOldTime`, the retry running under worker-a. */
  async function retryRunningAtOldTime() {
    const { job, due, retry } = await retryAtOldTime();
    expect((await startRun(fixture().engine, retry, "worker-a", clock())).kind).toBe("started");
    return { job, due, retry };
  }

  /**
   * A recurring job (hourly) whose occurrence due 5 s ago, claimed, fails retryably (the backoff's
   * jitter drawn as 0): attempt 1 FAILED, attempt 2 a QUEUED run. `away`: 10 minutes on.
   */
  async function recurringFailedOnce(jobId: string) {
    const f = fixture();
    const now = clock();
    const due = new Date(now.getTime() - 5 * SECOND);
    const away = new Date(now.getTime() + 600 * SECOND);
    const schedule = { every: "PT1H", startAt: due.toISOString() };
    const { job, entry } = await seedOne(jobId, schedule, due, now);
    expect((await claimDueEntry(f.engine, entry, claimOptions(now))).outcome).toBe("claimed");
    const first = (await runsOf(jobId)).find((r) => r.scheduledFor === due.toISOString());
    if (!first) throw new Error("no first run");
    await failRun(first);
    return { job, due, away };
  }

  /**
   * Delivers `run` to a worker whose handler fails it (retryably unless told otherwise), the
   * backoff's jitter drawn as `random` (0: its least delay, a QUEUED run), after `before` in it.
   */
  async function failRun(
    run: Run,
    {
      random = 0,
      retryable = true,
      before,
    }: { random?: number; retryable?: boolean; before?: () => Promise<unknown> } = {},
  ) {
    const f = fixture();
    const failing = async () => {
      await before?.();
      throw new JobError(retryable ? "flaky" : "bad request", { retryable });
    };
    const deps = f.workerDeps("w", { noop: failing });
    await f.process(
      { ...deps, engine: { ...f.engine, random: () => random } },
      deliveryOfRun(f.engine, run),
    );
  }

  /** The worker's take-back of the next attempt it put (`RUN_AS_PUT`). */
  const isTakeBack = (input: Record<string, unknown>) =>
    input.TableName === fixture().engine.tables.runs &&
    String(input.ConditionExpression).includes("retryOf.fence = :fence");

  /**
   * Delivers `retry` (attempt 2 at `due`) to a worker whose handler cancels it through the API and
   * moves the job (version 2) back to `due`, then, with `fails`, fails it retryably (the backoff's
   * jitter drawn as 0): the edit's fast-path claim fails at its run's put (the entry waits for a
   * dispatcher), and the worker's take-back of its own attempt 3 (put before its refused ending)
   * fails too, leaving that attempt QUEUED. Without, the handler succeeds and no fault is made.
   * Returns how many faults were made.
   */
  async function cancelledAndMovedBack(job: Job, due: Date, retry: Run, fails: boolean) {
    const f = fixture();
    const handler = async () => {
      await cancelRun(f.engine, job.tenantId, job.jobId, retry.runId);
      await moveTo(job, 2, due);
      if (fails) throw new JobError("flaky", { retryable: true });
      return { ok: true };
    };
    const deps = f.workerDeps("w", { noop: handler });
    const faults = [
      { command: "PutItemCommand", when: isRunPut, fail: () => new Error("claim crashed") },
      { command: "UpdateItemCommand", when: isTakeBack, fail: () => new Error("throttled") },
    ];
    const { hooked } = await withHooks(fails ? faults : [], () =>
      f.process(
        { ...deps, engine: { ...f.engine, random: () => 0 } },
        deliveryOfRun(f.engine, retry),
      ),
    );
    return hooked;
  }

  /** The job's one retry entry, attempt 2's. */
  async function retryEntryOf(jobId: string): Promise<DueEntry> {
    const [retry, ...more] = (await entriesOf(jobId)).filter((e) => e.kind === "retry");
    if (!retry || more.length > 0) throw new Error(`expected one retry entry for ${jobId}`);
    expect(retry.attempt).toBe(2);
    return retry;
  }

  /**
   * A one-off due 5 s ago (up to 3 attempts, 1 s apart) whose attempt 1 fails, its worker dying
   * between attempt 2's put and the FAILED ending, and, delivered again, runs `meanwhile` (given
   * the job, its time and one 10 minutes on) and dies: attempt 1 DEAD, attempt 2 its retry, still
   * QUEUED. The job, its time, and a replay of the dead run that keeps what it answered (or threw).
   */
  async function deadWithRetryLeft(
    meanwhile: (job: Job, at: { readonly due: Date; readonly away: Date }) => Promise<unknown>,
  ) {
    const f = fixture();
    const due = new Date(clock().getTime() - 5 * SECOND);
    const away = new Date(clock().getTime() + 600 * SECOND);
    const { job } = await createJob(
      f.engine,
      testJob({
        schedule: { runAt: due.toISOString() },
        policies: {
          ...testJob().policies,
          retry: { maxAttempts: 3, initialDelayMs: 1000, maxDelayMs: 1000 },
        },
      }),
    );
    const [first] = await runsOf(job.jobId);
    if (!first) throw new Error("the create queued no run");
    const dying = dyingAtFailedEnding(f.engine);
    const flaky: JobHandler = async () => {
      throw new JobError("flaky", { retryable: true });
    };
    try {
      await expect(
        processRun(
          { ...f.workerDeps("dies", { noop: flaky }, 100), engine: dying.engine },
          deliveryOfRun(f.engine, first),
        ),
      ).rejects.toThrow("process died");
    } finally {
      dying.destroy();
    }
    const dies: JobHandler = async () => {
      await meanwhile(job, { due, away });
      throw new JobError("bad request", { retryable: false });
    };
    await f.process(f.workerDeps("w", { noop: dies }), deliveryOfRun(f.engine, first));
    expect(await attemptsOf(job.jobId, due)).toEqual([
      [1, "DEAD"],
      [2, "QUEUED"],
    ]);
    let replayed: unknown;
    const replay = async () => {
      replayed = await replayDeadLetter(f.engine, job.tenantId, first.runId).catch(
        (error: unknown) => error,
      );
    };
    return { f, job, due, replay, replayed: () => replayed };
  }

  /** A transaction that writes a run (a replay's) or updates the job (an edit's or resume's commit). */
  const transactionWith = (table: "runs" | "job") => (input: Record<string, unknown>) =>
    (
      (input.TransactItems as
        | { Put?: { TableName?: string }; Update?: { Key?: { pk?: unknown } } }[]
        | undefined) ?? []
    ).some((item) =>
      table === "runs"
        ? item.Put?.TableName === fixture().engine.tables.runs
        : String(item.Update?.Key?.pk).startsWith("JOB#"),
    );

  /** The occurrence ran once, as the last of `attempts`, and completed its one-off. */
  async function expectRanOnce(job: Job, due: Date, attempts: [number, string][]) {
    expect(await race.runsCalled(job.jobId)).toEqual([[due.toISOString(), 1]]);
    expect(await attemptsOf(job.jobId, due)).toEqual(attempts);
    expect((await getTenantJob(fixture().engine, job.tenantId, job.jobId)).status).toBe(
      "COMPLETED",
    );
  }

  /** The refusal of a replay of `runId` (with `key`): a NotReplayableError, and the reason it gives. */
  async function replayRefusal(job: Job, runId: string, key?: string): Promise<string> {
    const refused = await replayDeadLetter(fixture().engine, job.tenantId, runId, key).catch(
      (error: unknown) => error,
    );
    expect(refused).toBeInstanceOf(NotReplayableError);
    return String((refused as NotReplayableError).context.why);
  }

  return {
    moveTo,
    attemptsOf,
    deadWhileMovedAway,
    retryingOneOff,
    failedOnce,
    retryAtOldTime,
    retryRunningAtOldTime,
    recurringFailedOnce,
    failRun,
    retryEntryOf,
    replayRefusal,
    deadWithRetryLeft,
    transactionWith,
    expectRanOnce,
    cancelledAndMovedBack,
  };
}
