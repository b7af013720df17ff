import { CANCEL_REASONS } from "../cancel-reasons.js";
import { forEachConcurrently } from "../concurrency.js";
import type { Engine } from "../engine.js";
import { ConcurrentUpdateError, RunEndedError, RunNotFoundError } from "../errors.js";
import { endsOneOff } from "../execution/run-endings.js";
import { parseRunId } from "../keys.js";
import type { CancelSource, Job, Run } from "../model.js";
import { retryOnContention } from "../storage/dynamo-errors.js";
import { liveRunsOfJob } from "../storage/job-queries.js";
import { finishedAfter, ranForLastRun } from "../storage/last-run.js";
import { requestRunCancel } from "../storage/run-cancel.js";
import { endRunAsSeen } from "../storage/run-end-unowned.js";
import { recordRunOnJob } from "../storage/run-on-job.js";
import { getRun } from "../storage/run-reads.js";
import { liveRunRanges } from "./one-off-floor.js";
import { getTenantJob } from "./queries.js";

const ATTEMPTS = 5;

/**
 * Cancels one run of the tenant's job (`POST /jobs/{id}/runs/{runId}/cancel`).
 * A QUEUED run ends CANCELLED now (its message, when it comes, is acknowledged
 * without running); a RUNNING one gets a cancel request its worker carries out
 * within a heartbeat. A one-off job whose own occurrence is cancelled has
 * nothing left to run and completes. A run already CANCELLED is answered as it
 * stands (a retried cancel's answer, nothing written); one that ended otherwise is refused
 * (`RunEndedError`, naming its status); a repeat of a pending request answers
 * the run as it stands while its worker's lease is live, and ends it once that lapsed.
 */
export async function cancelRun(
  engine: Engine,
  tenantId: string,
  jobId: string,
  runId: string,
): Promise<Run> {
  const job = await getTenantJob(engine, tenantId, jobId);
  const ref = parseRunId(runId);
  if (ref === null || ref.jobId !== jobId) throw new RunNotFoundError(runId);
  for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
    const run = await getRun(engine, ref);
    if (run === null) throw new RunNotFoundError(runId);
    const crashed = ranBefore(job, run, engine.clock());
    const outcome = await cancelLiveRun(engine, run, "api", { crashedRunning: crashed });
    if (outcome === "ended") {
      if (run.status !== "CANCELLED") throw new RunEndedError(runId, run.status);
      // A repeat of a cancel that ended the run and died before its job's write makes that write:
      // a handed-over run has no message left to repair it. Each part is conditioned as the
      // first was (lastRun only over a run that finished before it, the completion only of an
      // ACTIVE one-off of this occurrence), so a repeat after the write changes nothing.
      if (run.cancelledBy === "api")
        await recordCancelOnJob(
          engine,
          run,
          job.status === "ACTIVE" && endsOneOff(job, run, "CANCELLED"),
        );
      // A client's retry of a cancel that went through (its answer lost, or a 503 after the run's
      // write) gets the cancel's answer: the run cancelled, as it stands, not a 409 its retry loop
      // would take for a failure. Whoever cancelled it (a job cancel, a pause), it is as asked.
      return run;
    }
    if (outcome === null) continue;
    if (outcome.status === "CANCELLED")
      await recordCancelOnJob(
        engine,
        outcome,
        job.status === "ACTIVE" && endsOneOff(job, run, "CANCELLED"),
        crashed,
      );
    return outcome;
  }
  throw new ConcurrentUpdateError(`run ${runId} kept changing; try again`);
}

/**
 * The job's side of a run this cancel ended: `lastRun` when its handler ran (a RUNNING run, handed
 * over to its async target or under a dead worker's lapsed lease: `ranForLastRun`), the completion
 * of a one-off whose own occurrence it was, and, when `listed`, its entry out of `activeRuns`.
 * Returns the job as that write left it (`recordRunOnJob`'s answer), null when it wrote nothing.
 */
async function recordCancelOnJob(
  engine: Engine,
  run: Run,
  completesJob: boolean,
  listed = false,
): Promise<Job | null> {
  const ran = ranForLastRun(run);
  if (!ran && !completesJob && !listed) return null;
  return recordRunOnJob(
    engine,
    run,
    { status: "CANCELLED", ran, tracked: listed, completesJob },
    { answer: true },
  );
}

/**
 * Cancels a run not yet ended, as read: QUEUED, RUNNING under a lapsed lease
 * (no worker holds it), or handed over to its async target, ends CANCELLED now; RUNNING under a live lease gets a
 * cancel request (one already asked is left as it is). A cancel asked earlier, under a lease that
 * has lapsed since (its worker died before carrying it out), ends the run now as that one asked
 * (who, when). Returns the run as it now stands, "ended" when it had ended, or null when it
 * changed meanwhile.
 */
async function cancelLiveRun(
  engine: Engine,
  run: Run,
  by: CancelSource,
  { keepListed = false, crashedRunning = false }: EndingOptions = {},
): Promise<Run | "ended" | null> {
  const now = engine.clock();
  if (run.status !== "QUEUED" && run.status !== "RUNNING") return "ended";
  // A run handed over to its async target has no worker to tell: it ends now, and the target's
  // next heartbeat or completion is refused (409).
  const held =
    run.status === "RUNNING" && !run.handedOverAt && (run.leaseUntil ?? "") > now.toISOString();
  if (held) return run.cancelRequestedAt ? run : requestRunCancel(engine, run, by, now);
  const asked = run.cancelRequestedAt ? (run.cancelledBy ?? by) : by;
  return endRunAsSeen(engine, run, "CANCELLED", CANCEL_REASONS[asked], now, {
    by: asked,
    keepListed,
    crashedRunning,
  });
}

interface EndingOptions {
  /** The run stays in its job's activeRuns for the caller's job write (`endRunAsSeen`). */
  readonly keepListed?: boolean;
  /** A QUEUED run an earlier worker ran and died holding (`ranBefore`): marked `crashedRunning`. */
  readonly crashedRunning?: boolean;
}

/**
 * A QUEUED run its job lists under a lapsed lease was admitted (its handler let on) and has not
 * ended: the worker that ran it died, and a later delivery put it back to wait (its overlap policy,
 * its tenant's concurrentRuns quota) or has yet to come. Its handler ran: a cancel's ending of it
 * counts it as run, as a delivery's ending of a run asked to cancel under a worker that died does
 * (`crashedRunning`, no duration: the start it shows is a later delivery's, if any). A run listed
 * under a live lease that reads QUEUED runs now with its start unwritten (run-fence.ts).
 */
function ranBefore(job: Job, run: Run, now: Date): boolean {
  const leaseUntil = job.activeRuns[run.runId];
  return run.status === "QUEUED" && leaseUntil !== undefined && leaseUntil <= now.toISOString();
}

/**
 * Cancels the job's runs that are under way (`POST /jobs/{id}/cancel`, and a
 * pause with `running: "cancel"`), and with `queued` its QUEUED runs too.
 * A running run is one listed in the job's `activeRuns` (every admitted run of
 * a recurring job), or a RUNNING run of an occurrence from one lookahead back
 * to the end of the fast-path window (runs started and not yet admitted; for a
 * one-off job, whose runs are not listed, from its floor up to its occurrence: `oneOffRunsFrom`,
 * and each occurrence it keeps below its floor, `oneOffBelow`; and the one-off era a job made
 * recurring had, `oneOffEra`: `liveRunRanges`): one consistent query of the job's own partition
 * (one more when the era lies apart, and for each occurrence kept below a floor), plus a read of
 * each active run outside it. A listed run this ends
 * stays listed until the job's write of it (lastRun, out of activeRuns). A `repeat` (the job
 * already ended by this cancel) also brings the job's `lastRun` up to the newest run in that range
 * or still listed that `by` ended after its handler ran, and takes the listed ones out: the cancel
 * that ended it may have died before its job's write, and a run it ended itself (handed over, or
 * under a lapsed lease) has no message left to repair that write. The query reads the same items
 * either way. Returns the job as its writes of the runs left it (the one its last write answered,
 * by `activeRevision`, which each of them moves on), or `job` when none was written.
 */
export async function cancelRunsOfJob(
  engine: Engine,
  job: Job,
  by: CancelSource,
  queued: boolean,
  { repeat = false }: { readonly repeat?: boolean } = {},
): Promise<Job> {
  const now = engine.clock();
  let latest = job;
  const answered = (written: Job | null) => {
    if (written !== null && written.activeRevision >= latest.activeRevision) latest = written;
  };
  // A listed run this ends stays listed until the job's write of it, which takes it out: a cancel
  // that dies between the two leaves it there for its repeat, however old its occurrence.
  const listed = (run: Run) => run.status === "RUNNING" && job.activeRuns[run.runId] !== undefined;
  const cancel = async (run: Run) => {
    for (let attempt = 0, current: Run | null = run; current && attempt < ATTEMPTS; attempt++) {
      // A run's write meets a transaction on it (a claim's, a worker's ending): sent again.
      const live = current;
      const crashed = ranBefore(job, live, now);
      const outcome = await retryOnContention(engine, "cancel run", () =>
        cancelLiveRun(engine, live, by, { keepListed: listed(live), crashedRunning: crashed }),
      );
      if (outcome !== null && outcome !== "ended" && outcome.status === "CANCELLED")
        answered(await recordCancelOnJob(engine, outcome, false, listed(live) || crashed));
      if (outcome !== null) return;
      current = await getRun(engine, current);
    }
  };
  // A one-off's retries and replays keep their occurrence, and unlisted (a one-off's runs are
  // not) are found by the query alone: from its floor (`oneOffFrom`), and at each occurrence it
  // keeps below it (`oneOffBelow`), so its occurrences before an edit moved it count too (a retry
  // there runs at its old time: `retryLeftByMove`, a failure's retry), however long ago that was;
  // the history of a recurring job it was before is not read, but for each occurrence of it whose
  // run started or was replayed below the floor since, and a `runAt` far back, each on its own.
  // A recurring job's one-off era (`oneOffEra`) is read too: a run of the one-off under way when
  // an edit made it recurring, unlisted, runs on under it however long ago its occurrence was.
  const statuses = [
    ...(queued ? (["QUEUED"] as const) : []),
    "RUNNING" as const,
    ...(repeat ? (["CANCELLED"] as const) : []),
  ];
  const seen = new Set<string>();
  const ended: Run[] = [];
  for (const [from, to] of liveRunRanges(engine, job, now))
    for await (const runs of liveRunsOfJob(
      engine,
      job.jobId,
      new Date(from),
      new Date(to),
      statuses,
    )) {
      for (const run of runs) seen.add(run.runId);
      ended.push(...runs.filter((run) => endedBy(run, by)));
      await forEachConcurrently(
        runs.filter((run) => run.status !== "CANCELLED"),
        16,
        cancel,
      );
    }
  const active = Object.entries(job.activeRuns).filter(([runId]) => !seen.has(runId));
  await forEachConcurrently(active, 16, async ([runId, leaseUntil]) => {
    const ref = parseRunId(runId);
    const run = ref ? await getRun(engine, ref) : null;
    // A run never started that is listed under a live lease was admitted by a worker that runs it
    // with its start unwritten (run-fence.ts): it is under way, though it reads QUEUED.
    const heldUnwritten =
      run?.status === "QUEUED" && run.fence === 0 && leaseUntil > now.toISOString();
    if (run?.status === "RUNNING" || heldUnwritten) await cancel(run);
    else if (repeat && run && endedBy(run, by)) ended.push(run);
  });
  for (const written of await recordEarlierEndings(engine, job, ended)) answered(written);
  return latest;
}

/**
 * A repeat's job write of the runs an earlier cancel ended after their handler ran (`ended`): each
 * still listed leaves `activeRuns`, and the newest is `lastRun`, conditioned as the first write was
 * (only over a run that finished before it), so a repeat after that write changes nothing.
 */
async function recordEarlierEndings(
  engine: Engine,
  job: Job,
  ended: readonly Run[],
): Promise<(Job | null)[]> {
  let newest: Run | null = null;
  for (const run of ended)
    if (newest === null || finishedAfter(lastRunOf(run), lastRunOf(newest))) newest = run;
  const written: (Job | null)[] = [];
  await forEachConcurrently(ended, 16, async (run) => {
    const listed = job.activeRuns[run.runId] !== undefined;
    if (listed || (run === newest && finishedAfter(lastRunOf(run), job.lastRun)))
      written.push(await recordCancelOnJob(engine, run, false, listed));
  });
  return written;
}

/** A run `by` ended CANCELLED after its handler ran: one that may be its job's `lastRun`. */
const endedBy = (run: Run, by: CancelSource): boolean =>
  run.status === "CANCELLED" && run.cancelledBy === by && ranForLastRun(run);

/** A run ended as `finishedAfter` orders it. */
const lastRunOf = (run: Run) => ({ runId: run.runId, finishedAt: run.finishedAt ?? "" });
