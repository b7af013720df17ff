import { afterAll, afterEach, beforeAll, beforeEach, expect } from "vitest";
import type { EngineSettings, OneOffClaimWrites } from "../../shared/config.js";
import type { ClaimOptions } from "../../shared/dispatch/claim.js";
import { horizonOf } from "../../shared/dispatch/dispatcher.js";
import { REAPER_SETTLE_MS, reap } from "../../shared/dispatch/reaper.js";
import type { JobContext } from "../../shared/execution/job-contract.js";
import type { DueEntry, Job, Run } from "../../shared/model.js";
import type { MisfirePolicy } from "../../shared/policies.js";
import type { ScheduleSpec } from "../../shared/schedule/index.js";
import { createEngineFixture, type EngineFixture } from "./engine-fixture.js";
import { seedJobs } from "./seed.js";

/**
 * What the tests of a claim meeting another writer between its run puts and its transaction
 * share: a fixture per test on one shard, with a clock the test moves, and hooks that act just
 * before a chosen request.
 */

export const SECOND = 1000;

/**
 * Both forms of a one-off's claim (`oneOffClaimWrites`), for files whose every case runs under
 * each: a deployment may run either, and a mixed deploy runs both.
 */
export const ONE_OFF_CLAIM_WRITES: readonly OneOffClaimWrites[] = ["transaction", "plain"];

const LEASE_MS = 60 * SECOND;

type Input = Record<string, unknown>;

export interface RequestHook {
  /** The SDK command's name, e.g. "TransactWriteItemsCommand". */
  readonly command: string;
  readonly when?: (input: Input) => boolean;
  /** Run once, before the request goes; it may throw, as a process dies there. */
  readonly before?: () => Promise<void>;
  /** The request throws this instead of being sent (a fault the emulator cannot produce). */
  readonly fail?: () => Error;
}

/**
 * Registers a fresh fixture per test (the reaper reads every run whose deadline passed, and its
 * cursor only moves on) and returns the helpers, bound to it. `settings` over the race's own:
 * `oneOffClaimWrites` for the files about a one-off's claim (called once per form, in a
 * `describe.each` over `ONE_OFF_CLAIM_WRITES`, for the files that run under both). With
 * `fixturePer: "file"`, one fixture serves the file's tests, for files that neither dispatch nor
 * reap (a pass or the reaper would meet the other tests' entries and runs) and whose tests each
 * use their own jobs; its clock then never goes back between tests.
 */
export function useClaimRace(
  settings: Partial<EngineSettings> = {},
  { fixturePer = "test" }: { fixturePer?: "test" | "file" } = {},
) {
  let fixture: EngineFixture | undefined;
  // The engine's clock, moved by the tests; it starts at the machine's, so SQS delays stay short.
  const time = { ms: Date.now() };
  const clock = () => new Date(time.ms);
  const create = async () => {
    fixture = await createEngineFixture({
      settings: {
        shardCount: 1,
        maxShardCount: 1,
        leaseMs: LEASE_MS,
        misfireGraceMs: LEASE_MS,
        ...settings,
      },
      clock,
    });
  };
  if (fixturePer === "file") {
    beforeAll(create);
    beforeEach(() => {
      time.ms = Math.max(time.ms, Date.now());
    });
    afterAll(() => fixture?.destroy());
  } else {
    beforeEach(async () => {
      time.ms = Date.now();
      await create();
    });
    afterEach(() => fixture?.destroy());
  }
  const fx = (): EngineFixture => {
    if (!fixture) throw new Error("no fixture outside a test");
    return fixture;
  };

  const claimOptions = (now: Date): ClaimOptions => ({
    now,
    horizonEnd: horizonOf(now, fx().engine.settings.lookaheadMs).end,
  });

  /** The job's due entries as they stand. */
  const entriesOf = async (jobId: string): Promise<DueEntry[]> =>
    (await fx().dueEntries()).filter((d) => d.jobId === jobId);

  async function entryOf(jobId: string): Promise<DueEntry> {
    const [entry, ...more] = await entriesOf(jobId);
    if (!entry || more.length > 0) throw new Error(`expected one due entry for ${jobId}`);
    return entry;
  }

  /** One job seeded with its due entry at `due` (its misfire policy `misfire`, else the default): the job and that entry. */
  async function seedOne(
    jobId: string,
    schedule: ScheduleSpec,
    due: Date,
    now: Date,
    misfire?: MisfirePolicy,
  ): Promise<{ job: Job; entry: DueEntry }> {
    const [job] = await seedJobs(
      fx(),
      [{ jobId, schedule, dueAt: due, ...(misfire ? { misfire } : {}) }],
      now,
    );
    if (!job) throw new Error("not seeded");
    return { job, entry: await entryOf(jobId) };
  }

  async function runsOf(jobId: string): Promise<Run[]> {
    return (await fx().runs())
      .filter((r) => r.jobId === jobId)
      .sort((a, b) => a.scheduledFor.localeCompare(b.scheduledFor));
  }

  /** Each hook acts once, on the first request it matches, while `work` runs. */
  async function withHooks<T>(
    hooks: readonly RequestHook[],
    work: () => Promise<T>,
  ): Promise<{ result: T; hooked: number }> {
    const name = "claimRaceHooks";
    const pending = [...hooks];
    let hooked = 0;
    const { doc } = fx().engine;
    doc.middlewareStack.add(
      (next, context) => async (args) => {
        const input = args.input as Input;
        const at = pending.findIndex(
          (h) => h.command === context.commandName && (h.when?.(input) ?? true),
        );
        const hook = at >= 0 ? pending.splice(at, 1)[0] : undefined;
        if (hook) {
          hooked++;
          await hook.before?.();
          if (hook.fail) throw hook.fail();
        }
        return next(args);
      },
      { step: "initialize", name },
    );
    try {
      return { result: await work(), hooked };
    } finally {
      doc.middlewareStack.remove(name);
    }
  }

  /** Runs `before` once, ahead of the first request of `command` that `when` accepts. */
  const withHook = <T>(
    command: string,
    before: () => Promise<void>,
    work: () => Promise<T>,
    when?: (input: Input) => boolean,
  ) => withHooks([{ command, before, ...(when ? { when } : {}) }], work);

  const isRunPut = (input: Input) => input.TableName === fx().engine.tables.runs;

  /**
   * The request a claim of a one-off sends after its run puts, its commit: with plain claims on
   * (`oneOffClaimWrites`), a plain update of its job (storage/claim-plain.ts); else the
   * transaction of the entry's delete and the job's update.
   */
  const plainClaims = settings.oneOffClaimWrites === "plain";
  const isJobUpdate = (input: Input) =>
    plainClaims
      ? input.TableName === fx().engine.tables.jobs &&
        String((input.Key as Input | undefined)?.pk).startsWith("JOB#")
      : ((input.TransactItems as { Update?: { Key?: Input } }[] | undefined) ?? []).some((item) =>
          String(item.Update?.Key?.pk).startsWith("JOB#"),
        );
  const ONE_OFF_COMMIT = plainClaims ? "UpdateItemCommand" : "TransactWriteItemsCommand";
  /** A delete of a due entry: the jobs table, a key that is not a job's. */
  const isEntryDelete = (input: Input) =>
    input.TableName === fx().engine.tables.jobs &&
    !String((input.Key as Input | undefined)?.pk).startsWith("JOB#");

  /** The commands the engine's client sends while `work` runs, by name. */
  async function commandsSent<T>(work: () => Promise<T>): Promise<{ result: T; sent: string[] }> {
    const sent: string[] = [];
    const stack = fx().engine.doc.middlewareStack;
    stack.add(
      (next, context) => async (args) => {
        sent.push(String(context.commandName));
        return next(args);
      },
      { step: "initialize", name: "commandsSent" },
    );
    try {
      return { result: await work(), sent };
    } finally {
      stack.remove("commandsSent");
    }
  }

  /** Every message of the job's runs the queue holds now, delivered; the handler's calls counted by occurrence. */
  async function deliverAll(jobId: string, calls: Map<string, number>): Promise<void> {
    const counting = async (ctx: JobContext) => {
      calls.set(ctx.scheduledFor, (calls.get(ctx.scheduledFor) ?? 0) + 1);
      return { ok: true };
    };
    const f = fx();
    const deps = f.workerDeps("worker", { noop: counting });
    // What was sent before: a message still in its SQS delay is waited for (receiveAll).
    const received = await f.receiveAll(f.engine.queues.normal);
    for (const message of received) {
      if (message.message.jobId === jobId) await f.process(deps, message);
    }
  }

  /** The job's runs the queue holds now, delivered: the handler's calls, [occurrence, count]. */
  async function runsCalled(jobId: string): Promise<[string, number][]> {
    const calls = new Map<string, number>();
    await deliverAll(jobId, calls);
    return [...calls];
  }

  /** Moves the clock past `at`'s reaper deadline (a lease after it, and the reaper's settle line). */
  const pastDeadlineOf = (at: Date) => {
    time.ms = Math.max(time.ms, at.getTime() + LEASE_MS + REAPER_SETTLE_MS + 2 * SECOND);
  };

  /**
   * Past `due`'s reaper deadline: the reaper re-sends `resent` of the job's runs, and no message of
   * them runs its handler.
   */
  async function expectNothingRunsPast(jobId: string, due: Date, resent = 0): Promise<void> {
    pastDeadlineOf(due);
    expect((await reap(fx().engine)).resent).toBe(resent);
    expect(await runsCalled(jobId)).toEqual([]);
  }

  return {
    fixture: fx,
    clock,
    time,
    claimOptions,
    entryOf,
    entriesOf,
    seedOne,
    runsOf,
    withHooks,
    withHook,
    isRunPut,
    isJobUpdate,
    isEntryDelete,
    ONE_OFF_COMMIT,
    commandsSent,
    deliverAll,
    runsCalled,
    pastDeadlineOf,
    expectNothingRunsPast,
  };
}
