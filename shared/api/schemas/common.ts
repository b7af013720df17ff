/**
 * What the API's schemas share: the limits on input, the status and priority
 * values, instants and paging. Each resource's request and response shapes are
 * declared once in its own module beside this one; the routes validate with
 * them and the OpenAPI document is generated from them. Checks that need the
 * clock or the settings (schedule semantics, payload size, cross-field rules)
 * live in ../requests.ts.
 */

import { z } from "@hono/zod-openapi";
import { boundedInt } from "../../bounded-int.js";
import type { QuotaName } from "../../quotas/limits.js";

export const LIMITS = {
  nameChars: 200,
  idempotencyKeyChars: 200,
  timeoutSeconds: { min: 1, max: 900, default: 300 },
  /** A run handed over to an async target (long jobs) may last a day. */
  asyncTimeoutSeconds: 86_400,
  maxAttempts: 100,
  /** A week: a longer backoff is a schedule, not a retry. */
  retryDelaySeconds: 7 * 86_400,
  pageSize: { default: 20, max: 100 },
  previewCount: { default: 5, max: 100 },
  targetHeaders: 50,
  headerValueChars: 4096,
  urlChars: 2048,
  cursorChars: 2048,
  instantChars: 64,
  cronChars: 256,
  zoneChars: 64,
  windowChars: 64,
} as const;

/** An `Idempotency-Key` (header, or a create's `idempotencyKey` field), the same rule wherever it is taken. */
export const IdempotencyKeySchema = z
  .string()
  .min(1)
  .max(LIMITS.idempotencyKeyChars)
  .regex(/^[\x21-\x7E]+$/, "must be visible ASCII characters")
  .openapi({ example: "report-2030-01-15" });

export const JOB_STATUSES = ["active", "paused", "cancelled", "completed"] as const;

/** The per-tenant quotas by name (docs/api.md "Quotas"). */
export const QUOTA_NAMES = [
  "activeJobs",
  "runsPerMinute",
  "concurrentRuns",
  "requestsPerSecond",
  "maxPriority",
] as const satisfies readonly QuotaName[];
export const RUN_STATUSES = [
  "queued",
  "running",
  "succeeded",
  "failed",
  "dead",
  "skipped",
  "cancelled",
] as const;
const PRIORITY_VALUES = ["high", "normal", "low"] as const;

export const Priority = z.enum(PRIORITY_VALUES);

export const instant = (description: string, example: string) =>
  z.string().max(LIMITS.instantChars).openapi({ description, example, format: "date-time" });

export const pageLimit = boundedInt(1, LIMITS.pageSize.max, { fromQuery: true })
  .optional()
  .openapi({ description: "Page size; default 20." });
export const cursor = z.string().max(LIMITS.cursorChars).optional().openapi({
  description:
    "The nextCursor of the previous page, sent with the filters that page was read with: with others (or none) it is a 400 naming cursor.",
});

export const PageQuery = z.strictObject({ limit: pageLimit, cursor });
