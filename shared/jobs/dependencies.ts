import type { Engine } from "../engine.js";
import type { Job } from "../model.js";
import { isAfterSchedule, type ScheduleSpec } from "../schedule/index.js";
import {
  detachFromUpstream,
  linkUpstream,
  MAX_DEPENDENTS,
  type UpstreamWriteName,
  unlinkUpstream,
  upstreamUnchanged,
} from "../storage/dependents.js";
import { getJob } from "../storage/run-reads.js";
import type { NamedWrite } from "../storage/transaction.js";
import { ValidationError } from "../validation.js";
import { checkEditedJobPaths, checkNewJobPaths } from "./path-bound.js";

/**
 * Jobs a dependent's create or edit may read up its chain, and so hold unchanged in its
 * transaction (DynamoDB's limit is 100 items a transaction; the edit needs a few of its own).
 */
const MAX_CHAIN_JOBS = 80;

/** DynamoDB's most items in one transaction. */
const TRANSACTION_ITEMS = 100;
/**
 * An edit's own writes beside its upstreams' (job-edit.ts): the job, and its pending entry's and
 * set-aside record's deletes (a schedule of times edited to `after`) or its first entry (`after`
 * edited to times) and, for a one-off's `runAt` whose run there is under way, that run's check
 * (`runStillUnderWay`). An edit between schedules of times writes up to six, but has no upstreams.
 */
const EDIT_OWN_WRITES = 3;

const FIELD = "schedule.after.jobs";

/** The upstream job ids a schedule names (none for a schedule of times). */
export const upstreamsOf = (schedule: ScheduleSpec): readonly string[] =>
  isAfterSchedule(schedule) ? schedule.after.jobs : [];

/** A dependent's links as its create or edit writes them, and the jobs above it they were planned from. */
export interface DependentLinks {
  readonly writes: NamedWrite<UpstreamWriteName>[];
  /** The tenant's jobs above the schedule's upstreams (theirs too), by id: what its quota share counts. */
  readonly above: ReadonlyMap<string, Job>;
  /**
   * An edit's old upstreams whose unlinks did not fit in its transaction: taken out once it
   * committed (`detachAfterEdit`), as a cancel's are.
   */
  readonly detachAfterCommit?: readonly string[];
}

/**
 * The writes that add a new `after` job to its upstreams' dependents, after checking each
 * upstream is the tenant's and not cancelled (400 naming `schedule.after.jobs` when not), and the chain above them
 * (as an edit reads it, up to 80 jobs). Every job of the chain is held at the version read, so
 * what the job counts towards runsPerMinute is what they make it run when it commits, and each
 * gets one more on its `linkRevision`, so an edit of its schedule planned before this commit
 * counts again with the new job below it. A new job cannot close a cycle: nothing names its id yet.
 */
export async function linkNewDependent(
  engine: Engine,
  tenantId: string,
  jobId: string,
  schedule: ScheduleSpec,
  read: JobRead = (id) => getJob(engine, id),
): Promise<DependentLinks> {
  const upstreams = upstreamsOf(schedule);
  const above = await walkUpstreams({ jobId, tenantId }, upstreams, read);
  checkRoomBelow(upstreams, above);
  checkNewJobPaths(jobId, schedule, above);
  const writes = [...above.values()].map((job) =>
    upstreams.includes(job.jobId)
      ? linkUpstream(engine, job.jobId, jobId, tenantId, job.version)
      : upstreamUnchanged(engine, job.jobId, job.version),
  );
  return { writes, above };
}

/** How an upstream walk reads a job: one consistent read each, or a batch's shared reads. */
type JobRead = (jobId: string) => Promise<Job | null>;

/**
 * The reads of a batch create's upstream walks (`linkNewDependent`): each job read once for all of
 * them, the first read's answer shared by every walk that reaches the job. Each job of a batch read
 * the chain above its upstreams on its own, so 25 jobs after one upstream read that chain 25 times
 * (up to 2,025 whole items, consistently, refused or not) in one request, from the table every
 * tenant shares. The reads of one request are as fresh as concurrent ones: each link's write is
 * conditioned on the version read, as a single create's is.
 */
export function batchUpstreamReads(engine: Engine): JobRead {
  const reads = new Map<string, Promise<Job | null>>();
  return (jobId) => {
    let job = reads.get(jobId);
    if (job === undefined) {
      job = getJob(engine, jobId);
      reads.set(jobId, job);
    }
    return job;
  };
}

/** A job not yet created, in the upstream walk: no upstream can name it (job ids are checked). */
const NOT_YET_CREATED = "(a new job)";

/**
 * Checks a new `after` job's upstreams as its create does (`linkNewDependent`), writing nothing:
 * each the tenant's, the chain above them short enough to check, each with room for one more
 * dependent; else the create's 400 naming `schedule.after.jobs`. Another tenant's job is refused
 * as one that does not exist.
 */
export async function checkNewDependent(
  engine: Engine,
  tenantId: string,
  schedule: ScheduleSpec,
): Promise<void> {
  const upstreams = upstreamsOf(schedule);
  if (upstreams.length === 0) return;
  const above = await walkUpstreams({ jobId: NOT_YET_CREATED, tenantId }, upstreams, (id) =>
    getJob(engine, id),
  );
  checkRoomBelow(upstreams, above);
  checkNewJobPaths(NOT_YET_CREATED, schedule, above);
}

/**
 * The writes that move an edited job's links from its old upstreams to its new ones, after
 * checking each new upstream is the tenant's and that none of them depends on the job (400
 * naming the cycle). The jobs the check walked are held at the versions it read, so two edits
 * that would close a cycle together cannot both commit, and what the job counts towards
 * runsPerMinute is what they make it run; each gets one more on its `linkRevision`.
 */
export async function relinkDependent(
  engine: Engine,
  job: Job,
  schedule: ScheduleSpec,
): Promise<DependentLinks> {
  const before = new Set(upstreamsOf(job.schedule));
  const after = upstreamsOf(schedule);
  if (after.length === 0 && before.size === 0) return { writes: [], above: new Map() };
  const above = await walkUpstreams(job, after, (id) => getJob(engine, id));
  checkRoomBelow(
    after.filter((id) => !before.has(id)),
    above,
  );
  // Paths grow only with a new upstream (then those to the jobs below it too); an edit that only
  // drops upstreams makes fewer, and is taken over a graph deeper below than an edit may read.
  if (after.some((id) => !before.has(id))) await checkEditedJobPaths(engine, job, schedule, above);
  const walked = new Map([...above].map(([id, upstream]) => [id, upstream.version]));
  const writes: NamedWrite<UpstreamWriteName>[] = [];
  const written = new Set<string>();
  for (const id of after) {
    written.add(id);
    if (!before.has(id)) {
      writes.push(linkUpstream(engine, id, job.jobId, job.tenantId, walked.get(id)));
    } else {
      writes.push(upstreamUnchanged(engine, id, walked.get(id) ?? 0));
    }
  }
  const leaving: string[] = [];
  for (const id of before) {
    if (written.has(id)) continue;
    written.add(id);
    // An old upstream still above the job by another path is held as the rest of the walked
    // chain is, its unlink in the transaction: an edit of its schedule planned before this commit
    // counted the job's old paths below it, and would otherwise commit beside it.
    const held = walked.get(id);
    if (held !== undefined) writes.push(unlinkUpstream(engine, id, job.jobId, held));
    // A deleted upstream has no dependents left to take this job out of.
    else if ((await getJob(engine, id)) !== null) leaving.push(id);
  }
  for (const [id, version] of walked) {
    if (!written.has(id)) writes.push(upstreamUnchanged(engine, id, version));
  }
  // The links and the held chain must commit with the edit; an unlink may follow it: until then the
  // old upstream lists a job whose schedule no longer names it, which its fan-out passes over.
  const room = Math.max(0, TRANSACTION_ITEMS - EDIT_OWN_WRITES - writes.length);
  writes.push(...leaving.slice(0, room).map((id) => unlinkUpstream(engine, id, job.jobId)));
  const detachAfterCommit = leaving.slice(room);
  return { writes, above, ...(detachAfterCommit.length > 0 ? { detachAfterCommit } : {}) };
}

/**
 * Takes an edited job out of the old upstreams its transaction had no room to unlink. The edit
 * has committed, so a failure here is logged, not answered: a repeat of the edit finds it written
 * and writes nothing (`Job.lastEdit`), and a link left behind is one the fan-out passes over.
 */
export async function detachAfterEdit(
  engine: Engine,
  jobId: string,
  links: DependentLinks | null,
): Promise<void> {
  await Promise.all(
    (links?.detachAfterCommit ?? []).map((upstreamId) =>
      detachFromUpstream(engine, upstreamId, jobId).catch((error: unknown) => {
        engine.obs.log.warn("an edited job's old upstream still lists it", {
          jobId,
          upstreamId,
          error: String(error),
        });
      }),
    ),
  );
}

/**
 * Reads the chain above `upstreams` (each job's own `after` upstreams, and theirs); the jobs by
 * id. Throws a 400 naming `schedule.after.jobs` for an upstream that is not the tenant's, a chain
 * that leads back to `job` (the message names the cycle), or one longer than the check may hold,
 * which it knows after reading one job more than that (and those gone or not the tenant's).
 */
async function walkUpstreams(
  job: Pick<Job, "jobId" | "tenantId">,
  upstreams: readonly string[],
  readJob: JobRead,
): Promise<Map<string, Job>> {
  const found = new Map<string, Job>();
  const cameFrom = new Map<string, string>();
  let frontier = [...upstreams];
  for (const id of upstreams) cameFrom.set(id, job.jobId);
  for (const id of upstreams) {
    if (id === job.jobId) throw cycleError([job.jobId, job.jobId]);
  }
  while (frontier.length > 0) {
    // No more reads at once than could still be held: one past them is refused anyway, so a graph
    // above that names many jobs (each up to 20) costs about the limit's reads, not 20 times it.
    const room = MAX_CHAIN_JOBS + 1 - found.size;
    const reading = frontier.slice(0, room);
    const read = await Promise.all(
      reading.map((id) =>
        upstreams.includes(id)
          ? tenantUpstream(readJob, job.tenantId, id)
          : readJob(id).then((above) => (above?.tenantId === job.tenantId ? above : null)),
      ),
    );
    const next: string[] = [];
    for (const upstream of read) {
      if (upstream === null) continue;
      found.set(upstream.jobId, upstream);
      if (found.size > MAX_CHAIN_JOBS) {
        throw new ValidationError([
          {
            field: FIELD,
            message: `the jobs above this one's upstreams are more than ${MAX_CHAIN_JOBS}: too many to check (for a cycle, and for the runs they make this one run)`,
          },
        ]);
      }
      for (const above of upstreamsOf(upstream.schedule)) {
        if (above === job.jobId) {
          throw cycleError(pathBack(cameFrom, upstream.jobId, job.jobId));
        }
        if (cameFrom.has(above)) continue;
        cameFrom.set(above, upstream.jobId);
        next.push(above);
      }
    }
    frontier = [...frontier.slice(room), ...next];
  }
  return found;
}

/**
 * Each upstream a job is to be linked below is not cancelled (it runs no more, so nothing would
 * ever run the job) and has room for one more dependent, else a 400. An upstream cancelled after
 * the job was linked below it stays linked: the job's other edits go on.
 */
function checkRoomBelow(linking: readonly string[], above: ReadonlyMap<string, Job>): void {
  const cancelled = linking.filter((id) => above.get(id)?.status === "CANCELLED");
  if (cancelled.length > 0)
    throw new ValidationError([
      {
        field: FIELD,
        message: `job ${cancelled.join(", ")} is cancelled: it runs no more, so nothing would run this job after it`,
      },
    ]);
  const full = linking.filter((id) => (above.get(id)?.dependents.length ?? 0) >= MAX_DEPENDENTS);
  if (full.length > 0)
    throw new ValidationError([
      {
        field: FIELD,
        message: `job ${full.join(", ")} already has ${MAX_DEPENDENTS.toLocaleString("en-US")} jobs after it, the most one job may have`,
      },
    ]);
}

/** The cycle as "job → upstream → … → job", each step a job that runs after the next. */
function pathBack(cameFrom: ReadonlyMap<string, string>, from: string, job: string): string[] {
  const path = [from];
  let at = from;
  while (at !== job) {
    const previous = cameFrom.get(at);
    if (previous === undefined) break;
    path.push(previous);
    at = previous;
  }
  return [job, ...path.reverse().slice(1), job].filter(
    (id, i, all) => i === 0 || id !== all[i - 1],
  );
}

function cycleError(path: readonly string[]): ValidationError {
  return new ValidationError([
    {
      field: FIELD,
      message: `would make a cycle: ${path.join(" → ")} (each job runs after the next)`,
    },
  ]);
}

/** The upstream when it is the tenant's job, else a 400 naming `schedule.after.jobs`. */
async function tenantUpstream(read: JobRead, tenantId: string, id: string): Promise<Job> {
  const upstream = await read(id);
  if (upstream === null || upstream.tenantId !== tenantId)
    throw new ValidationError([{ field: FIELD, message: `no job ${id} of this tenant` }]);
  return upstream;
}
