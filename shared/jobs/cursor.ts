import { ValidationError } from "../validation.js";

/** Opaque page cursors: DynamoDB's LastEvaluatedKey, base64url-encoded JSON of string values. */
export function encodeCursor(key: Record<string, unknown> | undefined): string | null {
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

export interface Page<T> {
  readonly items: T[];
  readonly nextCursor: string | null;
}
