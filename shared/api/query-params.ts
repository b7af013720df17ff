/** Query parameters that need more than a schema: instants, and the runs listing's filter. */
import type { RunFilter } from "../jobs/queries.js";
import type { RunStatus } from "../model.js";
import {
  FIRST_STORABLE_MS,
  LAST_STORABLE_MS,
  parseInstant,
  STORABLE_RANGE_TEXT,
} from "../schedule/index.js";
import { ValidationError } from "../validation.js";
import { RUN_STATUSES } from "./schemas/common.js";

/** An instant given in a query (or a body field): a 400 naming the field when it is not one. */
export function instantParam(field: string, value: string): Date {
  const parsed = parseInstant(value);
  if (!parsed.ok) throw new ValidationError([{ field, message: parsed.message }]);
  if (parsed.ms < FIRST_STORABLE_MS || parsed.ms > LAST_STORABLE_MS) {
    throw new ValidationError([
      { field, message: `must lie in ${STORABLE_RANGE_TEXT}; got "${value}"` },
    ]);
  }
  return new Date(parsed.ms);
}

/**
 * An instant given in a URL query. Form decoding reads a "+" as a space, so an offset's "+" sent
 * unencoded (`?from=2030-01-15T10:00:00+02:00` in a curl line) arrives as "…T10:00:00 02:00": a
 * space just before a trailing offset can only be that "+", and reads as it.
 */
export function queryInstantParam(field: string, value: string): Date {
  return instantParam(field, value.replace(/(T[\d:.,]+) (\d{2}(?::?\d{2})?)$/, "$1+$2"));
}

function statusesOf(value: string): RunStatus[] {
  const known: readonly string[] = RUN_STATUSES;
  const names = [...new Set(value.split(",").map((name) => name.trim()))].sort();
  const unknown = names.filter((name) => !known.includes(name));
  if (names.length === 0 || unknown.length > 0) {
    throw new ValidationError([
      {
        field: "status",
        message: `must be run statuses separated by commas, of ${RUN_STATUSES.join(", ")}; got ${JSON.stringify(unknown[0] ?? value)}`,
      },
    ]);
  }
  return names.map((name) => name.toUpperCase() as RunStatus);
}

/** The filter of `GET /jobs/{id}/runs`, and the text that binds its cursors to it (none unfiltered). */
export function runFilterFrom(query: { status?: string; from?: string; to?: string }): {
  filter: RunFilter;
  binding: string | undefined;
} {
  const from = query.from === undefined ? undefined : queryInstantParam("from", query.from);
  const to = query.to === undefined ? undefined : queryInstantParam("to", query.to);
  if (from && to && from >= to) {
    throw new ValidationError([
      { field: "to", message: `must be after from (${from.toISOString()}); got "${query.to}"` },
    ]);
  }
  const statuses = query.status === undefined ? [] : statusesOf(query.status);
  const parts = [
    ...(statuses.length > 0 ? [`status=${statuses.join(",")}`] : []),
    ...(from ? [`from=${from.toISOString()}`] : []),
    ...(to ? [`to=${to.toISOString()}`] : []),
  ];
  return {
    filter: { statuses, ...(from ? { from } : {}), ...(to ? { to } : {}) },
    binding: parts.length > 0 ? parts.join("&") : undefined,
  };
}
