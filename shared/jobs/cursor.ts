import { ValidationError } from "../validation.js";

/** Opaque page cursors: DynamoDB's LastEvaluatedKey, base64url-encoded JSON of string values. */
function encodeCursor(key: Record<string, unknown> | undefined): string | null {
  return key ? Buffer.from(JSON.stringify(key)).toString("base64url") : null;
}

export function decodeCursor(cursor: string | undefined): Record<string, string> | undefined {
  if (cursor === undefined || cursor === "") return undefined;
  try {
    const value: unknown = JSON.parse(Buffer.from(cursor, "base64url").toString("utf8"));
    if (
      typeof value === "object" &&
      value !== null &&
      !Array.isArray(value) &&
      Object.values(value).every((v) => typeof v === "string")
    ) {
      return value as Record<string, string>;
    }
  } catch {
    // fall through to the validation error
  }
  throw new ValidationError([{ field: "cursor", message: "is not a cursor returned by this API" }]);
}

/**
 * The cursor of `key` carrying the filter it was read under (`binding`, none unfiltered), so that
 * the listing refuses it under another filter (shared/api/pages.ts).
 */
export function boundCursor(
  key: Record<string, unknown> | undefined,
  binding: string | undefined,
): string | null {
  return encodeCursor(key && { ...key, ...(binding ? { filter: binding } : {}) });
}

/** A cursor's start key as DynamoDB takes it: without the filter it carries. */
export function startKeyOf(cursor: string | undefined): Record<string, string> | undefined {
  const decoded = decodeCursor(cursor);
  if (decoded === undefined) return undefined;
  const { filter: _binding, ...key } = decoded;
  return key;
}

export interface Page<T> {
  readonly items: T[];
  readonly nextCursor: string | null;
}
