/**
 * What a method relies on in a success answer, checked before the answer is returned: a `{}` or a
 * proxy's page answered 200 would otherwise be a job handle without an id, a run without a status,
 * a page without items. Only the fields the client and the CLI act on (ids, statuses, versions,
 * lists, cursors), not the whole OpenAPI schema: the generated types describe the rest.
 */
export interface AnswerShape {
  /** What the answer is, in words: "a job". */
  readonly kind: string;
  /** What is wrong with the first field that does not fit (`id is not a string`), or null. */
  readonly missing: (value: unknown) => string | null;
}

type FieldType = "string" | "number" | "array" | "object" | "string or null" | "cursor";

/**
 * The longest cursor the API takes back (`cursor`, LIMITS.cursorChars in
 * shared/api/schemas/common.ts): a page's `nextCursor` longer than that cannot be sent back, so it
 * is no answer of the API's. Refused, a hostile server's cursors of megabytes are not kept one
 * after another by a listing (everyItem keeps every cursor it was asked with). The client talks
 * HTTP only, so the number is its own: test/unit/cli-hostile-answers.test.ts holds it to the API's.
 */
const CURSOR_CHARS = 2048;

/** A JSON object: not null, not an array. */
export const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value);

function fits(value: unknown, type: FieldType): boolean {
  switch (type) {
    case "array":
      return Array.isArray(value);
    case "object":
      return isRecord(value);
    case "string or null":
      return value === null || typeof value === "string";
    default:
      return typeof value === type;
  }
}

const article = (type: FieldType) => (type === "array" || type === "object" ? "an" : "a");

/** What is wrong with `value` as a field of `type` named `name`, or null. */
function misfit(name: string, value: unknown, type: FieldType): string | null {
  if (type === "cursor") {
    if (value !== null && typeof value !== "string") return `${name} is not a string or null`;
    return typeof value === "string" && value.length > CURSOR_CHARS
      ? `${name} is ${value.length} characters, over the ${CURSOR_CHARS} a cursor sent back may be`
      : null;
  }
  if (fits(value, type)) return null;
  return `${name} is not ${type === "string or null" ? "a string or null" : `${article(type)} ${type}`}`;
}

/** An object with these fields of these types. */
function fields(kind: string, spec: Readonly<Record<string, FieldType>>): AnswerShape {
  return {
    kind,
    missing(value) {
      if (!isRecord(value)) return "not an object";
      for (const [name, type] of Object.entries(spec)) {
        const wrong = misfit(name, value[name], type);
        if (wrong !== null) return wrong;
      }
      return null;
    },
  };
}

/** An object with these fields whose `list` field is an array of `item`s. */
function listOf(
  kind: string,
  list: string,
  spec: Readonly<Record<string, FieldType>>,
  item: AnswerShape,
): AnswerShape {
  const outer = fields(kind, { ...spec, [list]: "array" });
  return {
    kind,
    missing(value) {
      const missing = outer.missing(value);
      const items: unknown = isRecord(value) ? value[list] : undefined;
      if (missing !== null || !Array.isArray(items)) return missing;
      for (let index = 0; index < items.length; index++) {
        const inner = item.missing(items[index] as unknown);
        if (inner !== null) return `${list}[${index}]: ${inner}`;
      }
      return null;
    },
  };
}

export const JOB = fields("a job", { id: "string", status: "string", version: "number" });
export const RUN = fields("a run", { runId: "string", jobId: "string", status: "string" });
const PAGE_FIELDS = { nextCursor: "cursor" } as const;
export const JOB_PAGE = listOf("a page of jobs", "items", PAGE_FIELDS, JOB);
export const RUN_PAGE = listOf("a page of runs", "items", PAGE_FIELDS, RUN);
export const BATCH = listOf(
  "a batch's results",
  "results",
  {},
  fields("a result", { index: "number", status: "number" }),
);
export const PREVIEW = fields("a preview", { occurrences: "array", timezone: "string" });
export const QUOTAS = fields("a tenant's quotas", {
  tenantId: "string",
  quotas: "object",
});
export const SECRET = fields("a webhook secret", { secret: "string" });
export const HEALTH = fields("the health", { status: "string" });
export const HEARTBEAT = fields("a heartbeat", { leaseUntil: "string" });
