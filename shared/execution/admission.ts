import type { Engine } from "../engine.js";
import { ConcurrentUpdateError, JobNotFoundError } from "../errors.js";
import type { Job, Run } from "../model.js";
import { decideOverlap, type OverlapDecision } from "../policies.js";
import {
  type AdmissionChange,
  MAX_LISTED_RUNS,
  recordAdmission,
  startOwedElsewhere,
} from "../storage/admission.js";
import { readListedRuns } from "../storage/job-runs.js";
import { getJob } from "../storage/run-reads.js";

/**
 * Overlap is decided when a run starts, against the job's runs whose leases
 * are live (job.activeRuns). Admissions of one job are serialised by the
 * job's activeRevision, so two runs starting at once cannot both see a free
 * slot. A run's ending leaves its entry in place (job-runs.ts): the listed
 * runs are read, and the entries of ended runs are dropped on the way (the
 * latest run that ran becomes the job's lastRun). Only live leases count (the
 * entry's, or the run's own as read), so a crashed run blocks its job for one lease at most; its lapsed entry stays
 * until the run ends, so that its own admission, when it is delivered again,
 * knows it was admitted before (a rerun). A job deleted meanwhile is
 * `JobNotFoundError`.
 */
type Admission =
  | { readonly decision: OverlapDecision; readonly job: Job }
  /** The run is listed under a live lease: another delivery of it was admitted and runs it. */
  | { readonly decision: { readonly action: "held elsewhere" }; readonly job: Job };

const MAX_ADMISSION_ATTEMPTS = 8;

/**
 * The runs that count as under way for `runId`'s overlap decision: those under a live lease; every
 * listed one when the job lists its most runs (MAX_LISTED_RUNS) and not this one, which would
 * add to the list. Runs whose lease lapsed without their ending (a worker died, a long-job target
 * went quiet) then hold the job's next runs back as running runs do, so the list, on the job's
 * item, stays within DynamoDB's 400 KB; each one that ends frees its place at the next read.
 */
function underWayFor(job: Job, runId: string, now: Date): string[] {
  const listed = Object.keys(job.activeRuns);
  return listed.length >= MAX_LISTED_RUNS && job.activeRuns[runId] === undefined
    ? listed
    : liveRunIds(job, now);
}

function liveRunIds(job: Job, now: Date): string[] {
  const nowIso = now.toISOString();
  return Object.entries(job.activeRuns)
    .filter(([, leaseUntil]) => leaseUntil > nowIso)
    .map(([runId]) => runId);
}

export async function admitRun(
  engine: Engine,
  initial: Job,
  runId: string,
  leaseUntil: Date,
  options: {
    /**
     * The run's start is unwritten (a first start, see run-fence.ts), so nothing yet kept another
     * delivery of it from starting too. If the job lists the run under a live lease, another
     * delivery was admitted with it: one still within its time for the start's first write (read
     * from its listed lease by the lead its admission kept, as this one's keeps
     * `firstWriteLeadMs`) runs it, and this one must not; one past it has missed the first write it
     * owed (the run would read RUNNING), so it died, and this delivery takes the run over.
     */
    readonly unwrittenStart?: {
      readonly firstWriteWithinMs: number;
      readonly firstWriteLeadMs: number;
    };
    /**
     * A retry or replay (attempt > 1): it waits for a live run rather than being skipped. A first
     * attempt the job lists already (admitted before, its worker died) is taken as one too.
     */
    readonly rerun?: boolean;
  } = {},
): Promise<Admission> {
  let job = initial;
  for (let attempt = 0; attempt < MAX_ADMISSION_ATTEMPTS; attempt++) {
    const now = engine.clock();
    if (
      options.unwrittenStart &&
      startOwedElsewhere(job, runId, now, {
        leaseMs: engine.settings.leaseMs,
        firstWriteWithinMs: options.unwrittenStart.firstWriteWithinMs,
      })
    )
      return { decision: { action: "held elsewhere" }, job };
    // A first attempt the job lists already was admitted before and did not end: its worker died
    // (or let it go) after its handler was let on, so its occurrence has had its turn, as a
    // retry's has. Admissions keep such an entry past its lease (below) until the run comes back.
    const rerun = options.rerun === true || job.activeRuns[runId] !== undefined;
    // A run that starts whatever its job's live leases say (none, or allow under its bound) learns
    // nothing from reading the runs under way: it reads only the lapsed entries, dropping the
    // ended ones, for lastRun. Otherwise it reads every listed run, to count only those still
    // under way. Under buffer_one, a first attempt that finds another run in the waiting place
    // reads it too: while it waits still, it goes first.
    const byLease = underWayFor(job, runId, now);
    const startsAnyway =
      decideOverlap({
        policy: job.policies.overlap,
        maxConcurrent: job.policies.maxConcurrent,
        runId,
        liveRunIds: byLease,
        bufferedRunId: job.bufferedRunId,
        rerun,
        rerunWaiting: job.rerunWaiting ?? null,
      }).action === "start";
    // A waiting rerun marked on the job is read with the listed runs, to tell whether it waits
    // still: only by a run that does not start anyway (a first attempt finding one marked).
    const read = startsAnyway
      ? {
          ...job,
          activeRuns: omit(job.activeRuns, byLease),
          bufferedRunId: null,
          rerunWaiting: null,
        }
      : job;
    const [listed] = await readListedRuns(engine, [read]);
    const view: Job = {
      ...job,
      activeRuns: omit(job.activeRuns, listed?.ended ?? []),
      lastRun: listed?.job.lastRun ?? job.lastRun,
    };
    // A lapsed entry whose run has not ended (its worker died, or shut down mid-run) stays: the
    // run's own admission, when it comes back, reads it there and waits rather than be skipped.
    // One whose run reads RUNNING under a live lease of its own counts as live: its heartbeats
    // keep the run's lease and failed to extend the entry (a throttled job item). Read anyway
    // (a run that starts by the entries reads the lapsed ones), it costs no request.
    const live = [...new Set([...underWayFor(view, runId, now), ...(listed?.heldPastEntry ?? [])])];
    // The marked rerun waits still, or its mark is stale (its run ended unadmitted: cancelled,
    // dead) and is dropped by this admission's write.
    const rerunWaiting = listed?.rerunWaiting ?? null;
    const staleRerunMark =
      !startsAnyway &&
      job.rerunWaiting != null &&
      job.rerunWaiting !== runId &&
      rerunWaiting === null;
    // A buffered run that ended without being admitted no longer holds the slot, whichever path
    // ended it: this run takes the slot over. One that waits still goes first, live runs or not.
    const buffered =
      job.bufferedRunId !== null &&
      job.bufferedRunId !== runId &&
      job.policies.overlap === "buffer_one" &&
      listed?.bufferedWaiting === true
        ? job.bufferedRunId
        : null;
    const decision = decideOverlap({
      policy: job.policies.overlap,
      maxConcurrent: job.policies.maxConcurrent,
      runId,
      liveRunIds: live,
      bufferedRunId: buffered,
      rerun,
      rerunWaiting,
    });
    if (decision.action === "skip") return { decision, job };
    let change: AdmissionChange;
    if (decision.action === "start")
      change = {
        kind: "start",
        runId,
        leaseUntil,
        firstWriteLeadMs: options.unwrittenStart?.firstWriteLeadMs,
      };
    // buffer_one's one waiting place, unless another waiting run holds it.
    else if (job.policies.overlap === "buffer_one" && buffered === null)
      change = { kind: "buffer", runId };
    // A retry or replay behind a live run (and behind buffer_one's waiting run) marks itself on
    // the job, so that the next occurrence yields to it rather than start ahead of it again; once
    // marked (or while another waiting rerun holds the mark) it has nothing to record. Under allow
    // it marks itself at the bound the same way, so that a first attempt leaves it the slot that
    // frees.
    else if (rerun && job.rerunWaiting !== runId && rerunWaiting === null)
      change = { kind: "rerun waits", runId };
    // A first attempt under allow at its bound (or giving way to a waiting rerun): nothing to
    // record, the run just waits its turn.
    else return { decision, job };
    let raced: ConcurrentUpdateError | undefined;
    try {
      await recordAdmission(engine, job, change, {
        dropped: listed?.ended ?? [],
        lastRun: view.lastRun,
        staleRerunMark,
      });
      // The runs ahead end without writing the job, so one may have ended (and found no run to
      // wake) between the read above and the write that gave this run the slot: they are read
      // again, and if one has ended, this run decides again now rather than at its recheck. A
      // run that held the slot already is woken by such an ending.
      if (
        change.kind === "start" ||
        job.bufferedRunId === runId ||
        !(await anyEnded(engine, view, live))
      )
        return { decision, job };
    } catch (error) {
      if (!(error instanceof ConcurrentUpdateError)) throw error;
      raced = error;
    }
    const fresh = await getJob(engine, job.jobId);
    if (fresh === null) throw new JobNotFoundError(job.jobId, { cause: raced });
    job = fresh;
  }
  // Heavy contention on one job: let the run wait and try again rather than spin.
  return { decision: { action: "buffer" }, job };
}

function omit(entries: Readonly<Record<string, string>>, ids: readonly string[]) {
  const left = { ...entries };
  for (const id of ids) delete left[id];
  return left;
}

/** Whether any of the live runs `live` of the job as `view` shows it has ended by now. */
async function anyEnded(engine: Engine, view: Job, live: readonly string[]): Promise<boolean> {
  const ahead = Object.fromEntries(live.map((runId) => [runId, view.activeRuns[runId] ?? ""]));
  const [listed] = await readListedRuns(engine, [
    { ...view, activeRuns: ahead, bufferedRunId: null, rerunWaiting: null },
  ]);
  return (listed?.ended.length ?? 0) > 0;
}

/**
 * A start held unwritten (dated at its take, leased a lease on) owes its first write a beat after
 * its take: that long before its listed lease, which its admission keeps on the job for another
 * delivery, perhaps of a deploy with another lease, to read.
 */
export function unwrittenStartOf(run: Run, firstWriteWithinMs: number, now: Date) {
  const takenAt = Date.parse(run.startedAt ?? now.toISOString());
  const leaseUntil = Date.parse(run.leaseUntil ?? now.toISOString());
  return { firstWriteWithinMs, firstWriteLeadMs: leaseUntil - takenAt - firstWriteWithinMs };
}
