import { createRoute } from "@hono/zod-openapi";
import type { Context } from "hono";
import { quotaView, setQuotaOverride } from "../quotas/overrides.js";
import { textHead } from "../storage/stored-text.js";
import { isValidTenantId } from "./auth.js";
import { ApiError, notFound } from "./errors.js";
import {
  type ApiEnv,
  errors,
  json,
  newRouter,
  type RouterDeps,
  secured,
  tenantOf,
} from "./router.js";
import { QuotaOverrideSchema, TenantIdParams, TenantQuotasSchema } from "./schemas/quotas.js";

const getQuotas = createRoute({
  method: "get",
  path: "/quotas",
  operationId: "getQuotas",
  tags: ["quotas"],
  summary: "The caller's quotas: what applies, its override, and its runs running now",
  security: secured,
  responses: { 200: json(TenantQuotasSchema, "The caller's quotas"), ...errors(401) },
});

const getTenantQuotas = createRoute({
  method: "get",
  path: "/tenants/{tenantId}/quotas",
  operationId: "getTenantQuotas",
  tags: ["quotas"],
  summary: "A tenant's quotas (admin tenants only)",
  security: secured,
  request: { params: TenantIdParams },
  responses: {
    200: json(TenantQuotasSchema, "The tenant's quotas"),
    ...errors(401, 403, 404),
  },
});

/**
 * Quotas: the caller's own view, and an admin tenant's reads and overrides of
 * any tenant's quotas, which apply without a deploy or restart.
 */
export function quotasRouter({ engine, body, adminTenants }: RouterDeps) {
  const putTenantQuotas = createRoute({
    method: "put",
    path: "/tenants/{tenantId}/quotas",
    operationId: "putTenantQuotas",
    tags: ["quotas"],
    summary:
      "Replace a tenant's quota override (admin tenants only); quotas it leaves out take the defaults",
    security: secured,
    middleware: [body] as const,
    request: {
      params: TenantIdParams,
      body: { content: { "application/json": { schema: QuotaOverrideSchema } }, required: true },
    },
    responses: {
      200: json(TenantQuotasSchema, "The tenant's quotas with the new override"),
      ...errors(400, 401, 403, 404, 413, 415),
    },
  });

  const router = newRouter();
  const adminTarget = (c: Context<ApiEnv>, tenantId: string) => {
    if (!adminTenants.has(tenantOf(c))) {
      throw new ApiError(
        403,
        "forbidden",
        "only the deployment's admin tenants (ADMIN_TENANTS) may read or set another tenant's quotas",
      );
    }
    // Whole characters of the id: half of one is no Unicode text to answer.
    if (!isValidTenantId(tenantId)) throw notFound(`no tenant ${textHead(tenantId, 64)}`);
    return tenantId;
  };

  router.openapi(getQuotas, async (c) =>
    c.json(await quotaView(engine, tenantOf(c), engine.clock()), 200),
  );

  router.openapi(getTenantQuotas, async (c) => {
    const tenantId = adminTarget(c, c.req.valid("param").tenantId);
    return c.json(await quotaView(engine, tenantId, engine.clock()), 200);
  });

  router.openapi(putTenantQuotas, async (c) => {
    const tenantId = adminTarget(c, c.req.valid("param").tenantId);
    return c.json(await setQuotaOverride(engine, tenantId, c.req.valid("json")), 200);
  });

  return router;
}
