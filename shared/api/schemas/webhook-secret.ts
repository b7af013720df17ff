import { z } from "@hono/zod-openapi";

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
