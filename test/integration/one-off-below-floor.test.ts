import { describe, expect, it } from "vitest";
import { cancelJob, deleteJob, editJob, pauseJob } from "../../shared/jobs/index.js";
import type { Job, Run } from "../../shared/model.js";
import { getJob, getRun } from "../../shared/storage/run-reads.js";
import { useClaimRace } from "../support/claim-race.js";
import { dailyAwayFrom, deliveryOfRun } from "../support/engine-fixture.js";
import { withLostAnswers } from "../support/faults.js";
import { useOneOffMoves } from "../support/one-off-moves.js";
import { waitFor } from "../support/wait.js";

/**
 * A one-off's run below its floor (`oneOffFrom`) that a worker runs: a retry queued before an edit
 * made the job a one-off, or made it one again. A pause with running: "cancel", a job cancel and a
 * delete read a one-off's runs from its floor on and at the occurrences it keeps below it
 * (`oneOffBelow`), so the worker adds the run's occurrence to those before it runs the run, in one
 * write conditioned on the job as it read it.
 */

// A lease longer than the lookahead: a first delivery past a lookahead after its run's occurrence
// still holds its start unwritten (its first heartbeat comes before the run's reaper deadline).
// The tests share one fixture: none dispatches or reaps, and each seeds or creates its own job.
const race = useClaimRace({ leaseMs: 600_000 }, { fixturePer: "file" });
const { clock, time, runsOf, fixture, withHook } = race;
const { recurringFailedOnce, failedOnce, moveTo, retryingOneOff } = useOneOffMoves(race);

let seeded = 0;

/**
 * A recurring job's retry, still QUEUED when an edit made the job a one-off 10 minutes on; its id
 * `jobId` numbered, as the file's tests share a fixture.
 */
async function retryOfRecurringJob(jobId: string) {
  const { job, due, away } = await recurringFailedOnce(`${jobId}-${++seeded}`);
  const oneOff = await moveTo(job, job.version, away);
  return { job: oneOff, retry: await retryAt(job.jobId, due) };
}

/**
 * A one-off's retry at its `runAt`, still QUEUED when an edit made the job recurring and another a
 * one-off again, 10 minutes on: the second edit set the floor anew, after the retry's occurrence.
 */
async function retryOfEarlierOneOff() {
  const { job, due, away } = await failedOnce(0);
  const f = fixture();
  const recurring = await editJob(f.engine, job.tenantId, job.jobId, job.version, {
    schedule: dailyAwayFrom(clock()).schedule,
  });
  const oneOff = await moveTo(recurring, recurring.version, away);
  return { job: oneOff, retry: await retryAt(job.jobId, due) };
}

/** The job's attempt 2 at `due`, QUEUED, below the job's floor. */
async function retryAt(jobId: string, due: Date): Promise<Run> {
  const retry = (await runsOf(jobId)).find(
    (r) => r.attempt === 2 && r.scheduledFor === due.toISOString(),
  );
  if (!retry) throw new Error("no retry");
  expect(retry.status).toBe("QUEUED");
  const floor = (await getJob(fixture().engine, jobId))?.oneOffFrom;
  expect(Date.parse(floor ?? "")).toBeGreaterThan(due.getTime());
  return retry;
}

const STARTS = [
  ["written (a redelivery)", 2],
  ["held unwritten (a first delivery)", 1],
] as const;

/**
 * Delivers `run` (its message received `receiveCount` times) to a worker whose handler waits until
 * released; returns once the handler runs, or once the delivery ended without running it.
 */
async function deliverBlocked(run: Run, receiveCount: number, engine = fixture().engine) {
  const f = fixture();
  // Its message due (the worker would send it again rather than wait for it), and its occurrence
  // more than a lookahead back: below what a one-off's reads take in from now (`oneOffRunsFrom`).
  const pastLookahead = Date.parse(run.scheduledFor) + f.engine.settings.lookaheadMs + 1_000;
  time.ms = Math.max(time.ms, Date.parse(run.dueAt), pastLookahead);
  let called = 0;
  let release: () => void = () => undefined;
  const gate = new Promise<void>((resolve) => {
    release = resolve;
  });
  const blocked = async () => {
    called++;
    await gate;
  };
  const delivered = f.process(
    { ...f.workerDeps("w", { noop: blocked }), engine },
    {
      ...deliveryOfRun(f.engine, run),
      receiveCount,
    },
  );
  let ended = false;
  void delivered.finally(() => {
    ended = true;
  });
  await waitFor("the handler or the delivery's end", () => called > 0 || ended);
  return {
    called: () => called,
    finish: async () => {
      release();
      return delivered;
    },
  };
}

const ENDINGS = [
  ["a job cancel", (job: Job) => cancelJob(fixture().engine, job.tenantId, job.jobId)],
  ["a delete", (job: Job) => deleteJob(fixture().engine, job.tenantId, job.jobId)],
  [
    'a pause with running: "cancel"',
    (job: Job) => pauseJob(fixture().engine, job.tenantId, job.jobId, { running: "cancel" }),
  ],
] as const;

const CASES = [
  ["a recurring job's retry, queued before an edit made the job a one-off", retryOfRecurringJob],
  [
    "a one-off's retry, queued before edits made the job recurring and a one-off again",
    () => retryOfEarlierOneOff(),
  ],
] as const;

/** The run asked to cancel while it runs (its start written) or ended CANCELLED (held unwritten). */
async function expectReached(run: Run, receiveCount: number) {
  const now = await getRun(fixture().engine, run);
  if (receiveCount > 1) expect(now?.cancelRequestedAt ?? null).not.toBeNull();
  else expect(now?.status).toBe("CANCELLED");
}

describe.each(CASES)("%s, running below the floor", (_, setUp) => {
  // A pause with running: "cancel" lets a one-off's run whose start is held unwritten finish, as
  // it reads QUEUED (architecture.md, "While a start is unwritten"): not a case here.
  it.for(
    ENDINGS.flatMap(([ending, end]) =>
      STARTS.filter(([, receiveCount]) => receiveCount > 1 || !ending.startsWith("a pause")).map(
        ([start, receiveCount]) => [ending, start, receiveCount, end] as const,
      ),
    ),
  )("%s reaches it (its start %s)", async ([, , receiveCount, end]) => {
    const { job, retry } = await setUp("job-below-floor");
    const running = await deliverBlocked(retry, receiveCount);
    expect(running.called()).toBe(1);
    const started = await getRun(fixture().engine, retry);
    expect([started?.status, started?.fence]).toEqual(
      receiveCount > 1 ? ["RUNNING", 1] : ["QUEUED", 0],
    );
    const keptAsRun = (await getJob(fixture().engine, job.jobId))?.oneOffBelow;
    await end(job);
    await expectReached(retry, receiveCount);
    expect(await running.finish()).toBe("ack");
    expect((await getRun(fixture().engine, retry))?.status).toBe("CANCELLED");
    // The worker kept the run's occurrence on the job before the handler ran.
    expect(keptAsRun).toEqual([retry.scheduledFor]);
  });
});

/** The job write of a pause, a cancel or a delete: a transaction naming the job's status as read. */
const isJobEndingWrite = (input: Record<string, unknown>) =>
  JSON.stringify(input).includes(":seenStatus");
/** The worker's lowering of a one-off's floor: its run's occurrence kept below it, or the floor lowered. */
const isFloorLowering = (input: Record<string, unknown>) =>
  /SET (oneOffBelow = :below|oneOffFrom = :floor)/.test(String(input.UpdateExpression));

describe("a floor lowering racing a pause, a cancel or a delete", () => {
  it.each([
    ["a job cancel", ENDINGS[0][1]],
    ['a pause with running: "cancel"', ENDINGS[2][1]],
  ] as const)(
    "%s that read the job before the lowering and writes after it reads the job again and reaches the run",
    async (_, end) => {
      const { job, retry } = await retryOfRecurringJob("job-raced-ending");
      let running: Awaited<ReturnType<typeof deliverBlocked>> | undefined;
      const { hooked } = await withHook(
        "TransactWriteItemsCommand",
        async () => {
          running = await deliverBlocked(retry, 2);
        },
        () => end(job),
        isJobEndingWrite,
      );
      expect(hooked).toBe(1);
      expect(running?.called()).toBe(1);
      expect((await getRun(fixture().engine, retry))?.cancelRequestedAt ?? null).not.toBeNull();
      expect(await running?.finish()).toBe("ack");
      expect((await getRun(fixture().engine, retry))?.status).toBe("CANCELLED");
    },
  );

  it.each([
    ["a job cancel", ENDINGS[0][1], "CANCELLED"],
    ["a pause", (job: Job) => pauseJob(fixture().engine, job.tenantId, job.jobId), "QUEUED"],
  ] as const)(
    "%s written between the worker's read and its lowering: the worker decides again, and the run does not run",
    async (_, end, status) => {
      const { job, retry } = await retryOfRecurringJob("job-raced-lowering");
      let running: Awaited<ReturnType<typeof deliverBlocked>> | undefined;
      const { hooked } = await withHook(
        "UpdateItemCommand",
        async () => {
          await end(job);
        },
        async () => {
          running = await deliverBlocked(retry, 2);
        },
        isFloorLowering,
      );
      expect(hooked).toBe(1);
      expect(running?.called()).toBe(0);
      expect(await running?.finish()).toBe("ack");
      expect((await getRun(fixture().engine, retry))?.status).toBe(status);
      // Parked, its floor and what it keeps below it left as the pause found them.
      const after = await getJob(fixture().engine, job.jobId);
      if (status === "QUEUED") expect(Object.keys(after?.parkedRuns ?? {})).toEqual([retry.runId]);
      expect(after?.oneOffFrom).toBe(job.oneOffFrom);
      expect(after?.oneOffBelow).toEqual(job.oneOffBelow);
    },
  );
});

describe("a run at or above its one-off's floor", () => {
  it("a one-off's retry at its own runAt (its floor) runs with no write of the job's floor", async () => {
    const { job, due } = await failedOnce(0);
    const retry = (await runsOf(job.jobId)).find((r) => r.attempt === 2);
    if (!retry) throw new Error("no retry");
    expect(job.oneOffFrom).toBe(due.toISOString());
    let running: Awaited<ReturnType<typeof deliverBlocked>> | undefined;
    const { hooked } = await withHook(
      "UpdateItemCommand",
      async () => undefined,
      async () => {
        running = await deliverBlocked(retry, 2);
        return running.finish();
      },
      isFloorLowering,
    );
    expect(hooked).toBe(0);
    expect(running?.called()).toBe(1);
    const after = await getJob(fixture().engine, job.jobId);
    expect([after?.oneOffFrom, after?.oneOffBelow]).toEqual([job.oneOffFrom, job.oneOffBelow]);
  });
});

describe("a floor lowering whose answer is lost, the SDK sending it again", () => {
  it.each([
    ["nothing", async () => undefined, 1, "SUCCEEDED"],
    [
      "a job cancel",
      (job: Job) => cancelJob(fixture().engine, job.tenantId, job.jobId),
      0,
      "CANCELLED",
    ],
  ] as const)(
    "%s landing in between: the SDK's repeat fails, the job is read again, and the run runs at most once",
    async (_, meanwhile, calls, status) => {
      const { job, retry } = await retryOfRecurringJob("job-lowering-answer-lost");
      const lossy = withLostAnswers(fixture().engine, {
        operation: "UpdateItem",
        times: 1,
        match: isFloorLowering,
        meanwhile: () => meanwhile(job),
      });
      try {
        const running = await deliverBlocked(retry, 2, lossy.engine);
        expect(running.called()).toBe(calls);
        expect(await running.finish()).toBe("ack");
      } finally {
        lossy.destroy();
      }
      expect(lossy.injected.count).toBe(1);
      expect((await getRun(fixture().engine, retry))?.status).toBe(status);
      expect((await getJob(fixture().engine, job.jobId))?.oneOffBelow).toEqual([
        retry.scheduledFor,
      ]);
    },
  );
});

/** A one-off's run under way (started at its redelivery, its handler held): its job and the run. */
const UNDER_WAY = [
  [
    "a run below the floor, its worker having lowered the floor to it",
    async () => {
      const { job, retry } = await retryOfRecurringJob("job-under-way");
      return { job, run: retry };
    },
  ],
  [
    "a one-off's own run, its runAt by then more than a lookahead back",
    async () => {
      const { job, first } = await retryingOneOff();
      return { job, run: first };
    },
  ],
] as const;

/** Edits that, while the run runs, make its job recurring, and again a one-off 10 minutes on. */
const EDITS = [
  ["an edit makes the job recurring", false],
  ["edits make the job recurring and a one-off again", true],
] as const;

describe.for(UNDER_WAY)("%s, unlisted", ([, underWay]) => {
  it.for(
    EDITS.flatMap(([edits, again]) =>
      ENDINGS.map(([ending, end]) => [edits, ending, again, end] as const),
    ),
  )("%s, then %s reaches it", async ([, , again, end]) => {
    const { job, run } = await underWay();
    const running = await deliverBlocked(run, 2);
    expect(running.called()).toBe(1);
    const f = fixture();
    const recurring = await editJob(f.engine, job.tenantId, job.jobId, job.version, {
      schedule: dailyAwayFrom(clock()).schedule,
    });
    const edited = again
      ? await moveTo(recurring, recurring.version, new Date(clock().getTime() + 600_000))
      : recurring;
    await end(edited);
    expect((await getRun(f.engine, run))?.cancelRequestedAt ?? null).not.toBeNull();
    expect(await running.finish()).toBe("ack");
    expect((await getRun(f.engine, run))?.status).toBe("CANCELLED");
  });
});
