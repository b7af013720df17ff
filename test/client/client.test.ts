import { randomBytes } from "node:crypto";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, expectTypeOf, it } from "vitest";
import {
  FINAL_RUN_STATUSES,
  isSchedulerApiError,
  type NewJob,
  type Run,
  SchedulerApiError,
  SchedulerClient,
  VersionConflictError,
  WaitTimeoutError,
} from "../../client/index.js";
import { sleep } from "../../shared/clock.js";
import { type SandboxProcess, spawnSandbox } from "../support/sandbox-process.js";
import { waitFor } from "../support/wait.js";

/**
 * The typed client against the sandbox (`npm start` as a child process), over
 * HTTP only: every method, the job handle, paging, waiting, and errors typed
 * by their code.
 */
const KEY = "client-key";
const OTHER_KEY = "client-other-key";
let sandbox: SandboxProcess;
let client: SchedulerClient;

beforeAll(async () => {
  sandbox = await spawnSandbox({
    prefix: `client-${randomBytes(4).toString("hex")}`,
    tickSeconds: 1,
    workers: 8,
    env: {
      SCHEDULER_API_KEYS: `${KEY}=client-tenant,${OTHER_KEY}=other-tenant`,
      LOOKAHEAD_SECONDS: "60",
      // The shortest lease: the heartbeat, which carries a cancel to a running run, every 2 s rather than 10 s.
      LEASE_SECONDS: "6",
    },
  });
  client = new SchedulerClient({ baseUrl: sandbox.url, auth: { kind: "bearer", key: KEY } });
}, 120_000);

afterAll(async () => {
  await sandbox?.stop();
}, 30_000);

const inSeconds = (seconds: number) => new Date(Date.now() + seconds * 1000).toISOString();
const later = () => ({ runAt: inSeconds(86_400) });

async function caught(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error("expected a rejection");
}

/*
 * The groups run side by side (vitest's maxConcurrency, five at a time, and their tests with
 * them): each test has jobs of its own (the other tenant's three only in "errors and tenants"),
 * and most of its time is waiting for runs to come due and end.
 */
describe.concurrent("the package", () => {
  it('exports the client as "serverless-scheduler/client"', async () => {
    const exported = await import("serverless-scheduler/client");
    expect(exported.SchedulerClient).toBe(SchedulerClient);
  });

  it("types a job's payload by its type, as the document's JobPayloads declares it", () => {
    type PayloadOf<T extends NewJob["type"]> = Extract<NewJob, { type: T }>["payload"];
    expectTypeOf<PayloadOf<"sleep">>().toEqualTypeOf<{ ms?: number } | null | undefined>();
    expectTypeOf<PayloadOf<"fail">>().toEqualTypeOf<
      { retryable?: boolean; times?: number } | null | undefined
    >();
    const schedule = { runAt: "2030-01-15T09:00:00Z" };
    expectTypeOf({ type: "sleep" as const, schedule, payload: { ms: 5 } }).toExtend<NewJob>();
    expectTypeOf({ type: "sleep" as const, schedule, payload: { ms: "5" } }).not.toExtend<NewJob>();
  });

  it("reaches the API without credentials for GET /health", async () => {
    const anonymous = new SchedulerClient({ baseUrl: `${sandbox.url}/`, auth: { kind: "none" } });
    await expect(anonymous.health()).resolves.toEqual({ status: "ok" });
  });
});

describe.concurrent("a job handle", () => {
  it("create returns a handle with the job; the same idempotency key returns the same job", async () => {
    const body = { name: "report", type: "noop", schedule: later() } as const;
    const handle = await client.jobs.create(body, { idempotencyKey: "client-report-1" });
    expect(handle.created).toBe(true);
    expect(handle.job).toMatchObject({ id: handle.id, name: "report", status: "active" });
    const again = await client.jobs.create(body, { idempotencyKey: "client-report-1" });
    expect(again.created).toBe(false);
    expect(again.id).toBe(handle.id);
    // A handle that only read the job, or was made from its id, created nothing.
    expect((await client.jobs.get(handle.id)).created).toBe(false);
    expect(client.jobs.handle(handle.id).created).toBe(false);
    const other = await caught(
      client.jobs.create({ ...body, name: "other" }, { idempotencyKey: "client-report-1" }),
    );
    expect(isSchedulerApiError(other, "idempotency_conflict")).toBe(true);
  });

  it("createBatch answers each job in order: created, the key's earlier job, or why not; a bad envelope throws", async () => {
    const jobs = [
      { type: "noop", name: "batch a", schedule: later() },
      { type: "noop", name: "batch b", schedule: later(), idempotencyKey: "client-batch-b" },
      { type: "noop", schedule: { cron: "0 9 * * *", timezone: "Mars/Olympus" } },
    ] as const;
    const first = await client.jobs.createBatch(jobs);
    expect(first.map((r) => [r.index, r.status])).toEqual([
      [0, 201],
      [1, 201],
      [2, 400],
    ]);
    expect(first[0]?.job).toMatchObject({ name: "batch a", status: "active" });
    expect(first[2]?.error).toMatchObject({
      code: "validation_failed",
      field: "schedule.timezone",
    });
    const again = await client.jobs.createBatch([jobs[1]]);
    expect(again).toEqual([{ index: 0, status: 200, job: first[1]?.job }]);
    const empty = await caught(client.jobs.createBatch([]));
    expect(isSchedulerApiError(empty, "validation_failed") && empty.field).toBe("jobs");
  });

  it("pause, resume, trigger, cancel; each answer updates the handle's job", async () => {
    const handle = await client.jobs.create({ type: "noop", schedule: later() });
    expect((await handle.pause()).status).toBe("paused");
    expect(handle.job?.status).toBe("paused");
    expect((await handle.resume()).status).toBe("active");
    const run = await handle.trigger();
    expect(run).toMatchObject({ jobId: handle.id, status: "queued", attempt: 1 });
    const keyed = await handle.trigger({ idempotencyKey: "client-retry" });
    expect((await handle.trigger({ idempotencyKey: "client-retry" })).runId).toBe(keyed.runId);
    expect(keyed.runId).not.toBe(run.runId);
    expect((await handle.cancel()).status).toBe("cancelled");
    expect((await client.jobs.get(handle.id)).job?.status).toBe("cancelled");

    const refused = await caught(handle.resume());
    expect(refused).toBeInstanceOf(SchedulerApiError);
    if (!isSchedulerApiError(refused, "illegal_transition")) throw refused;
    expect(refused.status).toBe(409);
    expect(refused.currentStatus).toBe("cancelled");
  });

  it("delete removes the job; its runs stay readable; a repeat is not_found", async () => {
    // Its run outlasts the delete that cancels it (a noop could end first, SUCCEEDED).
    const handle = await client.jobs.create({
      type: "sleep",
      payload: { ms: 5000 },
      schedule: later(),
    });
    const run = await handle.trigger();
    expect(await handle.delete()).toBe("deleted");
    expect(isSchedulerApiError(await caught(handle.get()), "not_found")).toBe(true);
    expect((await handle.run(run.runId)).status).toBe("cancelled");
    const gone = await caught(handle.delete());
    if (!isSchedulerApiError(gone, "not_found")) throw gone;
    expect(gone.status).toBe(404);
  });

  it("edit sends the version the handle last saw; a stale one is a VersionConflictError", async () => {
    const handle = await client.jobs.create({ type: "noop", schedule: later() });
    const edited = await handle.edit({ name: "renamed" });
    expect(edited).toMatchObject({ name: "renamed", version: 2 });
    // Another client changes the job: this handle's version (2) is now stale.
    await client.jobs.handle(handle.id).edit({ name: "by someone else" });
    const conflict = await caught(handle.edit({ name: "mine" }));
    expect(conflict).toBeInstanceOf(VersionConflictError);
    if (!(conflict instanceof VersionConflictError)) throw conflict;
    expect(conflict).toMatchObject({
      status: 412,
      code: "version_mismatch",
      field: "If-Match",
      expectedVersion: 2,
      currentVersion: 3,
    });
    // Read again, decide, and edit at that version.
    await handle.get();
    expect((await handle.edit({ name: "mine" })).version).toBe(4);
    expect((await handle.edit({ name: "explicit" }, { version: 4 })).name).toBe("explicit");
  });

  it("runs() iterates over every page of the job's runs", async () => {
    // Every second, with a minute of lookahead: the first pass queues about 60 runs.
    const handle = await client.jobs.create({ type: "noop", schedule: { every: "PT1S" } });
    let firstPage: Run[] = [];
    for (let tries = 0; tries < 100 && firstPage.length < 30; tries++) {
      await sleep(200);
      firstPage = (await client.runs.page(handle.id, { limit: 100 })).items;
    }
    await handle.pause();
    const byPages = async () => {
      const runs: Run[] = [];
      let cursor: string | undefined;
      do {
        const page = await client.runs.page(handle.id, {
          limit: 100,
          ...(cursor ? { cursor } : {}),
        });
        runs.push(...page.items);
        cursor = page.nextCursor ?? undefined;
      } while (cursor);
      return runs.map((run) => run.runId);
    };
    // A pass that read the job before the pause may still put the runs of its claim after it
    // (docs/architecture.md, the claim): compared once the history holds still around the iteration.
    let before: string[] = [];
    let after: string[] = [];
    let iterated: Run[] = [];
    for (let tries = 0; tries < 10 && (tries === 0 || before.join() !== after.join()); tries++) {
      before = await byPages();
      iterated = [];
      for await (const run of handle.runs({ pageSize: 7 })) iterated.push(run);
      after = await byPages();
    }
    expect(iterated.length).toBeGreaterThan(7 * 3);
    expect(iterated.map((run) => run.runId)).toEqual(after);
    expect(new Set(iterated.map((run) => run.runId)).size).toBe(iterated.length);
    await handle.cancel();
  });

  it("runs() filters by status and occurrence range on the server", async () => {
    // Every second, with a minute of lookahead: queued runs lie ahead of the finished ones.
    const handle = await client.jobs.create({ type: "noop", schedule: { every: "PT1S" } });
    const firstOf = async (options: Parameters<typeof handle.runs>[0]) => {
      const runs: Run[] = [];
      for await (const run of handle.runs(options)) if (runs.push(run) >= 3) break;
      return runs;
    };
    let succeeded: Run[] = [];
    for (let tries = 0; tries < 100 && succeeded.length < 3; tries++) {
      await sleep(200);
      succeeded = await firstOf({ status: "succeeded", pageSize: 3 });
    }
    expect(succeeded.map((run) => run.status)).toEqual(["succeeded", "succeeded", "succeeded"]);
    const now = new Date();
    const past = await firstOf({ to: now, pageSize: 2 });
    expect(past).toHaveLength(3);
    for (const run of past) expect(Date.parse(run.scheduledFor)).toBeLessThan(now.getTime());
    const queued = await firstOf({ status: ["queued"], from: now });
    for (const run of queued) {
      expect(run.status).toBe("queued");
      expect(Date.parse(run.scheduledFor)).toBeGreaterThanOrEqual(now.getTime());
    }
    const range = { from: succeeded[2]?.scheduledFor ?? "", to: succeeded[0]?.scheduledFor ?? "" };
    // A run between those three that was still under way when they were read (a slow second on a
    // loaded machine) ends in the range too: the filtered listing is judged once every run of the
    // range, read whole, has ended, against the ones that ended succeeded or failed.
    const ids = (runs: Run[]) => runs.map((run) => run.runId);
    let inRange: Run[] = [];
    for (let tries = 0; tries < 100; tries++) {
      inRange = [];
      for await (const run of handle.runs(range)) inRange.push(run);
      if (inRange.every((run) => FINAL_RUN_STATUSES.includes(run.status))) break;
      await sleep(200);
    }
    const between = await firstOf({ status: ["succeeded", "failed"], ...range });
    const ended = inRange.filter((run) => run.status === "succeeded" || run.status === "failed");
    expect(ids(between)).toEqual(ids(ended).slice(0, 3));
    expect(ids(between)).toEqual(
      expect.arrayContaining([succeeded[1]?.runId, succeeded[2]?.runId]),
    );
    expect(ids(between)).not.toContain(succeeded[0]?.runId);
    const error = await caught(firstOf({ from: "yesterday" }));
    expect(isSchedulerApiError(error, "validation_failed") && error.field).toBe("from");
    await handle.cancel();
  });

  it("preview from an instant: a DST night months ahead", async () => {
    // Berlin springs forward on 2030-03-31; 02:30 does not exist that night.
    const schedule = { cron: "30 2 * * *", timezone: "Europe/Berlin" };
    const handle = await client.jobs.create({ type: "noop", schedule });
    const from = new Date("2030-03-30T12:00:00Z");
    const ofJob = await handle.preview(2, from);
    const checked = await client.schedules.preview(schedule, 2, "2030-03-30T13:00:00+01:00");
    for (const preview of [ofJob, checked])
      expect(preview.occurrences).toEqual([
        { utc: "2030-03-31T01:30:00.000Z", local: "2030-03-31T03:30:00.000+02:00" },
        { utc: "2030-04-01T00:30:00.000Z", local: "2030-04-01T02:30:00.000+02:00" },
      ]);
    await handle.cancel();
  });

  it("preview gives the job's next occurrences in its zone", async () => {
    const handle = await client.jobs.create({
      type: "noop",
      schedule: { cron: "0 9 * * 1-5", timezone: "Europe/Berlin" },
    });
    const preview = await handle.preview(3);
    expect(preview.timezone).toBe("Europe/Berlin");
    expect(preview.occurrences).toHaveLength(3);
    for (const occurrence of preview.occurrences)
      expect(occurrence.local).toMatch(/T09:00:00\.000\+0[12]:00$/);
    await handle.cancel();
  });
});

describe.concurrent("waiting for runs", () => {
  it("waitForRun() returns the job's next run once it ends", async () => {
    const handle = await client.jobs.create({ type: "noop", schedule: { runAt: inSeconds(2) } });
    const run = await handle.waitForRun({ timeoutMs: 30_000, pollMs: 200 });
    expect(run).toMatchObject({ jobId: handle.id, status: "succeeded", attempt: 1 });
    expect(await handle.run(run.runId)).toEqual(run);
  });

  it("waitForRun({ runId }) follows a triggered run; client.waitForRun takes ids", async () => {
    const handle = await client.jobs.create({ type: "noop", schedule: later() });
    const queued = await handle.trigger();
    const ended = await handle.waitForRun({ runId: queued.runId, timeoutMs: 30_000, pollMs: 200 });
    expect(ended).toMatchObject({ runId: queued.runId, status: "succeeded" });
    const again = await client.waitForRun(handle.id, queued.runId, { timeoutMs: 1000 });
    expect(again.status).toBe("succeeded");
  });

  it("gives up with a WaitTimeoutError that carries the run as last seen", async () => {
    const handle = await client.jobs.create({
      type: "sleep",
      payload: { ms: 20_000 },
      schedule: later(),
    });
    const queued = await handle.trigger();
    const error = await caught(
      handle.waitForRun({ runId: queued.runId, timeoutMs: 600, pollMs: 100 }),
    );
    expect(error).toBeInstanceOf(WaitTimeoutError);
    expect(["queued", "running"]).toContain((error as WaitTimeoutError).lastSeen?.status);
    expect((error as Error).message).toMatch(
      /timed out after 600 ms waiting for run .* \(last seen (queued|running)\)/,
    );
    // An aborted signal ends the wait at once, with the signal's reason.
    const stop = new AbortController();
    const waiting = handle.waitForRun({ runId: queued.runId, pollMs: 60_000, signal: stop.signal });
    setTimeout(() => stop.abort(new Error("stopped by the caller")), 200);
    const started = Date.now();
    await expect(waiting).rejects.toThrow("stopped by the caller");
    expect(Date.now() - started).toBeLessThan(10_000);
    await handle.cancel();
  });
});

describe.concurrent("cancelling runs", () => {
  it("cancelRun() on a running run answers it with cancelRequestedAt; it ends cancelled; a repeat answers it again", async () => {
    const handle = await client.jobs.create({
      type: "sleep",
      payload: { ms: 60_000 },
      schedule: later(),
    });
    const queued = await handle.trigger();
    await handle.waitForRun({ runId: queued.runId, until: ["running"], timeoutMs: 20_000 });
    const asked = await handle.cancelRun(queued.runId);
    expect(asked).toMatchObject({ status: "running", cancelledBy: "api" });
    expect(asked.cancelRequestedAt).not.toBeNull();
    const ended = await handle.waitForRun({ runId: queued.runId, timeoutMs: 15_000, pollMs: 200 });
    expect(ended).toMatchObject({ status: "cancelled", cancelledBy: "api" });
    // A repeat (a retry whose first answer was lost) answers the run as it ended.
    expect(await handle.cancelRun(queued.runId)).toEqual(ended);
    await handle.cancel();
  }, 40_000);

  it("pause({ running: 'cancel' }) cancels the run in progress; cancelRun() of a queued run is immediate", async () => {
    const handle = await client.jobs.create({
      type: "sleep",
      payload: { ms: 60_000 },
      schedule: later(),
    });
    const first = await handle.trigger();
    await handle.waitForRun({ runId: first.runId, until: ["running"], timeoutMs: 20_000 });
    expect((await handle.pause({ running: "cancel" })).status).toBe("paused");
    expect(handle.job?.status).toBe("paused");
    const ended = await handle.waitForRun({ runId: first.runId, timeoutMs: 15_000, pollMs: 200 });
    expect(ended).toMatchObject({ status: "cancelled", cancelledBy: "pause" });

    // Due inside the lookahead: the create queued its run at once.
    const other = await client.jobs.create({ type: "noop", schedule: { runAt: inSeconds(30) } });
    const queued: Run[] = [];
    for await (const run of other.runs()) queued.push(run);
    expect(queued.map((r) => r.status)).toEqual(["queued"]);
    const cancelled = await other.cancelRun(queued[0]?.runId ?? "");
    expect(cancelled).toMatchObject({ status: "cancelled", cancelledBy: "api" });
    expect((await other.get()).status).toBe("completed");
  }, 40_000);
});

describe.concurrent("dead letters, schedules, the webhook secret", () => {
  it("lists a dead run and replays it once; a second replay is not_replayable", async () => {
    const handle = await client.jobs.create({
      type: "fail",
      payload: { times: 1, retryable: false },
      schedule: { runAt: inSeconds(1) },
    });
    // Read from the job's runs, not waitForRun(): that waits for a run that had not ended when
    // it began, and on a loaded machine this run (due a second after the create was sent) could
    // be dead before its first poll, which then waited out its timeout.
    const dead = await waitFor(
      "the job's run to be dead",
      async () => {
        for await (const run of handle.runs()) if (run.status === "dead") return run;
        return undefined;
      },
      30_000,
      200,
    );
    const letters: Run[] = [];
    for await (const run of client.deadLetters.list({ pageSize: 1 })) letters.push(run);
    expect(letters.map((run) => run.runId)).toContain(dead.runId);
    const replayed = await client.deadLetters.replay(dead.runId);
    expect(replayed).toMatchObject({ jobId: handle.id, attempt: 2 });
    const ended = await handle.waitForRun({ runId: replayed.runId, timeoutMs: 30_000 });
    expect(ended.status).toBe("succeeded");
    const twice = await caught(client.deadLetters.replay(dead.runId));
    expect(isSchedulerApiError(twice, "not_replayable")).toBe(true);
  });

  it("previews a schedule, and a bad one is a validation error naming the field", async () => {
    const preview = await client.schedules.preview(
      { cron: "30 9 * * MON-FRI", timezone: "Europe/Berlin" },
      2,
    );
    expect(preview.occurrences).toHaveLength(2);
    const error = await caught(client.schedules.preview({ cron: "0 9 * * *", timezone: "CET" }));
    if (!isSchedulerApiError(error, "validation_failed")) throw error;
    expect(error.status).toBe(400);
    expect(error.field).toBe("schedule.timezone");
    expect(error.issues.map((issue) => issue.field)).toContain("schedule.timezone");
  });

  it("reads and rotates the webhook secret", async () => {
    const first = await client.webhookSecret.get();
    expect(first).toMatch(/^whsec_/);
    expect(await client.webhookSecret.get()).toBe(first);
    const rotated = await client.webhookSecret.rotate();
    expect(rotated).not.toBe(first);
    expect(await client.webhookSecret.get()).toBe(rotated);
    // The caller's own key: sent again, it answers the same secret and rotates nothing.
    const idempotencyKey = `client-rotate-${randomBytes(4).toString("hex")}`;
    const keyed = await client.webhookSecret.rotate({ idempotencyKey });
    expect(keyed).not.toBe(rotated);
    expect(await client.webhookSecret.rotate({ idempotencyKey })).toBe(keyed);
    expect(await client.webhookSecret.get()).toBe(keyed);
  });
});

describe.concurrent("long jobs: an async target", () => {
  it("takes its run over with 202, heartbeats and completes it with runHeartbeat and completeRun", async () => {
    const handedOver: Record<string, string>[] = [];
    const server = createServer((request, response) => {
      request.resume();
      request.on("end", () => {
        const header = (name: string) => String(request.headers[name] ?? "");
        handedOver.push({
          runId: header("x-scheduler-run-id"),
          token: header("x-scheduler-run-token"),
          heartbeatUrl: header("x-scheduler-heartbeat-url"),
        });
        response.writeHead(202).end();
      });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    try {
      const { port } = server.address() as AddressInfo;
      const handle = await client.jobs.create({
        type: "http",
        schedule: { runAt: inSeconds(1) },
        target: { url: `http://127.0.0.1:${port}/long`, mode: "async" },
        timeoutSeconds: 7200,
      });
      const deadline = Date.now() + 20_000;
      while (handedOver.length === 0 && Date.now() < deadline) await sleep(50);
      const [handOff] = handedOver;
      if (handOff === undefined) throw new Error("the target was never called");
      // The worker records the hand-over once the 202 has reached it, a moment after the target sent it.
      let running = await handle.run(handOff.runId ?? "");
      while (running.handedOverAt === undefined && Date.now() < deadline) {
        await sleep(50);
        running = await handle.run(handOff.runId ?? "");
      }
      expect(running).toMatchObject({ status: "running", fence: 1 });
      expect(running.handedOverAt).toBeDefined();
      expect(handOff.heartbeatUrl).toBe(`${sandbox.url}/runs/${running.runId}/heartbeat`);

      // The target holds no tenant credentials: only its run token.
      const target = new SchedulerClient({ baseUrl: sandbox.url, auth: { kind: "none" } });
      const beat = await target.runHeartbeat(running.runId, handOff.token ?? "");
      expect(Date.parse(beat.leaseUntil)).toBeGreaterThan(Date.now());
      const done = await target.completeRun(running.runId, handOff.token ?? "", {
        status: "succeeded",
      });
      expect(done).toMatchObject({ runId: running.runId, status: "succeeded" });
      const stale = await caught(target.runHeartbeat(running.runId, handOff.token ?? ""));
      expect(isSchedulerApiError(stale, "stale_run_token")).toBe(true);
      const forged = await caught(target.runHeartbeat(running.runId, "rt1.e30.AAAA"));
      expect(isSchedulerApiError(forged, "unauthorized")).toBe(true);
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });
});

describe.concurrent("errors and tenants", () => {
  it("lists only the caller's jobs, over pages, filtered by status", async () => {
    const other = new SchedulerClient({
      baseUrl: sandbox.url,
      auth: { kind: "bearer", key: OTHER_KEY },
    });
    const mine = await Promise.all(
      [1, 2, 3].map(() => other.jobs.create({ type: "noop", schedule: later() })),
    );
    await mine[0]?.pause();
    const listed: string[] = [];
    for await (const job of other.jobs.list({ pageSize: 1 })) listed.push(job.id);
    expect(listed.sort()).toEqual(mine.map((handle) => handle.id).sort());
    const paused: string[] = [];
    for await (const job of other.jobs.list({ status: "paused" })) paused.push(job.id);
    expect(paused).toEqual([mine[0]?.id]);
    const notMine = await caught(client.jobs.get(listed[0] ?? ""));
    expect(isSchedulerApiError(notMine, "not_found")).toBe(true);
  });

  it("401 is unauthorized; an unknown run is not_found", async () => {
    const stranger = new SchedulerClient({
      baseUrl: sandbox.url,
      auth: { kind: "bearer", key: "nobody" },
    });
    const refused = await caught(stranger.jobs.page());
    if (!isSchedulerApiError(refused, "unauthorized")) throw refused;
    expect(refused.status).toBe(401);
    const handle = await client.jobs.create({ type: "noop", schedule: later() });
    const missing = await caught(handle.run(`${handle.id}-20300101T000000000-1`));
    expect(isSchedulerApiError(missing, "not_found")).toBe(true);
    await handle.cancel();
  });
});
