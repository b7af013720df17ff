import fc from "fast-check";
import { MAX_ATTEMPT, runId as runIdFor } from "../../shared/keys.js";
import type { MisfirePolicy, OverlapPolicy } from "../../shared/policies.js";
import { occurrences, type ScheduleSpec } from "../../shared/schedule/index.js";
import type { CrashPoint, LostKind, WriteKind } from "./faults.js";
import {
  type Behaviour,
  MODEL_TYPE,
  ModelViolation,
  RECEIVE_VISIBILITY_SECONDS,
  type Sequence,
  type Snapshot,
} from "./system.js";
import type { SendFault } from "./virtual-queue.js";

/**
 * The model: what the test knows about each job from the answers of the API
 * (never from the tables), version by version, so that the checks can say
 * which schedule, policies and payload were in force when.
 */
export interface ModelVersion {
  readonly version: number;
  readonly schedule: ScheduleSpec;
  readonly misfire: MisfirePolicy;
  readonly overlap: OverlapPolicy;
  /** The job's retry policy in this version, as the API answered it. */
  readonly retry: ModelRetry;
  readonly payload: unknown;
  /** Virtual ms at which this version was written. */
  readonly at: number;
  /** Whether this version's schedule differs from the one before it. */
  readonly scheduleChanged: boolean;
}

/** A retry policy as the API shows it (`policies.retry`). */
export interface ModelRetry {
  readonly maxAttempts: number;
  readonly initialDelaySeconds: number;
  readonly maxDelaySeconds: number;
}

export interface ModelJob {
  readonly id: string;
  readonly createdAt: number;
  readonly timeoutMs: number;
  status: string;
  readonly versions: ModelVersion[];
  /** Occurrences the job's schedules have had so far: bounds how far the clock may jump. */
  occurrences: number;
}

/** A trigger the API answered with a run: by `<jobId> <Idempotency-Key>`. */
interface KeyedTrigger {
  readonly runId: string;
  /** Virtual ms of the trigger that queued the run: the key's window runs 24 h from it. */
  readonly at: number;
}

/** A replay of a dead run the API answered 202: the run it queued and the `Idempotency-Key` it carried. */
interface ModelReplay {
  readonly runId: string;
  readonly key: string | null;
  readonly jobId: string;
}

export interface Model {
  readonly jobs: ModelJob[];
  /** The keyed triggers answered so far, by job and key. */
  readonly keyedTriggers: Map<string, KeyedTrigger>;
  /** Every run a trigger answered with (keyed or not), by run id: its job's id. */
  readonly triggeredRuns: Map<string, string>;
  /** Jobs a trigger of which answered neither a run nor a refusal: their triggered runs are not counted. */
  readonly triggersUnsure: Set<string>;
  /** The replays the API answered with a new run (202), by the dead run's id. */
  readonly replays: Map<string, ModelReplay>;
  /** Dead runs a replay of which answered neither a run nor a refusal: whether they were replayed is unknown. */
  readonly replaysUnsure: Set<string>;
  /** Every run a replay answered with (202, or 200 for a repeat of its key), by run id: its job's id. */
  readonly replayedRuns: Map<string, string>;
  /** The virtual clock, as the model moved it. */
  now: number;
  /** Total virtual time jumped so far. */
  jumpedMs: number;
  readonly limits: ModelLimits;
}

export interface ModelLimits {
  /** The largest single clock jump generated. */
  readonly maxJumpMs: number;
  /** Occurrences a job may accumulate over a sequence (a catch-up over many is slow, not different). */
  readonly maxOccurrencesPerJob: number;
  /** Total virtual time one sequence may jump (a dispatcher catching up reads every minute's bucket). */
  readonly maxTotalJumpMs: number;
}

export function currentVersion(job: ModelJob): ModelVersion {
  const last = job.versions.at(-1);
  if (last === undefined) throw new Error(`job ${job.id} has no versions`);
  return last;
}

type Cmd = fc.AsyncCommand<Model, Sequence>;
type ConflictKind = Extract<WriteKind, "claim" | "finish" | "edit" | "admission" | "replay">;

// ------------------------------------------------------------------ job definitions

type ScheduleChoice =
  | { readonly kind: "once"; readonly offsetMs: number }
  | { readonly kind: "cron"; readonly cron: string; readonly timezone: string }
  | { readonly kind: "every"; readonly every: string; readonly offsetMs: number };

const scheduleChoice: fc.Arbitrary<ScheduleChoice> = fc.oneof(
  fc.record({
    kind: fc.constant("once" as const),
    offsetMs: fc.constantFrom(-90_000, 0, 10_000, 45_000, 180_000, 1_200_000, 7_200_000),
  }),
  fc.record({
    kind: fc.constant("cron" as const),
    cron: fc.constantFrom("* * * * *", "*/5 * * * *", "0 * * * *", "30 2 * * *", "0 0 * * 1"),
    timezone: fc.constantFrom("UTC", "Europe/Berlin"),
  }),
  fc.record({
    kind: fc.constant("every" as const),
    every: fc.constantFrom("PT1M", "PT7M", "PT1H", "P1D", "P600000W"),
    offsetMs: fc.constantFrom(0, 30_000, 300_000),
  }),
);

function scheduleOf(choice: ScheduleChoice, now: number): ScheduleSpec {
  const at = (offset: number) => new Date(Math.floor((now + offset) / 1000) * 1000).toISOString();
  switch (choice.kind) {
    case "once":
      return { runAt: at(choice.offsetMs) };
    case "cron":
      return { cron: choice.cron, timezone: choice.timezone };
    case "every":
      return { every: choice.every, startAt: at(choice.offsetMs) };
  }
}

const describeSchedule = (c: ScheduleChoice) =>
  c.kind === "once"
    ? `runAt now${c.offsetMs >= 0 ? "+" : ""}${c.offsetMs / 1000}s`
    : c.kind === "cron"
      ? `cron "${c.cron}" ${c.timezone}`
      : `every ${c.every} from now+${c.offsetMs / 1000}s`;

const behaviour: fc.Arbitrary<Behaviour> = fc.oneof(
  { weight: 4, arbitrary: fc.record({ mode: fc.constant("ok" as const), tag: fc.nat(99) }) },
  {
    weight: 3,
    arbitrary: fc.record({
      mode: fc.constant("retry" as const),
      failTimes: fc.integer({ min: 1, max: 3 }),
      tag: fc.nat(99),
    }),
  },
  { weight: 1, arbitrary: fc.record({ mode: fc.constant("fatal" as const), tag: fc.nat(99) }) },
  {
    weight: 1,
    arbitrary: fc.record({ mode: fc.constant("hugeError" as const), tag: fc.nat(99) }),
  },
  { weight: 2, arbitrary: fc.record({ mode: fc.constant("sleep" as const), tag: fc.nat(99) }) },
);

const describeBehaviour = (b: Behaviour) => (b.mode === "retry" ? `retry×${b.failTimes}` : b.mode);

interface JobSpec {
  readonly schedule: ScheduleChoice;
  readonly behaviour: Behaviour;
  readonly misfire: MisfirePolicy;
  readonly overlap: OverlapPolicy;
  readonly maxConcurrent: number;
  readonly retry: {
    readonly maxAttempts: number;
    readonly initialDelaySeconds: number;
    readonly maxDelaySeconds: number;
  };
  readonly priority: "high" | "normal" | "low";
}

const retryPolicy = fc
  .record({
    maxAttempts: fc.integer({ min: 1, max: 4 }),
    initialDelaySeconds: fc.constantFrom(1, 20, 240),
    factor: fc.constantFrom(1, 2),
  })
  .map(({ maxAttempts, initialDelaySeconds, factor }) => ({
    maxAttempts,
    initialDelaySeconds,
    maxDelaySeconds: initialDelaySeconds * factor,
  }));

const jobSpec: fc.Arbitrary<JobSpec> = fc.record({
  schedule: scheduleChoice,
  behaviour,
  misfire: fc.constantFrom<MisfirePolicy>("skip", "fire_once", "fire_all"),
  overlap: fc.constantFrom<OverlapPolicy>("skip", "buffer_one", "allow"),
  maxConcurrent: fc.integer({ min: 1, max: 2 }),
  retry: retryPolicy,
  priority: fc.constantFrom("high" as const, "normal" as const, "low" as const),
});

const TIMEOUT_SECONDS = 120;

interface JobDto {
  readonly id: string;
  readonly status: string;
  readonly version: number;
  readonly schedule: ScheduleSpec;
  readonly payload: unknown;
  readonly policies: {
    readonly misfirePolicy: MisfirePolicy;
    readonly overlapPolicy: OverlapPolicy;
    readonly retry: ModelRetry;
  };
}

function isJobDto(body: unknown): body is JobDto {
  return typeof body === "object" && body !== null && "id" in body && "version" in body;
}

/** Reads the job back and brings the model up to date with what the system says it is now. */
async function sync(model: Model, seq: Sequence, job: ModelJob): Promise<void> {
  const reply = await seq.api("GET", `/jobs/${job.id}`);
  if (reply.status !== 200 || !isJobDto(reply.body)) return;
  absorb(model, seq, job, reply.body);
}

function absorb(_model: Model, seq: Sequence, job: ModelJob, dto: JobDto): void {
  job.status = dto.status.toUpperCase();
  const last = currentVersion(job);
  if (dto.version > last.version) {
    job.versions.push({
      version: dto.version,
      schedule: dto.schedule,
      misfire: dto.policies.misfirePolicy,
      overlap: dto.policies.overlapPolicy,
      retry: dto.policies.retry,
      payload: dto.payload,
      at: seq.nowMs,
      scheduleChanged: JSON.stringify(dto.schedule) !== JSON.stringify(last.schedule),
    });
  }
}

const pick = <T>(items: readonly T[], index: number): T | undefined =>
  items.length === 0 ? undefined : items[index % items.length];

// ------------------------------------------------------------------ commands

class CreateJob implements Cmd {
  constructor(readonly spec: JobSpec) {}
  check = () => true;
  async run(model: Model, seq: Sequence): Promise<void> {
    const { spec } = this;
    const schedule = scheduleOf(spec.schedule, seq.nowMs);
    const body = {
      type: MODEL_TYPE,
      name: `model ${describeSchedule(spec.schedule)}`,
      schedule,
      payload: spec.behaviour,
      retry: spec.retry,
      misfirePolicy: spec.misfire,
      overlapPolicy: spec.overlap,
      ...(spec.overlap === "allow" ? { maxConcurrent: spec.maxConcurrent } : {}),
      priority: spec.priority,
      timeoutSeconds: TIMEOUT_SECONDS,
    };
    const reply = await seq.api("POST", "/jobs", body);
    if (reply.status !== 201 || !isJobDto(reply.body)) return;
    const dto = reply.body;
    model.jobs.push({
      id: dto.id,
      createdAt: seq.nowMs,
      timeoutMs: TIMEOUT_SECONDS * 1000,
      status: dto.status.toUpperCase(),
      versions: [
        {
          version: dto.version,
          schedule: dto.schedule,
          misfire: dto.policies.misfirePolicy,
          overlap: dto.policies.overlapPolicy,
          retry: dto.policies.retry,
          payload: dto.payload,
          at: seq.nowMs,
          scheduleChanged: true,
        },
      ],
      occurrences: 0,
    });
  }
  toString() {
    const s = this.spec;
    return `create(${describeSchedule(s.schedule)}, ${describeBehaviour(s.behaviour)}, misfire ${s.misfire}, overlap ${s.overlap}${s.overlap === "allow" ? `×${s.maxConcurrent}` : ""}, retry ${s.retry.maxAttempts}×${s.retry.initialDelaySeconds}..${s.retry.maxDelaySeconds}s, ${s.priority})`;
  }
}

type EditChange =
  | { readonly kind: "rename" }
  | { readonly kind: "payload"; readonly behaviour: Behaviour }
  | { readonly kind: "schedule"; readonly schedule: ScheduleChoice }
  | { readonly kind: "policies"; readonly misfire: MisfirePolicy; readonly overlap: OverlapPolicy };

const editChange: fc.Arbitrary<EditChange> = fc.oneof(
  fc.record({ kind: fc.constant("rename" as const) }),
  fc.record({ kind: fc.constant("payload" as const), behaviour }),
  fc.record({
    kind: fc.constant("schedule" as const),
    schedule: scheduleChoice.filter((s) => !(s.kind === "every" && s.every === "P600000W")),
  }),
  fc.record({
    kind: fc.constant("policies" as const),
    misfire: fc.constantFrom<MisfirePolicy>("skip", "fire_once", "fire_all"),
    overlap: fc.constantFrom<OverlapPolicy>("skip", "buffer_one", "allow"),
  }),
);

const describeChange = (c: EditChange) =>
  c.kind === "rename"
    ? "rename"
    : c.kind === "payload"
      ? `payload ${describeBehaviour(c.behaviour)}`
      : c.kind === "schedule"
        ? `schedule ${describeSchedule(c.schedule)}`
        : `policies misfire ${c.misfire} overlap ${c.overlap}`;

async function edit(model: Model, seq: Sequence, job: ModelJob, change: EditChange) {
  const current = await seq.api("GET", `/jobs/${job.id}`);
  if (current.status !== 200 || current.etag === null) return;
  const body =
    change.kind === "rename"
      ? { name: `renamed at ${new Date(seq.nowMs).toISOString()}` }
      : change.kind === "payload"
        ? { payload: change.behaviour }
        : change.kind === "schedule"
          ? { schedule: scheduleOf(change.schedule, seq.nowMs) }
          : { misfirePolicy: change.misfire, overlapPolicy: change.overlap };
  await seq.api("PATCH", `/jobs/${job.id}`, body, { "If-Match": current.etag });
  await sync(model, seq, job);
}

class EditJob implements Cmd {
  constructor(
    readonly job: number,
    readonly change: EditChange,
  ) {}
  check = (m: Readonly<Model>) => m.jobs.length > 0;
  async run(model: Model, seq: Sequence): Promise<void> {
    const job = pick(model.jobs, this.job);
    if (job) await edit(model, seq, job, this.change);
  }
  toString() {
    return `edit(job ${this.job}, ${describeChange(this.change)})`;
  }
}

type Lifecycle = "pause" | "pause-cancel" | "resume" | "cancel" | "trigger" | "delete";

/** The model's status of a job the API deleted (204): no item, no longer read or listed. */
export const DELETED = "DELETED";

async function lifecycle(model: Model, seq: Sequence, job: ModelJob, op: Lifecycle) {
  if (op === "delete") {
    const reply = await seq.api("DELETE", `/jobs/${job.id}`);
    if (reply.status === 204) job.status = DELETED;
    else await sync(model, seq, job);
    return;
  }
  if (op === "pause-cancel") await seq.api("POST", `/jobs/${job.id}/pause`, { running: "cancel" });
  else {
    const reply = await seq.api("POST", `/jobs/${job.id}/${op}`);
    if (op === "trigger") noteTrigger(model, job, reply);
  }
  await sync(model, seq, job);
}

interface Reply {
  readonly status: number;
  readonly body: unknown;
}

/** A string field of an answer's body (`runId`, `status`), or undefined. */
const stringFieldOf = (body: unknown, field: string): string | undefined => {
  const value =
    typeof body === "object" && body !== null
      ? (body as Record<string, unknown>)[field]
      : undefined;
  return typeof value === "string" ? value : undefined;
};

const runIdOf = (body: unknown) => stringFieldOf(body, "runId");

const statusOf = (body: unknown) => stringFieldOf(body, "status");

/** Remembers the run a trigger answered, or that it is unsure whether one was queued. */
function noteTrigger(model: Model, job: ModelJob, reply: Reply): string | undefined {
  const runId = reply.status < 300 ? runIdOf(reply.body) : undefined;
  if (runId !== undefined) model.triggeredRuns.set(runId, job.id);
  else if (reply.status >= 500) model.triggersUnsure.add(job.id);
  return runId;
}

/** How long a trigger's `Idempotency-Key` holds (docs/architecture.md, Lifecycle). */
const KEY_WINDOW_MS = 24 * 3_600_000;

/**
 * POST /jobs/{id}/trigger with an `Idempotency-Key`, then `repeats` more times with the same key.
 * The model expects one run per key per job within the key's 24 hours: the first trigger answers
 * 202 with a new run, and every repeat 200 with that run. A 5xx is accepted only as an answer
 * that may not have queued anything, and only if the same request repeated with its key then
 * answers the run (one run: checked after settling, with every run a trigger answered).
 */
class TriggerWithKey implements Cmd {
  constructor(
    readonly job: number,
    readonly key: number,
    readonly repeats: number,
  ) {}
  check = (m: Readonly<Model>) => m.jobs.length > 0;
  async run(model: Model, seq: Sequence): Promise<void> {
    const job = pick(model.jobs, this.job);
    if (!job) return;
    const key = `key-${this.key}`;
    const recordOf = `${job.id} ${key}`;
    for (let i = 0; i <= this.repeats; i++) {
      const path = `/jobs/${job.id}/trigger`;
      const headers = { "Idempotency-Key": key };
      let reply = await seq.api("POST", path, undefined, headers, { retriedWithKey: true });
      if (reply.status >= 500) {
        // The first 5xx may not have queued anything; its repeat must be harmless and answer.
        reply = await seq.api("POST", path, undefined, headers);
        if (reply.status >= 500) return;
      }
      const runId = runIdOf(reply.body);
      if (reply.status >= 300 || runId === undefined) {
        await sync(model, seq, job);
        return;
      }
      model.triggeredRuns.set(runId, job.id);
      const earlier = model.keyedTriggers.get(recordOf);
      const age = earlier === undefined ? Number.POSITIVE_INFINITY : seq.nowMs - earlier.at;
      // Within a second of the window's end either answer is right.
      const repeat = age < KEY_WINDOW_MS - 1000;
      const fresh = age > KEY_WINDOW_MS + 1000;
      if (repeat && (reply.status !== 200 || runId !== earlier?.runId))
        seq.violate(
          "a trigger repeated with its Idempotency-Key answers 200 with the first trigger's run",
          `${job.id} ${key}: answered ${reply.status} ${runId}, the first trigger's run is ${earlier?.runId} (${Math.round(age / 1000)} s ago)`,
        );
      if (fresh && reply.status === 200 && earlier !== undefined && runId === earlier.runId)
        seq.violate(
          "a trigger's Idempotency-Key holds for 24 hours",
          `${job.id} ${key}: answered the run ${runId} of ${Math.round(age / 3_600_000)} h ago`,
        );
      if (!repeat && runId !== earlier?.runId)
        model.keyedTriggers.set(recordOf, { runId, at: seq.nowMs });
    }
    await sync(model, seq, job);
  }
  toString() {
    return `trigger(job ${this.job}, Idempotency-Key key-${this.key}${this.repeats > 0 ? `, repeated ${this.repeats}×` : ""})`;
  }
}

class LifecycleCommand implements Cmd {
  constructor(
    readonly job: number,
    readonly op: Lifecycle,
  ) {}
  check = (m: Readonly<Model>) => m.jobs.length > 0;
  async run(model: Model, seq: Sequence): Promise<void> {
    const job = pick(model.jobs, this.job);
    if (job) await lifecycle(model, seq, job, this.op);
  }
  toString() {
    return `${this.op}(job ${this.job})`;
  }
}

// ------------------------------------------------------------------ dead letters and their replays

/**
 * Makes a dead letter now: creates a one-off due at once whose handler fails every attempt (at
 * once, `fatal`, or retryably until `maxAttempts` run out), then runs dispatcher passes and
 * deliveries, a few seconds apart for its retries' backoff, until its run is DEAD. Other jobs'
 * messages are delivered along the way, as a worker would. Random sequences alone rarely make one
 * in time for a replay to follow.
 */
class MakeDeadLetter implements Cmd {
  constructor(
    readonly mode: "fatal" | "exhaust",
    readonly maxAttempts: number,
    readonly tag: number,
    /** A one-off completes as its run dies; a daily job stays active, so it can be cancelled. */
    readonly daily = false,
  ) {}
  check = () => true;
  async run(model: Model, seq: Sequence): Promise<void> {
    const behaviour: Behaviour =
      this.mode === "fatal"
        ? { mode: "fatal", tag: this.tag }
        : { mode: "retry", failTimes: MAX_MODEL_ATTEMPTS, tag: this.tag };
    const count = model.jobs.length;
    await new CreateJob({
      schedule: this.daily
        ? { kind: "every", every: "P1D", offsetMs: 0 }
        : { kind: "once", offsetMs: 0 },
      behaviour,
      misfire: "fire_once",
      overlap: "allow",
      maxConcurrent: 2,
      retry: { maxAttempts: this.maxAttempts, initialDelaySeconds: 1, maxDelaySeconds: 1 },
      priority: "normal",
    }).run(model, seq);
    const job = model.jobs[count];
    if (job === undefined) return;
    for (let round = 0; round < 2 * this.maxAttempts + 2; round++) {
      await seq.pass();
      await seq.deliver(6, "normal");
      if (seq.violations.length > 0) return;
      const runs = await seq.storedRuns();
      if (runs.some((r) => r.jobId === job.id && r.status === "DEAD")) return;
      const step = new AdvanceClock(5_000);
      if (!step.check(model)) return;
      await step.run(model, seq);
    }
  }
  toString() {
    return `make a dead letter(${this.daily ? "daily" : "one-off"}, ${this.mode === "fatal" ? "fatal" : `failing ${this.maxAttempts} attempt${this.maxAttempts > 1 ? "s" : ""}`}, tag ${this.tag})`;
  }
}

/** A one-off due now whose handler sleeps until released, stopped or timed out: a run that stays RUNNING. */
const sleepingOneOff = (tag: number): JobSpec => ({
  schedule: { kind: "once", offsetMs: 0 },
  behaviour: { mode: "sleep", tag },
  misfire: "fire_once",
  overlap: "allow",
  maxConcurrent: 2,
  retry: { maxAttempts: 2, initialDelaySeconds: 1, maxDelaySeconds: 1 },
  priority: "normal",
});

/**
 * A run's message back while its worker still holds the run: a one-off due now whose handler
 * sleeps is delivered; the heartbeats' visibility changes then meet an expired receipt (SQS refuses
 * them) while the leases are extended, the clock passes a worker loop's receive visibility, and
 * each held message whose visibility lapsed is received again by another worker. A redelivery
 * starts at once (`startRun`), and must find the run busy: its holder's lease is live (checked on
 * every start, invariants.ts `checkStarts`). A Lambda worker's message stays hidden for the
 * queue's visibility, past the handler's timeout.
 */
class RedeliverWhileHeld implements Cmd {
  constructor(readonly tag: number) {}
  check = () => true;
  async run(model: Model, seq: Sequence): Promise<void> {
    await new CreateJob(sleepingOneOff(this.tag)).run(model, seq);
    await seq.pass();
    await seq.deliver(6, "normal");
    if (seq.violations.length > 0 || seq.sleeping === 0) return;
    seq.queues.faults.expiredReceipts += seq.sleeping;
    const step = new AdvanceClock(RECEIVE_VISIBILITY_SECONDS * 1000 + 1000);
    if (!step.check(model)) return;
    await step.run(model, seq);
    const started = seq.starts.length;
    if ((await seq.redeliverLapsed()) > 0) seq.reached.add("a redelivery of a held run's message");
    const live = (s: Sequence["starts"][number]) =>
      s.before.status === "RUNNING" && (s.before.leaseUntil ?? "") >= s.at;
    if (seq.starts.slice(started).some(live)) seq.reached.add("a redelivery meeting a held run");
  }
  toString() {
    return `redeliver while held(tag ${this.tag})`;
  }
}

/** The most attempts a job's retry policy has in the model: a handler failing this often always dies. */
const MAX_MODEL_ATTEMPTS = 4;

type ReplayTarget = "unreplayed" | "newest" | "replayed" | "missing";
type RaceOp = Exclude<Lifecycle, "trigger">;

/** A change of the replay's job: sent at once with the replay, or landing between its read and its write. */
interface ReplayRace {
  readonly op: RaceOp;
  readonly when: "concurrent" | "between";
}

interface ReplaySpec {
  /**
   * A dead run not yet replayed, the one of them with the most attempts (a replay's run that died
   * too), one already replayed, or a run id that names no run.
   */
  readonly target: ReplayTarget;
  readonly index: number;
  /** The `Idempotency-Key` (`rk-<n>`), or none. */
  readonly key: number | null;
  /** How many copies of the request are sent at once (a client's concurrent retries). */
  readonly sends: number;
  /** How many times the request is sent again after those have answered. */
  readonly repeats: number;
  readonly race: ReplayRace | null;
  /** Then deliver a few messages, so that the replay's run runs (and, for a failing handler, dies again). */
  readonly deliver: boolean;
}

type SnapshotRun = Snapshot["runs"][number];

/** What the API must answer a replay: the statuses that are right, and the run a 200 must name. */
interface ReplayExpectation {
  readonly statuses: readonly number[];
  readonly runId?: string;
  /** Which promise: the case the request is in. */
  readonly rule: string;
  /** One of the sends must queue the run (answer 202). */
  readonly creates?: boolean;
}

/**
 * What `POST /dead-letters/{runId}/replay` must answer, from what the model knows (the replays the
 * API answered; the job's status as the API answered it) and the dead run as stored now: 404 for
 * no such run; 200 with the earlier run for a repeat of the key that replayed it; 409 for a dead
 * run replayed already (any other key, or none), for a cancelled or deleted job, or while a retry
 * of the dead run holds its next attempt; else 202 with a new run.
 */
function expectReplay(
  model: Model,
  dead: SnapshotRun | undefined,
  key: string | null,
  runs: readonly SnapshotRun[],
): ReplayExpectation {
  if (dead === undefined) return { statuses: [404], rule: "a run id that names no run" };
  if (model.replaysUnsure.has(dead.runId))
    return {
      statuses: [200, 202, 409],
      rule: "a dead run an earlier replay of which answered 5xx",
    };
  const earlier = model.replays.get(dead.runId);
  if (earlier !== undefined) {
    if (key !== null && earlier.key === key)
      return {
        statuses: [200],
        runId: earlier.runId,
        rule: "a dead run replayed with the same Idempotency-Key (200, that replay's run)",
      };
    return {
      statuses: [409],
      rule: "a dead run replayed already, with another Idempotency-Key or none",
    };
  }
  const status = model.jobs.find((j) => j.id === dead.jobId)?.status;
  if (status === "CANCELLED" || status === DELETED)
    return { statuses: [409], rule: "a dead run of a cancelled or deleted job" };
  const next = runs.find(
    (r) =>
      r.jobId === dead.jobId &&
      r.scheduledFor === dead.scheduledFor &&
      r.attempt === dead.attempt + 1,
  );
  if (next !== undefined && !(next.status === "SKIPPED" && next.retryOf?.runId === dead.runId))
    return { statuses: [409], rule: "a dead run whose next attempt a retry of it holds" };
  return {
    statuses: [202],
    rule: "a dead run not yet replayed, of a job not cancelled",
    creates: true,
  };
}

interface RunDto {
  readonly runId: string;
  readonly jobId: string;
  readonly scheduledFor: string;
  readonly attempt: number;
}

function isRunDto(body: unknown): body is RunDto {
  return (
    typeof body === "object" &&
    body !== null &&
    "runId" in body &&
    typeof body.runId === "string" &&
    "attempt" in body &&
    typeof body.attempt === "number"
  );
}

/**
 * `POST /dead-letters/{runId}/replay`, with or without an `Idempotency-Key`: one send or a few at
 * once, then repeats, maybe racing a pause, resume, cancel or delete of the job (sent with it, or
 * landing between the replay's read and its write). Each answer is judged against
 * `expectReplay`; of concurrent sends of a replay that must queue a run exactly one answers 202,
 * the others (same key) 200 with its run or (no key) 409. A key makes at most one run: every
 * 200 names the run its key's replay queued. What the replays queued is checked once settled
 * (`checkReplays`).
 */
class Replay implements Cmd {
  constructor(readonly spec: ReplaySpec) {}
  check = () => true;
  async run(model: Model, seq: Sequence): Promise<void> {
    const { spec } = this;
    if (model.jobs.length === 0) await this.makeDeadLetter(model, seq);
    const runs = await seq.storedRuns();
    const deadRuns = runs
      .filter((r) => r.status === "DEAD")
      .sort((a, b) => a.runId.localeCompare(b.runId));
    const unreplayed = deadRuns.filter((r) => r.replayedBy === null);
    const newest = unreplayed.reduce<SnapshotRun[]>(
      (most, r) => (most[0] === undefined || r.attempt > most[0].attempt ? [r] : most),
      [],
    );
    const pool =
      spec.target === "unreplayed"
        ? unreplayed
        : spec.target === "newest"
          ? newest
          : deadRuns.filter((r) => r.replayedBy !== null);
    const dead =
      spec.target === "missing"
        ? undefined
        : (pick(pool, spec.index) ?? pick(deadRuns, spec.index));
    const someJob = pick(model.jobs, spec.index);
    if (spec.target !== "missing" && dead === undefined) {
      await this.makeDeadLetter(model, seq);
      if (seq.violations.length > 0) return;
      const made = (await seq.storedRuns()).find(
        (r) => r.status === "DEAD" && r.replayedBy === null,
      );
      if (made === undefined) {
        seq.reached.add("replay command with no dead letter");
        return;
      }
      await this.replay(model, seq, made.runId, made, await seq.storedRuns());
      return;
    }
    if (dead === undefined && someJob === undefined) return;
    // Attempt 9999 of an occurrence at this millisecond: a run id of the right form that no run has.
    const runId = dead?.runId ?? runIdFor(someJob?.id ?? "", new Date(seq.nowMs), MAX_ATTEMPT);
    await this.replay(model, seq, runId, dead, runs);
  }

  /** None yet: makes one, so that a replay early in a sequence is not spent on an empty list. */
  private async makeDeadLetter(model: Model, seq: Sequence): Promise<void> {
    await new MakeDeadLetter("fatal", 1, this.spec.index, this.spec.index % 2 === 0).run(
      model,
      seq,
    );
  }

  private async replay(
    model: Model,
    seq: Sequence,
    runId: string,
    dead: SnapshotRun | undefined,
    runs: readonly SnapshotRun[],
  ): Promise<void> {
    const { spec } = this;
    const key = spec.key === null ? null : `rk-${spec.key}`;
    const job = model.jobs.find((j) => j.id === dead?.jobId);
    if (dead !== undefined) this.noteReach(model, seq, dead, key);

    const race = job !== undefined && job.status !== DELETED ? spec.race : null;
    const change = () =>
      job === undefined || race === null ? Promise.resolve() : lifecycle(model, seq, job, race.op);
    if (race?.when === "between") seq.plan.replayHook = { run: change };
    let expected = expectReplay(model, dead, key, runs);
    const racing = race?.when === "concurrent" ? change() : null;
    const sends = race?.when === "between" ? 1 : spec.sends;
    const [lost, injected] = [seq.plan.lost.length, seq.plan.injected.length];
    const first = await Promise.all(
      Array.from({ length: sends }, () => this.send(model, seq, runId, key, dead)),
    );
    await racing;
    if (seq.plan.lost.slice(lost).some((l) => l.kind === "replay" || l.kind === "api"))
      seq.reached.add("replay with a write's answer lost");
    if (seq.plan.injected.slice(injected).some((i) => i.kind === "replay"))
      seq.reached.add("replay meeting a transaction conflict");
    const hooked = race?.when === "between" && seq.plan.replayHook === null;
    seq.plan.replayHook = null;
    if (race !== null && job !== undefined) {
      const ended = job.status === "CANCELLED" || job.status === DELETED;
      if (race.when === "between" && hooked && ended) {
        // The cancel or delete was answered before the replay's write was sent: it must refuse.
        expected = {
          statuses: [409],
          rule: `a dead run whose job's ${race.op} lands between the replay's read and its write`,
        };
        seq.reached.add(`replay with its job's ${race.op} between read and write`);
      } else if (race.when === "concurrent" && (race.op === "cancel" || race.op === "delete")) {
        // Either may go first: a replay written first is ended by the cancel, else refused.
        if (expected.statuses.includes(202))
          expected = {
            statuses: [202, 409],
            rule: `a dead run not yet replayed, sent with its job's ${race.op}`,
          };
        seq.reached.add(`replay sent with its job's ${race.op}`);
      } else seq.reached.add(`replay with its job's ${race.op} ${race.when}`);
    }
    // Sent at once, one queues the run; the others answer as its repeats: 200 with its key, else 409.
    if (sends > 1 && expected.statuses.includes(202))
      expected = {
        ...expected,
        statuses: [...expected.statuses, key === null ? 409 : 200],
        rule: `${expected.rule}, sent ${sends} times at once`,
      };
    this.judge(model, seq, dead, key, expected, first);
    for (let i = 0; i < spec.repeats; i++) {
      const again = expectReplay(model, dead, key, runs);
      this.judge(model, seq, dead, key, again, [await this.send(model, seq, runId, key, dead)]);
      if (dead !== undefined && key !== null && model.replays.get(dead.runId)?.key === key)
        seq.reached.add("replay repeated with its key");
    }
    if (spec.deliver) await seq.deliver(4, "normal");
    if (job !== undefined && job.status !== DELETED) await sync(model, seq, job);
  }

  /** One send; with a key, a 5xx is sent again once (a retry is what the key is for). Null: no answer but 5xx. */
  private async send(
    model: Model,
    seq: Sequence,
    runId: string,
    key: string | null,
    dead: SnapshotRun | undefined,
  ): Promise<Reply | null> {
    const path = `/dead-letters/${runId}/replay`;
    const headers: Record<string, string> = key === null ? {} : { "Idempotency-Key": key };
    let reply = await seq.api("POST", path, undefined, headers, { retriedWithKey: key !== null });
    if (reply.status >= 500 && key !== null)
      reply = await seq.api("POST", path, undefined, headers);
    if (reply.status < 500) return reply;
    if (dead !== undefined) model.replaysUnsure.add(dead.runId);
    return null;
  }

  /** Judges answers sent together against one expectation, and records the runs they name. */
  private judge(
    model: Model,
    seq: Sequence,
    dead: SnapshotRun | undefined,
    key: string | null,
    expected: ReplayExpectation,
    replies: readonly (Reply | null)[],
  ): void {
    const answered = replies.filter((r): r is Reply => r !== null);
    for (const reply of answered)
      seq.reached.add(`replay ${reply.status}${key === null ? "" : " with a key"}`);
    const what = `${dead?.runId ?? "no run"}${key === null ? "" : ` with Idempotency-Key ${key}`}`;
    const listed = answered.map((r) => `${r.status} ${runIdOf(r.body) ?? ""}`.trim()).join(", ");
    for (const reply of answered) {
      if (!expected.statuses.includes(reply.status))
        seq.violate(
          `a replay of ${expected.rule} answers ${expected.statuses.join(" or ")}`,
          `${what}: answered ${listed}`,
        );
    }
    if (dead === undefined) return;
    const created = answered.filter((r) => r.status === 202);
    const unanswered = answered.length < replies.length;
    if (created.length > 1 || (created.length === 0 && expected.creates && !unanswered))
      seq.violate(
        "a dead run is replayed once: of sends of one replay, exactly one answers 202",
        `${what}: ${replies.length} sent at once answered ${listed}`,
      );
    for (const reply of created) {
      if (!isRunDto(reply.body)) continue;
      const run = reply.body;
      if (
        run.jobId !== dead.jobId ||
        run.scheduledFor !== dead.scheduledFor ||
        run.attempt !== dead.attempt + 1
      )
        seq.violate(
          "a replay is the dead run's occurrence's next attempt",
          `${what}: answered ${run.runId} (attempt ${run.attempt} of ${run.jobId} at ${run.scheduledFor})`,
        );
      if (model.replayedRuns.has(dead.runId)) seq.reached.add("replay 202 of a replay's dead run");
      if (!model.replays.has(dead.runId))
        model.replays.set(dead.runId, { runId: run.runId, key, jobId: dead.jobId });
      model.replayedRuns.set(run.runId, dead.jobId);
    }
    const made = model.replays.get(dead.runId);
    for (const reply of answered.filter((r) => r.status === 200)) {
      const runId = runIdOf(reply.body);
      if (runId === undefined) continue;
      model.replayedRuns.set(runId, dead.jobId);
      if (made !== undefined && (made.key !== key || made.runId !== runId))
        seq.violate(
          "an Idempotency-Key makes at most one replay: a repeat of it answers 200 with that replay's run",
          `${what}: answered 200 ${runId}; the replay made ${made.runId} with ${made.key === null ? "no key" : `key ${made.key}`}`,
        );
    }
  }

  private noteReach(model: Model, seq: Sequence, dead: SnapshotRun, key: string | null): void {
    if (this.spec.sends > 1 && this.spec.race?.when !== "between")
      seq.reached.add(`replay sent ${key === null ? "" : "with a key "}concurrently`);
    if (key === null) return;
    const made = model.replays.get(dead.runId);
    if (made !== undefined && made.key === key)
      seq.reached.add("replay repeating an earlier key on its dead run");
    const elsewhere = [...model.replays].some(
      ([other, r]) => other !== dead.runId && r.key === key,
    );
    if (elsewhere && made === undefined)
      seq.reached.add("replay with a key used on another dead run");
  }

  toString() {
    const s = this.spec;
    const target =
      s.target === "missing" ? "a run id that names no run" : `${s.target} dead letter ${s.index}`;
    return `replay(${target}${s.key === null ? "" : `, Idempotency-Key rk-${s.key}`}${s.sends > 1 ? `, ${s.sends} sent at once` : ""}${s.repeats > 0 ? `, repeated ${s.repeats}×` : ""}${s.race ? `, ${s.race.op} ${s.race.when === "between" ? "between its read and write" : "sent with it"}` : ""}${s.deliver ? ", then deliver" : ""})`;
  }
}

/** `POST /jobs/{id}/runs/{runId}/cancel` on one of the runs not yet ended (queued or running). */
class CancelRun implements Cmd {
  constructor(readonly index: number) {}
  check = (m: Readonly<Model>) => m.jobs.length > 0;
  async run(model: Model, seq: Sequence): Promise<void> {
    const runs = await seq.storedRuns();
    const live = runs
      .filter((r) => r.status === "QUEUED" || r.status === "RUNNING")
      .sort((a, b) => a.runId.localeCompare(b.runId));
    const run = pick(live, this.index);
    if (!run) return;
    const reply = await seq.api("POST", `/jobs/${run.jobId}/runs/${run.runId}/cancel`);
    if (statusOf(reply.body) === "running") seq.reached.add("a cancel asked of a running run");
    const job = model.jobs.find((j) => j.id === run.jobId);
    if (job && job.status !== DELETED) await sync(model, seq, job);
  }
  toString() {
    return `cancel(run ${this.index} not yet ended)`;
  }
}

/** Which request asks a running run to cancel: its own cancel, its job's cancel or delete, or a pause that cancels. */
type RunningCancel = "run" | "cancel" | "delete" | "pause-cancel";

/**
 * What happens next to a run asked to cancel while its handler runs: nothing yet (the commands
 * after it decide), its handler ignores the signal and succeeds, or its worker's next heartbeat.
 */
type AfterCancel = "later" | "handler succeeds" | "heartbeat";

/**
 * A cancel asked of a run whose handler is running (docs/api.md, "Cancelling runs"): a one-off due
 * now whose handler sleeps is delivered, and the request comes while the run is RUNNING under its
 * worker's live lease, so the run stays running with the request on it. Whatever ends it then (the
 * heartbeat, a handler that ignores its signal and succeeds, its timeout, a crash and the next
 * delivery), the run must end CANCELLED (`checkInvariants`: a run asked to cancel ends cancelled).
 */
class CancelWhileRunning implements Cmd {
  constructor(
    readonly via: RunningCancel,
    readonly after: AfterCancel,
    readonly tag: number,
  ) {}
  check = () => true;
  async run(model: Model, seq: Sequence): Promise<void> {
    const count = model.jobs.length;
    await new CreateJob(sleepingOneOff(this.tag)).run(model, seq);
    const job = model.jobs[count];
    if (job === undefined) return;
    await seq.pass();
    await seq.deliver(6, "normal");
    if (seq.violations.length > 0) return;
    const running = (await seq.storedRuns()).find(
      (r) => r.jobId === job.id && r.status === "RUNNING",
    );
    if (running === undefined) return;
    if (this.via === "run") {
      const reply = await seq.api("POST", `/jobs/${job.id}/runs/${running.runId}/cancel`);
      await sync(model, seq, job);
      if (statusOf(reply.body) === "running") seq.reached.add("a cancel asked of a running run");
    } else {
      await lifecycle(model, seq, job, this.via);
      const asked = (await seq.storedRuns()).find((r) => r.runId === running.runId);
      if (asked?.status === "RUNNING" && asked.cancelRequestedAt)
        seq.reached.add("a cancel asked of a running run");
    }
    if (this.after === "handler succeeds") await seq.releaseSleepers();
    else if (this.after === "heartbeat") {
      const step = new AdvanceClock(5_000);
      if (step.check(model)) await step.run(model, seq);
    }
  }
  toString() {
    const via = this.via === "run" ? "its own cancel" : `job ${this.via}`;
    return `cancel while running(by ${via}, then ${this.after}, tag ${this.tag})`;
  }
}

class DispatcherPass implements Cmd {
  check = () => true;
  async run(_m: Model, seq: Sequence) {
    await seq.pass();
  }
  toString() {
    return "pass";
  }
}

class ReaperPass implements Cmd {
  check = () => true;
  async run(_m: Model, seq: Sequence) {
    await seq.reap();
  }
  toString() {
    return "reap";
  }
}

type DeliveryMode = "normal" | "duplicate" | CrashPoint;

class Deliver implements Cmd {
  constructor(
    readonly count: number,
    readonly mode: DeliveryMode,
  ) {}
  check = () => true;
  async run(_m: Model, seq: Sequence) {
    await seq.deliver(this.count, this.mode);
  }
  toString() {
    return `deliver(${this.count}${this.mode === "normal" ? "" : `, first ${this.mode}`})`;
  }
}

class HardRestart implements Cmd {
  check = () => true;
  async run(_m: Model, seq: Sequence) {
    await seq.hardRestart();
  }
  toString() {
    return "hard restart (workers killed, queue emptied, reaper resends)";
  }
}

class ReleaseSleepers implements Cmd {
  check = () => true;
  async run(_m: Model, seq: Sequence) {
    await seq.releaseSleepers();
  }
  toString() {
    return "release sleeping handlers";
  }
}

/** Occurrences of the job's current schedule in (from, to], at most `limit`. */
function occurrencesBetween(job: ModelJob, from: number, to: number, limit: number): number {
  try {
    return occurrences(currentVersion(job).schedule, new Date(from + 1), new Date(to), limit)
      .length;
  } catch {
    return 0;
  }
}

class AdvanceClock implements Cmd {
  constructor(readonly ms: number) {}
  check(m: Readonly<Model>): boolean {
    if (this.ms > m.limits.maxJumpMs || m.jumpedMs + this.ms > m.limits.maxTotalJumpMs)
      return false;
    const limit = m.limits.maxOccurrencesPerJob;
    return m.jobs.every(
      (job) =>
        job.status === "CANCELLED" ||
        job.occurrences + occurrencesBetween(job, m.now, m.now + this.ms, limit + 1) <= limit,
    );
  }
  async run(model: Model, seq: Sequence) {
    for (const job of model.jobs) {
      const limit = model.limits.maxOccurrencesPerJob + 1;
      job.occurrences += occurrencesBetween(job, model.now, model.now + this.ms, limit);
    }
    model.jumpedMs += this.ms;
    model.now += this.ms;
    await seq.advance(this.ms);
  }
  toString() {
    return `advance(${formatMs(this.ms)})`;
  }
}

function formatMs(ms: number): string {
  if (ms % 86_400_000 === 0) return `${ms / 86_400_000}d`;
  if (ms % 3_600_000 === 0) return `${ms / 3_600_000}h`;
  if (ms % 60_000 === 0) return `${ms / 60_000}min`;
  return `${ms / 1000}s`;
}

class InjectConflicts implements Cmd {
  constructor(
    readonly kind: ConflictKind,
    readonly times: number,
  ) {}
  check = () => true;
  async run(_m: Model, seq: Sequence) {
    seq.plan.conflicts.set(this.kind, (seq.plan.conflicts.get(this.kind) ?? 0) + this.times);
  }
  toString() {
    return `conflict(next ${this.times} ${this.kind})`;
  }
}

class LoseAnswers implements Cmd {
  constructor(
    readonly kind: LostKind,
    readonly times: number,
  ) {}
  check = () => true;
  async run(_m: Model, seq: Sequence) {
    seq.plan.lostAnswers.set(this.kind, (seq.plan.lostAnswers.get(this.kind) ?? 0) + this.times);
  }
  toString() {
    return `lose answers(next ${this.times} ${this.kind})`;
  }
}

class SqsSendFaults implements Cmd {
  constructor(
    readonly fault: SendFault,
    readonly times: number,
  ) {}
  check = () => true;
  async run(_m: Model, seq: Sequence) {
    for (let i = 0; i < this.times; i++) seq.queues.faults.sends.push(this.fault);
  }
  toString() {
    return `sqs(next ${this.times} send${this.times > 1 ? "s" : ""} ${this.fault})`;
  }
}

class ExpiredReceipts implements Cmd {
  constructor(readonly times: number) {}
  check = () => true;
  async run(_m: Model, seq: Sequence) {
    seq.queues.faults.expiredReceipts += this.times;
  }
  toString() {
    return `sqs(next ${this.times} visibility change${this.times > 1 ? "s" : ""} meet an expired receipt)`;
  }
}

type HookOp =
  | { readonly kind: "edit"; readonly change: EditChange }
  | { readonly kind: "pause" }
  | { readonly kind: "cancel" }
  | { readonly kind: "delete" };

const hookOp: fc.Arbitrary<HookOp> = fc.oneof(
  { weight: 3, arbitrary: fc.record({ kind: fc.constant("edit" as const), change: editChange }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("pause" as const) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("cancel" as const) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("delete" as const) }) },
);

const describeHook = (op: HookOp) =>
  op.kind === "edit" ? `edit ${describeChange(op.change)}` : op.kind;

/** A lifecycle change that lands while a claim or a worker's start is in flight: between its read and its write. */
class Interleave implements Cmd {
  constructor(
    readonly during: "claim" | "start",
    readonly job: number,
    readonly op: HookOp,
  ) {}
  check = (m: Readonly<Model>) => m.jobs.length > 0;
  async run(model: Model, seq: Sequence) {
    const job = pick(model.jobs, this.job);
    if (!job) return;
    const op = this.op;
    const hook = {
      jobId: job.id,
      run: () =>
        op.kind === "edit" ? edit(model, seq, job, op.change) : lifecycle(model, seq, job, op.kind),
    };
    if (this.during === "claim") seq.plan.claimHook = hook;
    else seq.plan.startHook = hook;
  }
  toString() {
    return `during next ${this.during} of job ${this.job}: ${describeHook(this.op)}`;
  }
}

/** Fails the sequence at the command that broke a promise, so shrinking keeps the steps that lead to it. */
class Checked implements Cmd {
  constructor(private readonly inner: Cmd) {}
  check(m: Readonly<Model>): boolean {
    return this.inner.check(m);
  }
  async run(m: Model, seq: Sequence): Promise<void> {
    const t = performance.now();
    await this.inner.run(m, seq);
    if (process.env.MODEL_PROFILE && performance.now() - t > 200)
      process.stderr.write(`  slow ${Math.round(performance.now() - t)} ms: ${this.inner}\n`);
    if (seq.violations.length > 0) throw new ModelViolation(seq.violations);
  }
  toString(): string {
    return this.inner.toString();
  }
}

// ------------------------------------------------------------------ the command arbitrary

const jump = (limits: ModelLimits) =>
  fc
    .constantFrom(
      1_000,
      5_000,
      20_000,
      60_000,
      150_000,
      600_000,
      1_800_000,
      3_600_000,
      6 * 3_600_000,
      86_400_000,
      3 * 86_400_000,
      7 * 86_400_000,
    )
    .filter((ms) => ms <= limits.maxJumpMs);

/** `replayPath` replays a shrunk command list exactly (fast-check prints it with the counterexample). */
export function commandArbitrary(limits: ModelLimits, maxCommands: number, replayPath?: string) {
  const jobIndex = fc.nat(7);
  const loseAnswers = fc
    .tuple(
      fc.constantFrom<LostKind>(
        "claim",
        "finish",
        "edit",
        "admission",
        "start",
        "runEnd",
        "replay",
        "api",
        "api",
        "other",
      ),
      fc.integer({ min: 1, max: 3 }),
    )
    .map(([kind, times]) => new LoseAnswers(kind, times));
  const sqsSends = fc
    .tuple(
      fc.constantFrom<SendFault>("refuse", "resent", "lostAfter", "unavailable"),
      fc.integer({ min: 1, max: 3 }),
    )
    .map(([fault, times]) => new SqsSendFaults(fault, times));
  const keyedTrigger = fc
    .tuple(jobIndex, fc.nat(1), fc.integer({ min: 0, max: 2 }))
    .map(([j, key, repeats]) => new TriggerWithKey(j, key, repeats));
  const makeDeadLetter = fc
    .tuple(
      fc.constantFrom("fatal" as const, "exhaust" as const),
      fc.integer({ min: 1, max: 2 }),
      fc.nat(99),
      fc.boolean(),
    )
    .map(([mode, attempts, tag, daily]) => new MakeDeadLetter(mode, attempts, tag, daily));
  const replayRace: fc.Arbitrary<ReplayRace | null> = fc.oneof(
    { weight: 1, arbitrary: fc.constant(null) },
    {
      weight: 1,
      arbitrary: fc.record({
        op: fc.constantFrom<RaceOp>(
          "cancel",
          "cancel",
          "delete",
          "delete",
          "pause",
          "pause-cancel",
          "resume",
        ),
        when: fc.constantFrom("concurrent" as const, "between" as const),
      }),
    },
  );
  const replay = fc
    .record({
      target: fc.constantFrom<ReplayTarget>(
        "unreplayed",
        "unreplayed",
        "newest",
        "replayed",
        "missing",
      ),
      index: fc.nat(5),
      key: fc.constantFrom(null, 0, 0, 1),
      sends: fc.constantFrom(1, 1, 2, 3),
      repeats: fc.constantFrom(0, 0, 1, 2),
      race: replayRace,
      deliver: fc.boolean(),
    })
    .map((spec) => new Replay(spec));
  const commands: fc.Arbitrary<Cmd>[] = [
    jobSpec.map((s) => new CreateJob(s)),
    fc.tuple(jobIndex, editChange).map(([j, c]) => new EditJob(j, c)),
    fc
      .tuple(
        jobIndex,
        fc.constantFrom<Lifecycle>(
          "pause",
          "pause-cancel",
          "resume",
          "cancel",
          "trigger",
          "delete",
        ),
      )
      .map(([j, op]) => new LifecycleCommand(j, op)),
    replay,
    makeDeadLetter,
    fc.nat(99).map((tag) => new RedeliverWhileHeld(tag)),
    fc.nat(7).map((i) => new CancelRun(i)),
    fc
      .tuple(
        fc.constantFrom<RunningCancel>("run", "run", "cancel", "delete", "pause-cancel"),
        fc.constantFrom<AfterCancel>("later", "handler succeeds", "heartbeat"),
        fc.nat(99),
      )
      .map(([via, after, tag]) => new CancelWhileRunning(via, after, tag)),
    fc.constant(new DispatcherPass()),
    fc.constant(new ReaperPass()),
    fc
      .tuple(
        fc.integer({ min: 1, max: 6 }),
        fc.constantFrom<DeliveryMode>(
          "normal",
          "normal",
          "duplicate",
          "afterStart",
          "beforeFinish",
          "betweenWrites",
        ),
      )
      .map(([n, mode]) => new Deliver(n, mode)),
    fc.constant(new ReleaseSleepers()),
    fc.constant(new HardRestart()),
    jump(limits).map((ms) => new AdvanceClock(ms)),
    fc
      .tuple(
        fc.constantFrom<ConflictKind>("claim", "finish", "edit", "admission", "replay"),
        fc.integer({ min: 1, max: 2 }),
      )
      .map(([kind, times]) => new InjectConflicts(kind, times)),
    loseAnswers,
    sqsSends,
    fc.integer({ min: 1, max: 2 }).map((times) => new ExpiredReceipts(times)),
    keyedTrigger,
    fc
      .tuple(fc.constantFrom<"claim" | "start">("claim", "start"), jobIndex, hookOp)
      .map(([during, j, op]) => new Interleave(during, j, op)),
  ];
  const all: fc.Arbitrary<Cmd>[] = [
    ...commands,
    // Time, passes and deliveries are what most steps of a real day are.
    jump(limits).map((ms) => new AdvanceClock(ms)),
    fc.constant(new DispatcherPass()),
    fc.integer({ min: 1, max: 6 }).map((n) => new Deliver(n, "normal")),
    jobSpec.map((s) => new CreateJob(s)),
    // Faults and repeated triggers often enough that a sequence meets a few.
    loseAnswers,
    sqsSends,
    keyedTrigger,
    // Dead letters and their replays (keyed, repeated, concurrent, racing the job's changes).
    makeDeadLetter,
    fc.nat(99).map((tag) => new RedeliverWhileHeld(tag)),
    replay,
    replay,
    replay,
    replay,
  ];
  return fc.commands(
    all.map((arb) => arb.map((cmd): Cmd => new Checked(cmd))),
    { maxCommands, size: "max", ...(replayPath ? { replayPath } : {}) },
  );
}

export function newModel(limits: ModelLimits, now: number): Model {
  return {
    jobs: [],
    keyedTriggers: new Map(),
    triggeredRuns: new Map(),
    triggersUnsure: new Set(),
    replays: new Map(),
    replaysUnsure: new Set(),
    replayedRuns: new Map(),
    now,
    jumpedMs: 0,
    limits,
  };
}
