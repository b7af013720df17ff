import type { z } from "@hono/zod-openapi";
import { safeParseSchedule } from "../schedule/index.js";
import type { FieldIssue } from "../validation.js";
import { type ApiError, invalid } from "./errors.js";

type Issue = z.core.$ZodIssue;

/**
 * A failed schema check as a 400 naming the field. Unknown fields come first:
 * a misspelt field is the likelier cause of the other issues. A schedule that
 * matches none of the three shapes is explained by the schedule core, whose
 * messages say what to write instead ("timezone is required with cron"). A
 * query parameter given more than once reaches the schema as the list of its
 * values, which no parameter takes: it is named as repeated, in place of what
 * its schema says of a list ("expected number, received NaN").
 */
export function schemaFailure(issues: readonly Issue[], target: string, input: unknown): ApiError {
  const fields: FieldIssue[] = [];
  const unknown: FieldIssue[] = [];
  const repeated = target === "query" ? repeatedParams(input) : new Set<string>();
  const named = new Set<string>();
  for (const issue of issues) {
    const base = pathOf(issue.path, target);
    if (issue.code === "unrecognized_keys" && isOtherKindsField(issue, base, target)) {
      fields.push(...scheduleIssues(valueAt(input, issue.path), base, issue));
    } else if (issue.code === "unrecognized_keys") {
      unknown.push(...unknownFieldIssues(issue, target));
    } else if (repeated.has(base)) {
      if (!named.has(base)) fields.push({ field: base, message: REPEATED_MESSAGE });
      named.add(base);
    } else if (
      issue.code === "invalid_union" &&
      target === "json" &&
      base.split(".").at(-1) === "schedule"
    ) {
      fields.push(...scheduleIssues(valueAt(input, issue.path), base, issue));
    } else if (issue.code === "invalid_key") {
      fields.push({ field: base, message: "is not an accepted name" });
    } else if (base === "" && target === "json") {
      fields.push({ field: "body", message: `must be a JSON object: ${issue.message}` });
    } else {
      fields.push({ field: base || target, message: issue.message });
    }
  }
  return invalid([...unknown, ...fields]);
}

const REPEATED_MESSAGE = "is given more than once; give it once";

/** A schedule's fields, each of one kind: the kinds' own and their partners (`timezone`, `startAt`). */
const SCHEDULE_FIELDS: readonly string[] = [
  "runAt",
  "cron",
  "timezone",
  "every",
  "startAt",
  "after",
];

/**
 * Whether an unknown-field issue is a schedule of one kind holding another kind's field: the
 * union answers so (not as matching none of its shapes) when one kind is complete, as a `runAt`
 * beside a `cron` without its `timezone`, or beside a `timezone` alone. The schedule core names
 * the mix, or the kind that takes the field, instead of calling it unknown.
 */
function isOtherKindsField(issue: Issue, base: string, target: string): boolean {
  return (
    issue.code === "unrecognized_keys" &&
    target === "json" &&
    base.split(".").at(-1) === "schedule" &&
    issue.keys.some((key) => SCHEDULE_FIELDS.includes(key))
  );
}

/** The query parameters given more than once: Hono's validator hands each one's values as a list. */
function repeatedParams(query: unknown): Set<string> {
  if (typeof query !== "object" || query === null) return new Set();
  return new Set(
    Object.entries(query)
      .filter(([, value]) => Array.isArray(value))
      .map(([name]) => name),
  );
}

/** The fields an `unrecognized_keys` issue names, each as unknown; none for another issue. */
export function unknownFieldIssues(issue: Issue, target: string): FieldIssue[] {
  if (issue.code !== "unrecognized_keys") return [];
  const base = pathOf(issue.path, target);
  return issue.keys.map((key) =>
    target === "query"
      ? unknownParameterIssue(key)
      : { field: join(base, key), message: `unknown field "${key}"` },
  );
}

/** A query parameter the route does not declare, named as such. */
export const unknownParameterIssue = (name: string): FieldIssue => ({
  field: name,
  message: `unknown parameter "${name}"`,
});

function scheduleIssues(schedule: unknown, base: string, issue: Issue): FieldIssue[] {
  // A string over its length limit is reported as such, before the core spends time parsing it.
  const tooLong = issue.code === "invalid_union" ? firstTooLong(issue.errors) : undefined;
  if (tooLong) {
    return [{ field: join(base, tooLong.path.map(String).join(".")), message: tooLong.message }];
  }
  const core = safeParseSchedule(schedule);
  if (!core.ok && core.issues.length > 0) {
    // The core names fields from "schedule"; a nested schedule keeps its prefix.
    const prefix = base.slice(0, base.length - "schedule".length);
    return core.issues.map((i) => ({ field: `${prefix}${i.field}`, message: i.message }));
  }
  return [{ field: base, message: issue.message }];
}

function firstTooLong(branches: readonly (readonly Issue[])[]): Issue | undefined {
  for (const branch of branches) {
    // zod measures a list's length on a string given in its place too ("expected string to have
    // <=20 characters" for one id where `schedule.after.jobs` wants a list): with the value of the
    // wrong type at that path, the length is not what is wrong, and the core says what is.
    const mistyped = new Set(
      branch.filter((i) => i.code === "invalid_type").map((i) => i.path.map(String).join(".")),
    );
    const found = branch.find(
      (i) => i.code === "too_big" && !mistyped.has(i.path.map(String).join(".")),
    );
    if (found) return found;
  }
  return undefined;
}

function pathOf(path: readonly PropertyKey[], target: string): string {
  const parts = path.map((p) => String(p));
  // Query and header names are single keys; json paths are dotted.
  return target === "json" ? parts.join(".") : (parts[0] ?? "");
}

const join = (base: string, key: string) => (base === "" ? key : `${base}.${key}`);

function valueAt(input: unknown, path: readonly PropertyKey[]): unknown {
  let value = input;
  for (const key of path) {
    if (typeof value !== "object" || value === null) return undefined;
    value = (value as Record<PropertyKey, unknown>)[key];
  }
  return value;
}
