import { type FieldIssue, SchedulerError } from "./errors.js";

export type { FieldIssue };

/**
 * Validation problems are reported per field so that the API can answer
 * `400 { error: { code, message, field } }` and point at the bad input.
 */
export class ValidationError extends SchedulerError<"validation_failed"> {
  override readonly name = "ValidationError";

  constructor(issues: readonly FieldIssue[], options?: ErrorOptions) {
    const first = issues[0];
    super(
      "validation_failed",
      first ? `${first.field}: ${first.message}` : "invalid input",
      { issues },
      options,
    );
  }

  get issues(): readonly FieldIssue[] {
    return this.context.issues;
  }

  /** The field of the first issue, the one an HTTP error body names. */
  get field(): string | undefined {
    return this.context.issues[0]?.field;
  }
}
