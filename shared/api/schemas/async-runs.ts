/** What an async (long-job) target sends and gets back on its run's heartbeat and complete routes. */
import { z } from "@hono/zod-openapi";
import { boundedInt } from "../../bounded-int.js";
import { LIMITS } from "./common.js";

export const AsyncRunParams = z.object({
  runId: z
    .string()
    .max(200)
    .openapi({
      param: { name: "runId", in: "path" },
      example: "01J9Z3V6K8N4QX2M7R5T0W1Y3B-20300115T080000000-1",
    }),
});

export const HeartbeatSchema = z
  .strictObject({
    leaseUntil: z.string().openapi({
      description:
        "The run's lease now ends here: heartbeat again before it (a third of the lease ahead is safe), or the run is started again.",
    }),
    timesOutAt: z.string().nullable().openapi({
      description:
        "When the run times out (the attempt's first start plus the job's timeoutSeconds): a heartbeat or completion after it ends the run as timed out.",
    }),
  })
  .openapi("RunHeartbeat");

export const CompleteRunSchema = z
  .strictObject({
    status: z.enum(["succeeded", "failed"]),
    result: z.unknown().optional().openapi({
      description:
        "With succeeded: the job's result; accepted and not stored (as a webhook's answer).",
    }),
    error: z.string().max(4096).optional().openapi({
      description: "With failed: what went wrong, recorded on the run.",
    }),
    retryable: z.boolean().optional().openapi({
      description:
        "With failed: false sends the run to the dead letters at once; default true (the job's retry policy).",
    }),
    retryAfterSeconds: boundedInt(1, LIMITS.retryDelaySeconds).optional().openapi({
      description:
        "With a retryable failure: the least wait before its retry, past the retry policy's backoff and never past the job's maxDelaySeconds (as a webhook receiver's Retry-After).",
    }),
  })
  .openapi("CompleteRunRequest", {
    example: { status: "failed", error: "upstream export failed", retryable: true },
  });
export type CompleteRunBody = z.infer<typeof CompleteRunSchema>;
