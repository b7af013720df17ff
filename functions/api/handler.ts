import { handle } from "hono/aws-lambda";
import { createApiApp } from "../../shared/api/app.js";
import { defaultTenantOfPrincipal, iamAuthenticator } from "../../shared/api/auth.js";
import { BUILT_IN_TYPES } from "../../shared/execution/handlers.js";
import { engineFromEnv, powertoolsObservability } from "../../shared/runtime.js";
import { customHandlers } from "../worker/handlers/index.js";

/**
 * API Gateway HTTP API (payload v2, IAM authorization) → the API app. The
 * tenant is the calling IAM principal; to map principals onto tenants your
 * way, pass your own function instead of defaultTenantOfPrincipal (see
 * TenantOfPrincipal in shared/api/auth.ts and docs/api.md).
 */
const engine = engineFromEnv(powertoolsObservability("scheduler-api"));

const app = createApiApp({
  engine,
  jobTypes: [...BUILT_IN_TYPES, ...customHandlers.keys()],
  authenticate: iamAuthenticator(defaultTenantOfPrincipal),
});

export const handler = handle(app);
