import type { OpenAPIHono } from "@hono/zod-openapi";
import type { MiddlewareHandler } from "hono";
import { invalid } from "./errors.js";
import { unknownParameterIssue } from "./issues.js";

interface DeclaredRoute {
  readonly method: string;
  readonly path: RegExp;
  /** Whether the route declares query parameters: its schema then refuses the others, with its own issues. */
  readonly takesQuery: boolean;
}

/** A route's path as the document writes it (`/jobs/{id}`), as a pattern of request paths. */
const pathPattern = (path: string) =>
  new RegExp(`^${path.replace(/[.*+?^$()|[\]\\]/g, "\\$&").replace(/\{[^/}]+\}/g, "[^/]+")}$`);

/**
 * A query parameter sent to a route of the document that declares none is a 400 naming it, as a
 * route that declares some refuses the others (its query schema is strict): a misspelt `?limt=5`
 * on GET /quotas would otherwise do nothing, silently. The routes are read from the document's
 * registry at the first request, once every router is mounted. Paths outside the document (the
 * OpenAPI document itself, /docs, the console, whose sign-in callback takes what the identity
 * provider sends) are left to their own handlers.
 */
export function refuseUndeclaredQuery(registry: OpenAPIHono["openAPIRegistry"]): MiddlewareHandler {
  let routes: readonly DeclaredRoute[] | undefined;
  return async (c, next) => {
    routes ??= registry.definitions.flatMap((definition) =>
      definition.type === "route"
        ? [
            {
              method: definition.route.method.toUpperCase(),
              path: pathPattern(definition.route.path),
              takesQuery: definition.route.request?.query !== undefined,
            },
          ]
        : [],
    );
    const method = c.req.method === "HEAD" ? "GET" : c.req.method;
    const route = routes.find((r) => r.method === method && r.path.test(c.req.path));
    const names = Object.keys(c.req.queries());
    if (route !== undefined && !route.takesQuery && names.length > 0) {
      throw invalid(names.map(unknownParameterIssue));
    }
    await next();
  };
}
