import { z } from "@hono/zod-openapi";
import { IdempotencyKeySchema } from "./common.js";

export const WebhookSecretSchema = z
  .strictObject({
    secret: z
      .string()
      .regex(/^whsec_[A-Za-z0-9+/]+=*$/)
      .openapi({
        description:
          'The caller\'s webhook signing secret: `whsec_` + base64 of 32 random bytes. Deliveries carry `webhook-signature: v1,<base64 HMAC-SHA256 of "<webhook-id>.<webhook-timestamp>.<body>">` keyed with the bytes after `whsec_` (Standard Webhooks).',
        example: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
      }),
  })
  .openapi("WebhookSecret");

export const RotateHeaders = z.object({
  "Idempotency-Key": IdempotencyKeySchema.optional().openapi({
    description:
      "Makes a retry harmless. The key of the rotation that made the current secret answers that secret again (200) and rotates nothing, for 24 hours after that rotation; the key of a rotation a later one replaced is 409 while its secret still signs (24 hours after the rotation that replaced it). Any other key, or none, rotates. Keys are per tenant.",
  }),
});
