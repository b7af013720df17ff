/**
 * Validation problems are reported per field so that the API can answer
 * `400 { error: { code, message, field } }` and point at the bad input.
 */
export interface FieldIssue {
  /** Dotted path of the offending input, e.g. `schedule.cron` or `retry.maxAttempts`. */
  readonly field: string;
  readonly message: string;
}

export class ValidationError extends Error {
  override readonly name = "ValidationError";
  readonly issues: readonly FieldIssue[];

  constructor(issues: readonly FieldIssue[], options?: { cause?: unknown }) {
    const first = issues[0];
    super(first ? `${first.field}: ${first.message}` : "invalid input", options);
    this.issues = issues;
  }

  /** The field of the first issue, the one an HTTP error body names. */
  get field(): string | undefined {
    return this.issues[0]?.field;
  }
}
