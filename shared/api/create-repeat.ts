import type { Engine } from "../engine.js";
import { idempotentCreate, type NewJob, repeatAsOfCreate } from "../jobs/index.js";
import type { Job } from "../model.js";
import { ValidationError } from "../validation.js";

/**
 * The job a create asks for, built by `build` as of `now`; or, when that is refused (400) and an
 * earlier create under the same idempotency key made a job still there, the repeat it is, judged
 * as of that create: that job (answered 200), or 409 for another body. Checks that hold only for
 * a while (an `endAt` in the future and not before the schedule's next occurrence) held when the
 * job was made, and a repeat answers it whatever has changed since. A body refused then too is
 * refused now, with the answer it gets now.
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
    const repeat = await repeatAsOfCreate(engine, tenantId, key, (asOf) => {
      try {
        return idempotentCreate(key, build(asOf), definition);
      } catch (asThen) {
        if (asThen instanceof ValidationError) return null;
        throw asThen;
      }
    });
    if (repeat === null) throw error;
    return { repeat };
  }
}
