import { fileURLToPath } from "node:url";
import { handle } from "hono/aws-lambda";
import { createApiApp } from "../../shared/api/app.js";
import {
  adminTenantsFrom,
  defaultTenantOfClaims,
  defaultTenantOfPrincipal,
  iamAuthenticator,
  jwtAuthenticator,
} from "../../shared/api/auth.js";
import { ENV } from "../../shared/config.js";
import { readConsoleAssets } from "../../shared/console/assets.js";
import { parseConsoleAuth } from "../../shared/console/config.js";
import { demoJobTypesFrom } from "../../shared/job-types/demo-types.js";
import { jobTypeCatalog } from "../../shared/job-types/registry.js";
import { engineFromEnv, powertoolsObservability } from "../../shared/runtime.js";
import { customJobTypes } from "../worker/handlers/index.js";

/**
 * API Gateway HTTP API (payload v2) → the API app. With IAM authorization the
 * tenant is the calling IAM principal; with the JWT authorizer (API_AUTH=jwt)
 * it is the token's `tenant_id` claim, or `sub:<subject>`. To map callers onto
 * tenants your way, pass your own function instead of the default (see
 * TenantOfPrincipal / TenantOfClaims in shared/api/auth.ts and docs/api.md).
 */
const obs = powertoolsObservability("scheduler-api");
const engine = engineFromEnv(obs);

// The demo types (sleep, fail) only where the stack enables them (the demoJobTypes option).
const jobTypes = jobTypeCatalog({
  custom: customJobTypes.map((t) => t.definition),
  demoTypes: demoJobTypesFrom(process.env, false),
});
const jwt = process.env[ENV.apiAuth] === "jwt";
// With the JWT option the console signs in at the issuer (PKCE); browsers cannot sign with IAM.
const consoleAuth = parseConsoleAuth(process.env[ENV.consoleAuth]);

const app = createApiApp({
  engine,
  jobTypes,
  adminTenants: adminTenantsFrom(process.env),
  authenticate: jwt
    ? jwtAuthenticator(defaultTenantOfClaims)
    : iamAuthenticator(defaultTenantOfPrincipal),
  console: {
    // The bundle carries the console's build in console/ beside this module (infra/constructs/api.ts).
    assets: readConsoleAssets(fileURLToPath(new URL("./console/", import.meta.url))),
    config: { auth: consoleAuth, jobTypes: jobTypes.accepted },
  },
});

const serve = handle(app);

/**
 * Each request's metrics go out before it answers, as the other functions' do at the end of each
 * invocation: Powertools buffers the metrics without dimensions (a fast-path claim's `Claims`,
 * `ClaimsLostToRaces`, `StaleDueEntries`) until published, and a buffer left to fill would reach
 * CloudWatch only at its 100th value, or never when the instance is recycled first. A request
 * that recorded none writes nothing (publishing an empty buffer logs a warning).
 */
export const handler: typeof serve = async (event, lambdaContext) => {
  try {
    return await serve(event, lambdaContext);
  } finally {
    if (obs.metrics.hasStoredMetrics()) obs.metrics.publishStoredMetrics();
  }
};
