import { createRoute } from "@hono/zod-openapi";
import { rotateWebhookSecret, tenantWebhookSecrets } from "../webhooks/secrets.js";
import { noBody } from "./body.js";
import { errors, json, newRouter, type RouterDeps, secured, tenantOf } from "./router.js";
import { RotateHeaders, WebhookSecretSchema } from "./schemas/webhook-secret.js";

const getWebhookSecret = createRoute({
  method: "get",
  path: "/webhook-secret",
  operationId: "getWebhookSecret",
  tags: ["webhooks"],
  summary: "The secret the caller's webhook deliveries are signed with (made on first use)",
  security: secured,
  responses: {
    200: json(WebhookSecretSchema, "The current secret; not cached (Cache-Control: no-store)"),
    ...errors(401),
  },
});

const rotateWebhookSecretRoute = createRoute({
  method: "post",
  path: "/webhook-secret/rotate",
  operationId: "rotateWebhookSecret",
  tags: ["webhooks"],
  summary:
    "A new secret; for 24 hours deliveries carry signatures of both the new and the replaced one",
  security: secured,
  middleware: [noBody] as const,
  request: { headers: RotateHeaders },
  responses: {
    200: json(
      WebhookSecretSchema,
      "The new secret, or the one an earlier rotation with the same Idempotency-Key made; not cached (Cache-Control: no-store)",
    ),
    ...errors(400, 401, 409, 503),
  },
});

/** The caller's webhook signing secret: read it, rotate it. */
export function webhookSecretRouter({ engine }: RouterDeps) {
  const router = newRouter();

  router.openapi(getWebhookSecret, async (c) => {
    const secrets = await tenantWebhookSecrets(engine, tenantOf(c));
    c.header("Cache-Control", "no-store");
    return c.json({ secret: secrets.current }, 200);
  });

  router.openapi(rotateWebhookSecretRoute, async (c) => {
    const key = c.req.valid("header")["Idempotency-Key"];
    const secrets = await rotateWebhookSecret(engine, tenantOf(c), key);
    c.header("Cache-Control", "no-store");
    return c.json({ secret: secrets.current }, 200);
  });

  return router;
}
