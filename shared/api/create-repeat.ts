import type { Engine } from "../engine.js";
import { IdempotencyConflictError } from "../errors.js";
import { idempotentCreate, type NewJob, repeatAsOfCreate, requestHash } from "../jobs/index.js";
import type { Job } from "../model.js";
import { ValidationError } from "../validation.js";

/**
 * The job a create asks for, built by `build` as of `now`; or, when that is refused (400) and an
 * earlier create under the same idempotency key made a job still there, the repeat it is, judged
 * as of that create: that job (answered 200), or 409 for another body. Checks that hold only for
 * a while (an `endAt` in the future and not before the schedule's next occurrence) held when the
 * job was made, and a repeat answers it whatever has changed since. A body refused as of then
 * too is the very body that made the job, or refused now, with the answer it gets now: a check
 * added since for new input only (a cron list's empty item, a System V zone) refuses a body that
 * made a job before it, which stands, and the repeat of that body still answers it.
 */
export async function newJobOrRepeat(
  engine: Engine,
  tenantId: string,
  key: string | undefined,
  /** The body without its idempotency key, as the key's record hashes it. */
  definition: unknown,
  now: Date,
  build: (asOf: Date) => NewJob,
): Promise<{ readonly newJob: NewJob } | { readonly repeat: Job }> {
  try {
    return { newJob: build(now) };
  } catch (error) {
    if (key === undefined || !(error instanceof ValidationError)) throw error;
    let asSentOnly = false;
    const repeat = await repeatAsOfCreate(engine, tenantId, key, (asOf) => {
      try {
        return idempotentCreate(key, build(asOf), definition);
      } catch (asThen) {
        if (!(asThen instanceof ValidationError)) throw asThen;
        // Only the hash of the body as sent, which every record holds: the same body, or none.
        asSentOnly = true;
        return { key, requestHash: requestHash(definition) };
      }
    }).catch((refused: unknown) => {
      // Another body refused as of then too is refused as new input, not a conflict.
      if (asSentOnly && refused instanceof IdempotencyConflictError) return null;
      throw refused;
    });
    if (repeat === null) throw error;
    return { repeat };
  }
}
