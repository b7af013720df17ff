import type { QuotaUsage } from "./tenant-quotas.js";

type Item = Record<string, unknown>;

/**
 * The usage as a recount read it before counting: its counters, and what tells it from the same
 * counters reached again (a reservation and a give-back of the same share between two reads leave
 * the counters as they were, while the jobs changed): `changes`, one more at each reservation and
 * give-back (0 on an item none has added to since a recount wrote it), and the recount's token.
 */
export interface SeenUsage extends QuotaUsage {
  readonly changes: number;
  readonly recount: string | null;
}

export function decodeSeenUsage(item: Item): SeenUsage {
  const recount: unknown = item.recount;
  return {
    activeJobs: Number(item.activeJobs ?? 0),
    runsPerMinute: Number(item.runsPerMinute ?? 0),
    changes: Number(item.changes ?? 0),
    recount: typeof recount === "string" ? recount : null,
  };
}

/** Nothing reserved or given back, and no recount written, between the reads of `a` and `b`. */
export const sameSeenUsage = (a: SeenUsage | null, b: SeenUsage | null): boolean =>
  a === null || b === null
    ? a === b
    : a.activeJobs === b.activeJobs &&
      a.runsPerMinute === b.runsPerMinute &&
      a.changes === b.changes &&
      a.recount === b.recount;

/**
 * The condition that the usage is still as `seen` read it (`sameSeenUsage`, as a condition): its counters, its `changes` and its
 * recount token (an earlier version's reservations add no `changes`; their counters still differ).
 */
export function stillSeen(seen: SeenUsage): {
  readonly expression: string;
  readonly values: Record<string, unknown>;
} {
  return {
    expression: [
      "activeJobs = :seenJobs AND runsPerMinute = :seenRate",
      seen.changes === 0 ? "attribute_not_exists(changes)" : "changes = :seenChanges",
      seen.recount === null ? "attribute_not_exists(recount)" : "recount = :seenRecount",
    ].join(" AND "),
    values: {
      ":seenJobs": seen.activeJobs,
      ":seenRate": seen.runsPerMinute,
      ...(seen.changes === 0 ? {} : { ":seenChanges": seen.changes }),
      ...(seen.recount === null ? {} : { ":seenRecount": seen.recount }),
    },
  };
}
