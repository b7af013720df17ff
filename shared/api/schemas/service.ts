import { z } from "@hono/zod-openapi";

export const HealthSchema = z.strictObject({ status: z.literal("ok") }).openapi("Health");
