import { createRoute } from "@hono/zod-openapi";
import { HEALTH_PATH } from "./public-paths.js";
import { json, newRouter } from "./router.js";
import { HealthSchema } from "./schemas/service.js";

const health = createRoute({
  method: "get",
  path: HEALTH_PATH,
  operationId: "health",
  tags: ["service"],
  summary: "Liveness; needs no credentials",
  responses: { 200: json(HealthSchema, "The API is up") },
});

/** Liveness, answered without credentials. */
export function serviceRouter() {
  return newRouter().openapi(health, (c) => c.json({ status: "ok" as const }, 200));
}
