import type { MiddlewareHandler } from "hono";
import { parseExact } from "../exact-json.js";
import { textHead, wellFormed } from "../storage/stored-text.js";
import { ApiError } from "./errors.js";

/** Beyond the payload limit, room for the rest of a job (schedule, target, headers). */
export const BODY_OVERHEAD_BYTES = 16 * 1024;
/** Deeper documents serve no job, and would overflow recursive code (hashing, serializing). */
const MAX_JSON_DEPTH = 64;
/** Where a job's payload is in a create's body (its dotted path): any JSON may be in it. */
const TOP_LEVEL_PAYLOAD = /^payload$/;

// The same test the route validators apply, so a body that passes here is never dropped there.
const JSON_CONTENT_TYPE = /^application\/([a-z-.]+\+)?json(;\s*[a-zA-Z0-9-]+=([^;]+))*$/i;

/**
 * Reads a JSON request body before the route's schema sees it, so that every
 * way a body can be unreadable gets the API's own answer: 415 for another
 * media type, 413 past the size limit (checked while reading, so a huge body
 * is never buffered), 400 for bytes that are not UTF-8 JSON, too deeply nested,
 * that hold a number past what a double holds (`1e400` reads as infinity, which would be stored
 * as `null`, in a payload too), that use `__proto__` as a field name outside the payload (at `payloadPath`),
 * or whose text outside the payload holds an unpaired UTF-16 surrogate (JSON's
 * `\ud800` escape reads as one): no Unicode text, which DynamoDB's strings must
 * be. A payload is stored and delivered as JSON text, the escape as written, and
 * its numbers as written (`parseExact`): the route reads the body with each payload
 * in it read so, the rest as JSON.parse reads it (its schema checks numbers).
 * A body that holds create bodies `itemDepth` levels down (a batch's
 * `jobs[i]`: 2) may nest that much deeper, so each of them may nest as a create's.
 */
export function jsonBody(
  maxBytes: number,
  payloadPath = TOP_LEVEL_PAYLOAD,
  itemDepth = 0,
): MiddlewareHandler {
  return async (c, next) => {
    const type = c.req.header("content-type");
    if (type === undefined || !JSON_CONTENT_TYPE.test(type.trim())) {
      throw new ApiError(
        415,
        "unsupported_media_type",
        `send the body as JSON with "Content-Type: application/json"${type ? `, not ${JSON.stringify(type.slice(0, 100))}` : ""}`,
      );
    }
    const declared = Number(c.req.header("content-length") ?? "0");
    if (declared > maxBytes) throw tooLarge(maxBytes);
    const bytes = await readAtMost(c.req.raw, maxBytes);
    if (bytes === null) throw tooLarge(maxBytes);
    let text: string;
    try {
      text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
    } catch {
      throw new ApiError(400, "malformed_json", "the body is not valid UTF-8");
    }
    if (text.trim() === "") throw new ApiError(400, "malformed_json", "a JSON body is required");
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (error) {
      // V8's message may quote half of a character (the token it stops at, by its first unit).
      const why = error instanceof Error ? `: ${textHead(wellFormed(error.message), 200)}` : "";
      throw new ApiError(400, "malformed_json", `the body is not valid JSON${why}`);
    }
    checkStructure(value, payloadPath, MAX_JSON_DEPTH + itemDepth);
    // Read again only now that its nesting is known to be bounded (that parser recurses).
    const body = withExactPayloads(value, parseExact(text, value), payloadPath, "");
    // The raw stream is spent; the route's validator reads this copy, and JSON.parse would
    // change a payload's numbers a double does not hold: its body is the one read here.
    c.req.raw = new Request(c.req.raw, { body: text });
    c.req.json = <T>() => Promise.resolve(body as T);
    await next();
  };
}

/**
 * `read` (a `jsonBody`) for a route whose body may be left out: a request
 * with neither a body nor a Content-Type goes on without one.
 */
export function optionalBody(read: MiddlewareHandler): MiddlewareHandler {
  return async (c, next) => {
    const empty =
      c.req.header("content-type") === undefined &&
      c.req.header("transfer-encoding") === undefined &&
      Number(c.req.header("content-length") ?? "0") === 0;
    if (empty) await next();
    else return read(c, next);
  };
}

/** More than an empty object's text and some white space: not the no body it takes. */
const NO_BODY_READ_BYTES = 1024;

/**
 * For a route that takes no body (resume, cancel, delete, trigger, a run's cancel, a replay): a
 * request that sends one is refused with a 400 naming its first field, before anything is read or
 * written. Acted on with the body ignored, a field meant for another route (pause's `running`
 * sent to cancel) would do what its sender did not ask. No body, an empty one, or `{}` goes on.
 */
export const noBody: MiddlewareHandler = async (c, next) => {
  // Read whatever came, whatever its headers say (API Gateway's event has a body or none).
  if (c.req.raw.body !== null) {
    const bytes = await readAtMost(c.req.raw, NO_BODY_READ_BYTES);
    const text = bytes === null ? null : new TextDecoder("utf-8").decode(bytes).trim();
    if (text !== "") refuseBody(text);
  }
  await next();
};

function refuseBody(text: string | null): void {
  let value: unknown = null;
  try {
    value = text === null ? null : JSON.parse(text);
  } catch {
    // Not JSON: refused below all the same, naming no field.
  }
  if (typeof value === "object" && value !== null && !Array.isArray(value)) {
    const [field] = Object.keys(value);
    if (field === undefined) return;
    throw new ApiError(
      400,
      "validation_failed",
      `${field}: is not an accepted field: this request takes no body`,
      { field },
    );
  }
  throw new ApiError(400, "validation_failed", "this request takes no body; send none");
}

const tooLarge = (maxBytes: number) =>
  new ApiError(413, "payload_too_large", `the request body exceeds ${maxBytes} bytes`);

async function readAtMost(request: Request, maxBytes: number): Promise<Uint8Array | null> {
  if (request.body === null) return new Uint8Array(0);
  const reader = request.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > maxBytes) {
      await reader.cancel().catch(() => undefined);
      return null;
    }
    chunks.push(value);
  }
  const bytes = new Uint8Array(size);
  let offset = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return bytes;
}

/** A high surrogate not followed by a low one, or a low one not after a high one. */
const UNPAIRED_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** JSON.parse reads a number past ±1.8e308 as infinity, which JSON.stringify writes as null. */
const outOfRange = (path: string) =>
  new ApiError(
    400,
    "validation_failed",
    `${path === "" ? "the body" : path}: is a number past ±1.8e308, the largest a number here can be (it would read, and be stored, as null)`,
    path === "" ? {} : { field: path },
  );

const notText = (field: string) =>
  new ApiError(
    400,
    "validation_failed",
    `${field}: holds an unpaired UTF-16 surrogate, which is not Unicode text`,
    { field },
  );

/** `plain` (JSON.parse's reading) with each payload in it (at `payloadPath`) as `exact` reads it. */
function withExactPayloads(
  plain: unknown,
  exact: unknown,
  payloadPath: RegExp,
  path: string,
): unknown {
  if (path !== "" && payloadPath.test(path)) return exact;
  if (typeof plain !== "object" || plain === null || typeof exact !== "object" || exact === null)
    return plain;
  const fields = Object.entries(plain).map(([key, child]): [string, unknown] => [
    key,
    withExactPayloads(
      child,
      (exact as Record<string, unknown>)[key],
      payloadPath,
      path === "" ? key : `${path}.${key}`,
    ),
  ]);
  if (Array.isArray(plain)) return fields.map(([, child]) => child);
  const copy: Record<string, unknown> = {};
  // As JSON.parse makes it: `__proto__` an own field, not the prototype.
  for (const [key, child] of fields)
    Object.defineProperty(copy, key, {
      value: child,
      enumerable: true,
      writable: true,
      configurable: true,
    });
  return copy;
}

/** Iterative, so that the check itself cannot overflow the stack it protects. */
function checkStructure(root: unknown, payloadPath: RegExp, maxDepth: number): void {
  const stack: { value: unknown; depth: number; path: string; inPayload: boolean }[] = [
    { value: root, depth: 0, path: "", inPayload: false },
  ];
  for (let item = stack.pop(); item !== undefined; item = stack.pop()) {
    const { value, depth, path, inPayload } = item;
    if (typeof value === "string" && !inPayload && UNPAIRED_SURROGATE.test(value))
      throw notText(path);
    if (typeof value === "number" && !Number.isFinite(value)) throw outOfRange(path);
    if (typeof value !== "object" || value === null) continue;
    if (depth >= maxDepth) {
      throw new ApiError(
        400,
        "validation_failed",
        `the body nests deeper than ${maxDepth} levels`,
        path === "" ? {} : { field: path.split(".")[0] },
      );
    }
    for (const [key, child] of Object.entries(value)) {
      const childPath = path === "" ? key : `${path}.${key}`;
      const payload = inPayload || payloadPath.test(childPath);
      if (!payload && UNPAIRED_SURROGATE.test(key)) throw notText(path === "" ? key : path);
      if (key === "__proto__" && !payload) {
        throw new ApiError(400, "validation_failed", `${childPath}: is not an accepted field`, {
          field: childPath,
        });
      }
      stack.push({ value: child, depth: depth + 1, path: childPath, inPayload: payload });
    }
  }
}
