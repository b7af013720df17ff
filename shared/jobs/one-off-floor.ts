import { claimReachEnd, fastPathHorizonEnd } from "../dispatch/fast-path-window.js";
import type { Engine } from "../engine.js";
import type { Job } from "../model.js";
import { type ScheduleSpec, windowMsOf } from "../schedule/index.js";
import { ONE_OFF_BELOW_MOST } from "../storage/items.js";

/**
 * The job's `oneOffFrom` and `oneOffBelow` once it has `schedule`, written at `now` by a create
 * (`job` null) or an edit of `job`: the floor is the time it became one (a trigger's run is
 * scheduled for its trigger's time, never before), or when it was a one-off already, its floor.
 * Each `runAt` it has (and, a one-off already, the `runAt` it leaves: a retry there runs at that
 * old time) below the floor is kept on the job when more than a lookahead below it, read on its
 * own, as a run's below the floor is (`floorLoweringFor`): a `runAt` far in the past does not
 * bring the recurring history the job had since into the reads of its runs. A nearer one, or one
 * past the occurrences the job keeps, lowers the floor to it. Undefined for a schedule that is not
 * a one-off's: its runs are listed, and a recurring job's history before it became a one-off is
 * none of the one-off's.
 */
function oneOffReachOf(
  engine: Engine,
  job: Job | null,
  schedule: ScheduleSpec,
  now: Date,
): { readonly floor: number; readonly below: readonly string[] } | undefined {
  if (!("runAt" in schedule)) return undefined;
  const runAts = [Date.parse(schedule.runAt)];
  let floor = now.getTime();
  const below: string[] = [];
  if (job !== null && "runAt" in job.schedule) {
    runAts.push(Date.parse(job.schedule.runAt));
    if (job.oneOffFrom !== undefined) floor = Math.min(floor, Date.parse(job.oneOffFrom));
    below.push(...(job.oneOffBelow ?? []));
  }
  for (const at of runAts) {
    const iso = new Date(at).toISOString();
    if (at >= floor || below.includes(iso)) continue;
    if (at < floor - engine.settings.lookaheadMs && below.length < ONE_OFF_BELOW_MOST)
      below.push(iso);
    else floor = at;
  }
  return { floor, below };
}

/**
 * `oneOffFrom` and `oneOffBelow` as a job's fields (`oneOffReachOf`): absent when it has none to
 * write. A job made a one-off (again) has its floor set anew and keeps no occurrences below it but
 * its `runAt`'s: those of the one-off it was are its era's (`withOneOffEra`).
 */
export function withOneOffFloor(
  engine: Engine,
  job: Job | null,
  schedule: ScheduleSpec,
  now: Date,
): Pick<Job, "oneOffFrom" | "oneOffBelow"> {
  const reach = oneOffReachOf(engine, job, schedule, now);
  if (reach === undefined) return {};
  const oneOffFrom = new Date(reach.floor).toISOString();
  const written = reach.below.length > 0 || job?.oneOffBelow !== undefined;
  return written ? { oneOffFrom, oneOffBelow: reach.below } : { oneOffFrom };
}

/**
 * The occurrences below a one-off's floor that its runs have (`oneOffBelow`), epoch ms: each is
 * read on its own, every attempt of it. None for a recurring job (its one-off era keeps those of
 * the one-off it was).
 */
export function oneOffPointsBelow(job: Job): number[] {
  return "runAt" in job.schedule ? (job.oneOffBelow ?? []).map((at) => Date.parse(at)) : [];
}

/**
 * `oneOffEra` as written by an edit of `job` to `schedule` at `now`: when it makes a one-off
 * recurring, the one-off's occurrences, from where a cancel of it read them (`oneOffRunsFrom`) to
 * now or its `runAt`, whichever is later, but no further than the claim reach (a `runAt` beyond
 * it has no run yet: the recurring history of a week would be read), and those it kept below its
 * floor (`oneOffBelow`, as `below`). Its runs there are not
 * listed (a one-off's are not), and one that ran or was held unwritten then runs on unlisted
 * under the recurring job. Absent
 * otherwise: the era the job has stays as it is, also while it is a one-off again (whose floor is
 * set anew), until an edit makes it recurring again.
 */
export function withOneOffEra(
  engine: Engine,
  job: Job,
  schedule: ScheduleSpec,
  now: Date,
): Pick<Job, "oneOffEra"> {
  if (!("runAt" in job.schedule) || "runAt" in schedule) return {};
  const { runAt } = job.schedule;
  const from = oneOffRunsFrom(engine, job, runAt, now);
  const until = Math.min(Math.max(Date.parse(runAt), now.getTime()), claimReachFrom(engine, now));
  const below = job.oneOffBelow ?? [];
  return {
    oneOffEra: {
      from: from.toISOString(),
      until: new Date(until).toISOString(),
      ...(below.length > 0 ? { below } : {}),
    },
  };
}

/**
 * The occurrences (epoch ms, from and to, in order and apart) a read of the job's runs that can
 * still be under way covers at `now` (a pause's or cancel's): one lookahead and its window back to
 * the claim reach; for a one-off, from its floor (`oneOffRunsFrom`) up to its occurrence when
 * that is later, and each occurrence it keeps below its floor (`oneOffBelow`) on its own; and the
 * one-off era it had before an edit made it recurring (`oneOffEra`), up to one lookahead past its
 * end (a trigger's run of the one-off is made at the trigger's time, which can fall after the
 * edit's `now` and before its write), with the occurrences that one-off kept below its floor.
 * A range of one occurrence (from equal to to) reads its attempts alone, however far back.
 */
export function liveRunRanges(engine: Engine, job: Job, now: Date): [number, number][] {
  const windowFrom = liveRunsWindowFrom(engine, job, now);
  const windowTo = claimReachFrom(engine, now);
  const oneOff = "runAt" in job.schedule ? job.schedule.runAt : null;
  const ranges: [number, number][] = [
    oneOff === null
      ? [windowFrom, windowTo]
      : [
          oneOffRunsFrom(engine, job, oneOff, now).getTime(),
          Math.max(Date.parse(oneOff), windowTo),
        ],
  ];
  const points = oneOffPointsBelow(job);
  if (job.oneOffEra) {
    ranges.push([
      Date.parse(job.oneOffEra.from),
      Date.parse(job.oneOffEra.until) + engine.settings.lookaheadMs,
    ]);
    points.push(...(job.oneOffEra.below ?? []).map((at) => Date.parse(at)));
  }
  for (const at of points) ranges.push([at, at]);
  ranges.sort(([a], [b]) => a - b);
  const merged: [number, number][] = [];
  for (const [from, to] of ranges) {
    const last = merged.at(-1);
    if (last && from <= last[1]) last[1] = Math.max(last[1], to);
    else merged.push([from, to]);
  }
  return merged;
}

/**
 * The earliest occurrence a read of a one-off's runs starts from (a pause's or cancel's, a
 * resume's of the retries it left): its floor (`oneOffFrom`), its `runAt` (unless kept below the
 * floor, `oneOffBelow`), and one lookahead and its window back from `now`, whichever is earliest.
 * A one-off written by an earlier version has no floor: read from its `runAt` or a lookahead back,
 * as that version read it.
 */
export function oneOffRunsFrom(engine: Engine, job: Job, runAt: string, now: Date): Date {
  const floor =
    job.oneOffFrom === undefined ? Number.POSITIVE_INFINITY : Date.parse(job.oneOffFrom);
  const at = new Date(runAt);
  // A runAt kept below the floor is read on its own (`liveRunRanges`), not from here.
  const own = job.oneOffBelow?.includes(at.toISOString()) ? Number.POSITIVE_INFINITY : at.getTime();
  return new Date(Math.min(floor, own, liveRunsWindowFrom(engine, job, now)));
}

/**
 * One lookahead and the job's window back from `now` (epoch ms): the earliest occurrence of a run
 * the dispatcher can have queued and not yet seen end, since a jittered occurrence runs up to its
 * window after `scheduledFor`.
 */
function liveRunsWindowFrom(engine: Engine, job: Job, now: Date): number {
  return now.getTime() - engine.settings.lookaheadMs - (windowMsOf(job.window) ?? 0);
}

/** The latest occurrence a claim made at `now` can queue (epoch ms): the fast path's reach. */
function claimReachFrom(engine: Engine, now: Date): number {
  return claimReachEnd(now, fastPathHorizonEnd(now, engine.settings.lookaheadMs)).getTime();
}
