import { REAPER_SETTLE_MS } from "../../shared/dispatch/reaper.js";
import type { Run } from "../../shared/model.js";
import { backoffCeiling } from "../../shared/retry.js";
import { nextOccurrence, occurrences, type ScheduleSpec } from "../../shared/schedule/index.js";
import { ranForLastRun } from "../../shared/storage/last-run.js";
import {
  currentVersion,
  DELETED,
  type Model,
  type ModelJob,
  type ModelRetry,
  type ModelVersion,
} from "./commands.js";
import type { StartRecord } from "./starts.js";
import {
  MIN_RANDOM_DRAW,
  MODEL_SETTINGS,
  type Snapshot,
  TICK_MS,
  type Violation,
} from "./system.js";

/** After an edit that changes the schedule, occurrences this close to it may follow either schedule. */
const EDIT_WINDOW_MS = MODEL_SETTINGS.lookaheadMs + 2 * 60_000 + 1000;

type SnapshotRun = Snapshot["runs"][number];

/** A run queued this long past its due time once the system settled is stuck: two leases and a tick. */
const STUCK_MS = 2 * MODEL_SETTINGS.leaseMs + TICK_MS;

const FINAL = new Set(["SUCCEEDED", "FAILED", "DEAD", "SKIPPED", "CANCELLED"]);

function inSchedule(spec: ScheduleSpec, at: string): boolean {
  try {
    const t = new Date(at);
    return occurrences(spec, t, t, 1).length === 1;
  } catch {
    return false;
  }
}

/**
 * The promises that hold whatever happened during a sequence, checked once
 * the system is quiet: no occurrence succeeds twice; every occurrence of an
 * active job ended well (succeeded, dead, or skipped for a reason its policies
 * allow) or can still run; no active job's next run is overdue.
 */
export function checkInvariants(
  model: Model,
  snap: Snapshot,
  effectiveSuccesses: ReadonlyMap<string, number>,
): Violation[] {
  const violations: Violation[] = [];
  const violate = (invariant: string, detail: string) => violations.push({ invariant, detail });
  const nowIso = new Date(snap.now).toISOString();
  // The reaper acts on a deadline once it is REAPER_SETTLE_MS behind it: one after that line is live.
  const reaperLine = new Date(snap.now - REAPER_SETTLE_MS).toISOString();

  const byOccurrence = new Map<string, SnapshotRun[]>();
  for (const run of snap.runs) {
    const key = `${run.jobId}@${run.scheduledFor}`;
    const group = byOccurrence.get(key) ?? [];
    group.push(run);
    byOccurrence.set(key, group);
  }
  for (const [key, group] of byOccurrence) {
    const successes = group.filter((r) => r.status === "SUCCEEDED");
    if (successes.length > 1)
      violate(
        "no occurrence succeeds twice",
        `${key}: attempts ${successes.map((r) => r.attempt).join(", ")} all SUCCEEDED`,
      );
  }
  for (const [key, count] of effectiveSuccesses) {
    if (count > 1)
      violate(
        "no occurrence succeeds twice",
        `${key}: the handler succeeded ${count} times and each success was recorded`,
      );
  }

  // Every run a trigger answered with is kept, and a trigger queues one run, a repeat with its key none.
  for (const [runId, jobId] of model.triggeredRuns) {
    const deleted = model.jobs.find((j) => j.id === jobId)?.status === DELETED;
    if (!deleted && !snap.runs.some((r) => r.runId === runId))
      violate("an accepted trigger's run is never lost", `${jobId}: run ${runId} is gone`);
  }
  for (const job of model.jobs) {
    if (job.status === DELETED || model.triggersUnsure.has(job.id)) continue;
    const answered = new Set(
      [...model.triggeredRuns].filter(([, jobId]) => jobId === job.id).map(([runId]) => runId),
    );
    const extra = snap.runs.filter(
      (r) =>
        r.jobId === job.id && r.triggered === true && r.attempt === 1 && !answered.has(r.runId),
    );
    if (extra.length > 0)
      violate(
        "each trigger queues one run, and a repeat with its Idempotency-Key none",
        `${job.id}: ${extra.length} triggered run(s) no trigger answered: ${extra
          .map((r) => `${r.runId} ${r.status}`)
          .join(", ")}; answered ${[...answered].join(", ") || "none"}`,
      );
  }

  // A cancel asked of a run is the last word on it: nothing but CANCELLED is recorded after it.
  for (const run of snap.runs) {
    if (run.cancelRequestedAt && run.status !== "RUNNING" && run.status !== "CANCELLED")
      violate(
        "a run asked to cancel ends cancelled",
        `${run.runId}: ${run.status} after a cancel asked at ${run.cancelRequestedAt} by ${run.cancelledBy ?? "?"}`,
      );
  }
  for (const job of model.jobs) {
    // A claim stamps its runs with the version of the job it claimed for: a run claimed after an
    // edit at an older version comes from a stale copy of the job (a due entry edited under a claim).
    for (const run of snap.runs) {
      if (run.jobId !== job.id || run.attempt !== 1 || run.enqueuedAt === null) continue;
      const enqueued = Date.parse(run.enqueuedAt);
      const newer = job.versions.find((v) => v.version > run.jobVersion && v.at < enqueued);
      if (newer)
        violate(
          "a claim carries the job version it was claimed at",
          `${run.runId} enqueued ${run.enqueuedAt} at version ${run.jobVersion}; version ${newer.version} was written at ${new Date(newer.at).toISOString()}`,
        );
    }
    const real = snap.jobs.find((j) => j.jobId === job.id);
    if (job.status === DELETED) {
      if (real !== undefined)
        violate("a deleted job is gone", `${job.id}: stored as ${real.status} after its delete`);
      // Its runs not yet ended are ended by their worker (CANCELLED), so each needs a way there.
      for (const run of snap.runs) {
        if (run.jobId !== job.id || (run.status !== "QUEUED" && run.status !== "RUNNING")) continue;
        const message = snap.messages.some(
          (m) =>
            m.message.jobId === job.id &&
            m.message.scheduledFor === run.scheduledFor &&
            m.message.attempt === run.attempt,
        );
        if (!message && !(run.inflightSk !== null && run.inflightSk > reaperLine))
          violate(
            "a deleted job's unfinished run has a live path to its end",
            `${run.runId}: ${run.status}, no message, reaper deadline ${run.inflightSk ?? "none"} (now ${nowIso})`,
          );
      }
      continue;
    }
    if (real === undefined) {
      violate("an accepted job is never lost", `job ${job.id} is gone`);
      continue;
    }
    const agrees =
      real.status === job.status || (job.status === "ACTIVE" && real.status === "COMPLETED");
    if (!agrees)
      violate(
        "the job's status is the one the API answered",
        `${job.id}: API said ${job.status}, stored ${real.status}`,
      );
    if (real.status !== "ACTIVE") continue;
    const version = currentVersion(job);
    const runs = snap.runs.filter((r) => r.jobId === job.id);

    // The next occurrence is claimed in time.
    if (real.nextRunAt !== null) {
      const overdue = snap.now - Date.parse(real.nextRunAt);
      if (overdue > TICK_MS + MODEL_SETTINGS.lookaheadMs)
        violate(
          "no active job's next run is overdue by more than a tick plus the lookahead",
          `${job.id}: next run ${real.nextRunAt} is ${Math.round(overdue / 1000)} s overdue at ${nowIso}`,
        );
    } else if (!("runAt" in version.schedule)) {
      let next: Date | null = null;
      try {
        next = nextOccurrence(version.schedule, new Date(snap.now));
      } catch {
        next = null;
      }
      if (next !== null)
        violate(
          "an active recurring job has a next run",
          `${job.id}: no next run, though its schedule has ${next.toISOString()}`,
        );
    }

    // Each occurrence's latest attempt ended well or can still run.
    const groups = new Map<string, SnapshotRun[]>();
    for (const run of runs) {
      const group = groups.get(run.scheduledFor) ?? [];
      group.push(run);
      groups.set(run.scheduledFor, group);
    }
    for (const group of groups.values()) {
      const latest = group.reduce((a, b) => (b.attempt > a.attempt ? b : a));
      for (const run of group) if (run.status === "SKIPPED") checkSkip(run, job, snap, violate);
      switch (latest.status) {
        case "SUCCEEDED":
        case "DEAD":
        case "SKIPPED":
          break;
        case "CANCELLED":
          // Only a cancel of the run itself, or a pause that cancelled it before a resume, may.
          if (latest.cancelledBy !== "api" && latest.cancelledBy !== "pause")
            violate(
              "an active job's runs are not cancelled",
              `${latest.runId}: CANCELLED (${latest.reason ?? ""})`,
            );
          break;
        case "FAILED": {
          const retry = snap.due.some(
            (d) =>
              d.jobId === job.id &&
              d.scheduledFor === latest.scheduledFor &&
              d.attempt === latest.attempt + 1,
          );
          if (!retry)
            violate(
              "a failed attempt has its next attempt",
              `${latest.runId}: FAILED with no attempt ${latest.attempt + 1} and no due entry for it`,
            );
          break;
        }
        case "QUEUED":
        case "RUNNING": {
          const message = snap.messages.some(
            (m) =>
              m.message.jobId === job.id &&
              m.message.scheduledFor === latest.scheduledFor &&
              m.message.attempt === latest.attempt,
          );
          const deadline = latest.inflightSk !== null && latest.inflightSk > reaperLine;
          if (!message && !deadline)
            violate(
              "a queued or running run has a live path to run (a message, a due entry or a reaper deadline)",
              `${latest.runId}: ${latest.status} since ${latest.startedAt ?? latest.enqueuedAt ?? "?"}, no message, reaper deadline ${latest.inflightSk ?? "none"} (now ${nowIso})`,
            );
          // Settling ran every handler to its end and gave the reaper its deadlines: what is
          // still running, or queued well past its due time, is stuck, whatever path it has.
          const stuck =
            latest.status === "RUNNING" || Date.parse(latest.dueAt) < snap.now - STUCK_MS;
          if (stuck)
            violate(
              "nothing of an active job stays RUNNING, or QUEUED past its due time, once settled",
              `${latest.runId}: ${latest.status}, due ${latest.dueAt}, since ${latest.startedAt ?? latest.enqueuedAt ?? "?"} (now ${nowIso}), message ${message ? "held" : "none"}, reaper deadline ${latest.inflightSk ?? "none"}`,
            );
          break;
        }
      }
    }

    // Every occurrence up to now has a run.
    const missing = expectedOccurrences(job, snap.now - TICK_MS).filter((at) => !groups.has(at));
    if (missing.length > 0)
      violate(
        "every occurrence of an active job up to now has a run",
        `${job.id}: ${missing.length} without a run, first ${missing.slice(0, 3).join(", ")}; schedules ${job.versions
          .filter((v) => v.scheduleChanged)
          .map(
            (v) =>
              `v${v.version} ${JSON.stringify(v.schedule)} from ${new Date(v.at).toISOString()}`,
          )
          .join(", ")}`,
      );
  }
  return violations;
}

/** The occurrences the job's schedules had up to `until`, each schedule from when it took effect. */
function expectedOccurrences(job: ModelJob, until: number): string[] {
  const segments = job.versions.filter((v) => v.scheduleChanged);
  const expected: string[] = [];
  segments.forEach((segment, i) => {
    const next = segments[i + 1];
    const from = i === 0 ? job.createdAt : segment.at + EDIT_WINDOW_MS;
    const to = Math.min(until, next ? next.at : until);
    if ("runAt" in segment.schedule) {
      // Only the last one-off time counts: an edit moves the occurrence.
      const at = Date.parse(segment.schedule.runAt);
      if (next === undefined && at <= until) expected.push(new Date(at).toISOString());
      return;
    }
    if (to < from) return;
    try {
      const firstSecond = Math.floor(from / 1000) * 1000;
      for (const at of occurrences(segment.schedule, new Date(firstSecond), new Date(to), 5000))
        expected.push(at.toISOString());
    } catch {
      // A schedule past the storable years has no occurrences there to expect.
    }
  });
  return expected;
}

function checkSkip(
  run: Run,
  job: ModelJob,
  snap: Snapshot,
  violate: (invariant: string, detail: string) => void,
): void {
  const reason = run.reason ?? "";
  if (reason.startsWith("misfire")) {
    // A queued run meets the policy of the job as it is when the run starts, not when it was claimed.
    const policies = job.versions.filter((v) => v.version >= run.jobVersion).map((v) => v.misfire);
    if (policies.every((p) => p === "fire_all") && !reason.includes("cap of"))
      violate("a misfire is skipped only under skip or fire_once", `${run.runId}: ${reason}`);
    // Starts before the one that skipped, less those that parked the run for a paused job: a
    // parked run meets its misfire policy when the job resumes (docs/architecture.md, Policies).
    const parkedAt = run.parkedFence ?? 0;
    if (run.fence - 1 > parkedAt)
      violate(
        "a run that was interrupted or waited is not a misfire",
        `${run.runId}: started ${run.fence} times (parked at start ${parkedAt || "none"}), then SKIPPED: ${reason}`,
      );
    return;
  }
  if (reason.startsWith("overlap:")) {
    if (job.versions.every((v) => v.overlap === "allow"))
      violate("overlap skips only under skip or buffer_one", `${run.runId}: ${reason}`);
    const buffered = /another run \((\S+)\) is already buffered/.exec(reason)?.[1];
    if (buffered !== undefined) {
      const other = snap.runs.find((r) => r.runId === buffered);
      const endedBefore =
        other !== undefined &&
        FINAL.has(other.status) &&
        other.finishedAt !== null &&
        run.startedAt !== null &&
        other.finishedAt < run.startedAt;
      if (endedBefore)
        violate(
          "buffer_one frees its slot when the buffered run ends",
          `${run.runId} SKIPPED at ${run.startedAt}: ${buffered} is "buffered" but ended ${other?.status} at ${other?.finishedAt}`,
        );
    }
    return;
  }
  if (reason.includes("job paused")) {
    if (run.attempt > 1)
      violate(
        "a retry or replay survives a pause",
        `${run.runId} (attempt ${run.attempt}) SKIPPED: ${reason}`,
      );
    return;
  }
  if (reason.includes("job edited")) {
    const dropping = job.versions.some(
      (v) =>
        v.version > run.jobVersion &&
        v.scheduleChanged &&
        !inSchedule(v.schedule, run.scheduledFor),
    );
    if (!dropping) {
      const edits = job.versions.filter((v) => v.version > run.jobVersion);
      const claimedAfter = edits.some(
        (v) => run.enqueuedAt !== null && Date.parse(run.enqueuedAt) > v.at,
      );
      violate(
        claimedAfter
          ? "a claim carries the job version it was claimed at"
          : "an edit skips only the queued occurrences its new schedule drops",
        `${run.runId} (version ${run.jobVersion}, enqueued ${run.enqueuedAt}) SKIPPED: ${reason}; edits: ${edits
          .map(
            (v) =>
              `v${v.version} at ${new Date(v.at).toISOString()}${v.scheduleChanged ? " (schedule)" : ""}`,
          )
          .join(", ")}`,
      );
    }
    return;
  }
  if (reason.endsWith(", not FAILED: this retry does not run")) {
    // A failure's next attempt is put before its FAILED ending: it is skipped only when the
    // attempt before it ended otherwise (a crash, a lost fence or a cancel between the writes).
    const before = snap.runs.find(
      (r) =>
        r.jobId === run.jobId &&
        r.scheduledFor === run.scheduledFor &&
        r.attempt === run.attempt - 1,
    );
    if (before === undefined || !FINAL.has(before.status) || before.status === "FAILED")
      violate(
        "a retry is skipped only when the attempt before it ended otherwise than FAILED",
        `${run.runId}: ${reason}; attempt ${run.attempt - 1} ${before?.status ?? "gone"}`,
      );
    return;
  }
  violate("a skip has a reason the job's policies allow", `${run.runId}: ${reason}`);
}

/** The order of a job's lastRun: the latest finishedAt, then the greater runId. */
const endedAfter = (run: SnapshotRun, than: SnapshotRun) => {
  const [at, thanAt] = [run.finishedAt ?? "", than.finishedAt ?? ""];
  return at === thanAt ? run.runId > than.runId : at > thanAt;
};

/**
 * What a user reads as a job's lastRun (GET /jobs/{id} and GET /jobs alike) is its newest run
 * whose handler ran (`ranForLastRun`: a duration, or dead-lettered by the DLQ; the latest finishedAt; of two in the same millisecond, the greater runId),
 * whatever order the runs' job writes landed in: a run's ending may leave the job's item to its
 * next admission, never the answer. Checked once the system is quiet, for every job the API
 * still lists.
 */
export function checkLastRuns(
  snap: Snapshot,
  answered: ReadonlyMap<string, { readonly get: unknown; readonly list: unknown }>,
): Violation[] {
  const violations: Violation[] = [];
  for (const [jobId, { get, list }] of answered) {
    const ran = snap.runs.filter((r) => r.jobId === jobId && ranForLastRun(r));
    const newest = ran.reduce<SnapshotRun | null>(
      (a, b) => (a === null || endedAfter(b, a) ? b : a),
      null,
    );
    const shown = get as { runId?: string; status?: string; finishedAt?: string } | null;
    const named = shown === null ? undefined : ran.find((r) => r.runId === shown.runId);
    const agrees =
      newest === null
        ? shown === null
        : shown !== null &&
          named !== undefined &&
          named.runId === newest.runId &&
          shown.finishedAt === newest.finishedAt &&
          shown.status === named.status.toLowerCase();
    if (!agrees)
      violations.push({
        invariant: "a job's lastRun is its newest run that ran",
        detail: `${jobId}: answered ${JSON.stringify(shown)}, newest ${newest === null ? "none" : `${newest.runId} ${newest.status} at ${newest.finishedAt}`}`,
      });
    if (JSON.stringify(list) !== JSON.stringify(get))
      violations.push({
        invariant: "GET /jobs and GET /jobs/{id} answer the same lastRun",
        detail: `${jobId}: listed ${JSON.stringify(list)}, read ${JSON.stringify(get)}`,
      });
  }
  return violations;
}

/**
 * What the replays the API answered left, once the system is quiet: each dead run names as its
 * replay the run the API answered for it (and none the API did not answer: a replay made but
 * refused would leave the caller to make another), and every run a replay answered with is kept
 * (unless its job was deleted) and, unless its job is paused, cancelled or deleted, has run or
 * ended: delivered, not lost.
 */
export function checkReplays(model: Model, snap: Snapshot): Violation[] {
  const violations: Violation[] = [];
  const violate = (invariant: string, detail: string) => violations.push({ invariant, detail });
  for (const run of snap.runs) {
    if (run.status !== "DEAD" || model.replaysUnsure.has(run.runId)) continue;
    const made = model.replays.get(run.runId)?.runId ?? null;
    if (run.replayedBy !== made)
      violate(
        "a dead run's replay is the one the API answered 202 for",
        `${run.runId}: replayed by ${run.replayedBy ?? "nothing"}, the API answered ${made ?? "no replay"}`,
      );
  }
  for (const [runId, jobId] of model.replayedRuns) {
    const status = model.jobs.find((j) => j.id === jobId)?.status;
    if (status === DELETED) continue;
    const run = snap.runs.find((r) => r.runId === runId);
    if (run === undefined) {
      violate("a replayed run is never lost", `${jobId}: run ${runId} is gone`);
      continue;
    }
    if (status === "PAUSED" || status === "CANCELLED") continue;
    if (run.status === "QUEUED" || run.status === "RUNNING")
      violate(
        "a replayed run of a job not paused or cancelled is delivered once settled",
        `${runId}: ${run.status}, due ${run.dueAt} (now ${new Date(snap.now).toISOString()}), job ${status ?? "?"}`,
      );
    else if (run.status === "CANCELLED" && run.cancelledBy !== "api" && run.cancelledBy !== "pause")
      violate(
        "a replayed run of a job not paused or cancelled is delivered once settled",
        `${runId}: CANCELLED by ${run.cancelledBy ?? "?"} (${run.reason ?? ""}), job ${status ?? "?"}`,
      );
  }
  return violations;
}

/** The job's versions in force at some instant of [from, to]: the one before `from` and those written within. */
function versionsDuring(job: ModelJob, from: number, to: number): ModelVersion[] {
  const atOrBefore = job.versions.filter((v) => v.at <= from);
  const first = atOrBefore.at(-1);
  const within = job.versions.filter((v) => v.at > from && v.at <= to);
  return first === undefined ? within : [first, ...within];
}

const policyOf = (retry: ModelRetry) => ({
  maxAttempts: retry.maxAttempts,
  initialDelayMs: retry.initialDelaySeconds * 1000,
  maxDelayMs: retry.maxDelaySeconds * 1000,
});

/** The handler's text for a non-retryable failure (system.ts `handle`, mode `fatal`). */
const FATAL_ERROR = "planned permanent failure";

/**
 * What the runs record of their attempts, checked once the system is quiet (docs/api.md, retries
 * and "Pausing, resuming, replaying"; shared/retry.ts). A failure decides on the retry policy of
 * the job as its worker read it, some version in force while the attempt ran, so each check
 * accepts any such version:
 * - a failure's next attempt (`retryOf`) is at most `maxAttempts` (a replay or a resume's new run
 *   is an occurrence's next attempt outside the count, and carries no `retryOf`);
 * - a retryable failure ends FAILED while attempts remain and DEAD ("gave up after") once they
 *   ran out; a non-retryable one ends DEAD ("non-retryable error") at any attempt;
 * - a retry is due after its attempt's failure by a full-jitter backoff: within
 *   [0, min(maxDelay, initialDelay · 2^(attempt−1))], and (the model's draws are never below
 *   MIN_RANDOM_DRAW) not sooner than that share of it. The due time is checked while the retry
 *   can only have kept it: a start that waited (overlap, pause) puts the run back later.
 */
export function checkAttempts(model: Model, snap: Snapshot): Violation[] {
  const violations: Violation[] = [];
  const violate = (invariant: string, detail: string) => violations.push({ invariant, detail });
  const byId = new Map(snap.runs.map((r) => [r.runId, r]));
  for (const run of snap.runs) {
    const job = model.jobs.find((j) => j.id === run.jobId);
    if (job === undefined) continue;
    // A run that ran decided on a version in force between its latest start and its end.
    if (run.status === "FAILED" || run.status === "DEAD") {
      const from = Date.parse(run.startedAt ?? run.finishedAt ?? "");
      const to = Date.parse(run.finishedAt ?? "");
      const retries = versionsDuring(job, from, to).map((v) => v.retry);
      const fatal = (run.error ?? "").includes(FATAL_ERROR);
      const reason = run.reason ?? "";
      if (run.status === "FAILED") {
        if (fatal)
          violate(
            "a non-retryable failure ends DEAD, never FAILED",
            `${run.runId} (attempt ${run.attempt}): FAILED with ${run.error ?? ""}`,
          );
        else if (retries.length > 0 && retries.every((r) => run.attempt >= r.maxAttempts))
          violate(
            "a retryable failure ends DEAD once its attempts ran out",
            `${run.runId}: FAILED at attempt ${run.attempt}, maxAttempts ${retries.map((r) => r.maxAttempts).join(" or ")}`,
          );
      } else if (reason.startsWith("gave up after")) {
        if (fatal)
          violate(
            "a non-retryable failure is named as such",
            `${run.runId}: ${reason.slice(0, 120)}`,
          );
        if (retries.length > 0 && retries.every((r) => run.attempt < r.maxAttempts))
          violate(
            "a retryable failure ends FAILED, with a next attempt, while attempts remain",
            `${run.runId}: DEAD at attempt ${run.attempt} (${reason.slice(0, 80)}), maxAttempts ${retries.map((r) => r.maxAttempts).join(" or ")}`,
          );
      } else if (reason.startsWith("non-retryable error") && !fatal)
        violate(
          "only a non-retryable failure ends DEAD as non-retryable",
          `${run.runId}: ${reason.slice(0, 120)}`,
        );
    }

    if (run.retryOf === undefined) continue;
    const failed = byId.get(run.retryOf.runId);
    if (failed === undefined || failed.finishedAt === null) continue;
    const from = Date.parse(failed.startedAt ?? failed.finishedAt);
    const retries = versionsDuring(job, from, Date.parse(failed.finishedAt)).map((v) => v.retry);
    if (retries.length === 0) continue;
    if (retries.every((r) => run.attempt > r.maxAttempts))
      violate(
        "no failure's next attempt is past the retry policy's maxAttempts",
        `${run.runId}: attempt ${run.attempt} retries ${failed.runId} (${failed.status}), maxAttempts ${retries.map((r) => r.maxAttempts).join(" or ")}`,
      );
    // The failure that wrote this attempt is the one recorded: its ending and the due time share `now`.
    if (failed.status !== "FAILED" || failed.fence !== run.retryOf.fence) continue;
    const delay = Date.parse(run.dueAt) - Date.parse(failed.finishedAt);
    const ceilings = retries.map((r) => backoffCeiling(failed.attempt, policyOf(r)));
    const least = Math.min(...ceilings.map((c) => Math.floor(MIN_RANDOM_DRAW * (c + 1))));
    if (delay < least)
      violate(
        "a retry waits its backoff after the failure",
        `${run.runId}: due ${run.dueAt}, ${delay} ms after ${failed.runId} failed at ${failed.finishedAt}; the backoff after attempt ${failed.attempt} is at least ${least} ms (ceiling ${ceilings.join(" or ")} ms)`,
      );
    // Kept as the failure wrote it: never started, or started once and ran then.
    const kept = run.fence === 0 || (run.fence === 1 && run.durationMs !== null);
    if (kept && delay > Math.max(...ceilings))
      violate(
        "a retry's backoff is at most its ceiling",
        `${run.runId}: due ${delay} ms after ${failed.runId} failed at ${failed.finishedAt}, ceiling ${ceilings.join(" or ")} ms`,
      );
  }
  return violations;
}

/**
 * One holder per lease (docs/architecture.md, "Storage operations", run-start.ts): a start takes
 * a run that is QUEUED, or RUNNING under a lease that has run out (its worker died or stalled),
 * never one another start holds under a live lease (another worker's, or its own request sent
 * again after a lost answer), and never one that has ended.
 */
export function checkStarts(starts: readonly StartRecord[]): Violation[] {
  const violations: Violation[] = [];
  for (const start of starts) {
    const { before } = start;
    if (!start.applied) continue;
    const live = before.leaseUntil === null || before.leaseUntil >= start.at;
    if (before.status === "RUNNING" && live)
      violations.push({
        invariant: "a run is started again only once its holder's lease ran out",
        detail: `${start.runId}: ${start.workerId} took fence ${start.fence} at ${start.at} from ${before.workerId === start.workerId ? "its own start (a request sent again?)" : `another worker, ${before.workerId ?? "?"}`} (fence ${before.fence}), whose lease runs to ${before.leaseUntil ?? "none"}`,
      });
    else if (before.status !== "RUNNING" && before.status !== "QUEUED")
      violations.push({
        invariant: "an ended run is never started again",
        detail: `${start.runId}: ${start.workerId} took fence ${start.fence} at ${start.at} of a run ${before.status}`,
      });
  }
  return violations;
}
