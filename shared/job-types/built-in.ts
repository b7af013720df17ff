import { z } from "zod";
import { boundedInt } from "../bounded-int.js";
import { MAX_ATTEMPT } from "../keys.js";

/**
 * The payload schemas of the built-in job types. A stored payload is `null`
 * when the job was created without one, so every object schema here also
 * accepts null (its fields then take their defaults in the handler).
 */

/** The longest sleep: a job's timeout is at most 900 s, and a sleep past it only times out. */
const MAX_SLEEP_MS = 900_000;

export const HttpPayloadSchema = z.unknown().meta({
  id: "HttpPayload",
  description:
    "http: any JSON; POSTed as the request body to target.url (with the scheduler's headers).",
});

export const NoopPayloadSchema = z.unknown().meta({
  id: "NoopPayload",
  description: "noop: any JSON; the handler does nothing with it.",
});

export const SleepPayloadSchema = z
  .strictObject({
    ms: boundedInt(0, MAX_SLEEP_MS)
      .optional()
      .meta({ description: "How long the run sleeps, in milliseconds; default 0." }),
  })
  .nullable()
  .meta({
    id: "SleepPayload",
    description:
      "sleep (a demo type): sleeps `ms`, then succeeds; the job's timeout cuts it short.",
  });
export type SleepPayload = z.infer<typeof SleepPayloadSchema>;

export const FailPayloadSchema = z
  .strictObject({
    times: boundedInt(0, MAX_ATTEMPT)
      .optional()
      .meta({
        description: `How many attempts of each occurrence fail before one succeeds, at most ${MAX_ATTEMPT} (the last attempt a run can be, replays counted on); default: every attempt fails.`,
      }),
    retryable: z.boolean().optional().meta({
      description: "false sends the failed run to the dead letters at once; default true.",
    }),
  })
  .nullable()
  .meta({
    id: "FailPayload",
    description: "fail (a demo and test type): fails the first `times` attempts, then succeeds.",
  });
export type FailPayload = z.infer<typeof FailPayloadSchema>;
