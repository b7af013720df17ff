import type { Engine } from "../engine.js";
import { decodeCursor, type Page } from "../jobs/cursor.js";
import { listDeadLetters, listJobs, listRuns, type RunFilter } from "../jobs/queries.js";
import type { Job, JobStatus, Run } from "../model.js";
import { deadLetterPk, jobPk, tenantPk } from "../storage/items.js";
import { ValidationError } from "../validation.js";

/**
 * Cursors are DynamoDB start keys, so a forged or foreign one would reach
 * DynamoDB and fail there (a 500), or start another tenant's partition. Each
 * listing accepts only a key of its own shape inside the caller's partition.
 */
function checkCursor(
  cursor: string | undefined,
  partition: Readonly<Record<string, string>>,
  otherKeys: readonly string[],
  sortPrefix?: { readonly key: string; readonly prefix: string },
): string | undefined {
  if (cursor === undefined || cursor === "") return undefined;
  const key = decodeCursor(cursor);
  const expected = [...Object.keys(partition), ...otherKeys].sort();
  const actual = Object.keys(key ?? {}).sort();
  const sameShape =
    key !== undefined &&
    actual.length === expected.length &&
    actual.every((name, i) => name === expected[i]) &&
    // DynamoDB's bound on a key is in bytes (a sort key's 1,024), not characters.
    Object.values(key).every((v) => v.length > 0 && Buffer.byteLength(v, "utf8") <= 1024) &&
    Object.entries(partition).every(([name, value]) => key[name] === value) &&
    (sortPrefix === undefined || (key[sortPrefix.key] ?? "").startsWith(sortPrefix.prefix));
  if (!sameShape) {
    throw new ValidationError([
      { field: "cursor", message: "is not a cursor returned by this listing" },
    ]);
  }
  return cursor;
}

/** A status filter can leave a DynamoDB page short; a few more reads fill it, each resuming exactly. */
const MAX_READS_PER_PAGE = 10;

export async function jobsPage(
  engine: Engine,
  tenantId: string,
  options: { status?: JobStatus; limit: number; cursor?: string },
): Promise<Page<Job>> {
  let cursor = checkCursor(options.cursor, { tenantPk: tenantPk(tenantId) }, [
    "tenantSk",
    "pk",
    "sk",
  ]);
  const items: Job[] = [];
  for (let read = 0; read < MAX_READS_PER_PAGE && items.length < options.limit; read++) {
    const page = await listJobs(engine, tenantId, {
      ...(options.status ? { status: options.status } : {}),
      limit: options.limit - items.length,
      ...(cursor ? { cursor } : {}),
    });
    items.push(...page.items);
    cursor = page.nextCursor ?? undefined;
    if (cursor === undefined) break;
  }
  return { items, nextCursor: cursor ?? null };
}

/** `binding` names the listing's filter; a cursor carries it and is refused under another. */
export function runsPage(
  engine: Engine,
  jobId: string,
  options: { limit: number; cursor?: string; filter: RunFilter; binding: string | undefined },
): Promise<Page<Run>> {
  const { binding } = options;
  if (options.cursor !== undefined && options.cursor !== "") {
    const issued = decodeCursor(options.cursor)?.filter;
    if (issued !== binding) {
      throw new ValidationError([
        {
          field: "cursor",
          message: `was returned for other filters (${issued ?? "none"}) than these (${binding ?? "none"}); start again without it`,
        },
      ]);
    }
  }
  const cursor = checkCursor(
    options.cursor,
    { pk: jobPk(jobId), ...(binding ? { filter: binding } : {}) },
    ["sk"],
    { key: "sk", prefix: "RUN#" },
  );
  return listRuns(engine, jobId, {
    limit: options.limit,
    filter: options.filter,
    ...(binding ? { binding } : {}),
    ...(cursor ? { cursor } : {}),
  });
}

export function deadLettersPage(
  engine: Engine,
  tenantId: string,
  options: { limit: number; cursor?: string },
): Promise<Page<Run>> {
  const cursor = checkCursor(options.cursor, { deadPk: deadLetterPk(tenantId) }, [
    "deadSk",
    "pk",
    "sk",
  ]);
  return listDeadLetters(engine, tenantId, { limit: options.limit, ...(cursor ? { cursor } : {}) });
}
