import { DOCS_PATH } from "../console/config.js";

export const HEALTH_PATH = "/health";
export const OPENAPI_PATH = "/openapi.json";

/**
 * The GET paths the API answers without credentials: liveness, the OpenAPI
 * document and the reference rendered from it, none of which holds data. The
 * app (./app.ts) lets them past authentication, and the stack
 * (infra/constructs/api.ts) gives each a route without an authorizer, so a
 * deployed API answers them as the local server does. The console's paths
 * (./console-router.ts) and an async target's run routes, which authenticate
 * by run token (./async-runs-router.ts), are public too, each recognised by
 * its own module.
 */
export const PUBLIC_GET_PATHS: readonly string[] = [HEALTH_PATH, OPENAPI_PATH, DOCS_PATH];
