import createClient from "openapi-fetch";
import { retryAfterSecondsOf } from "../client/errors.js";
import { exactJsonAnswer, NULL_BODY_STATUSES, writeJson } from "../client/exact-json.js";
import type { components, paths } from "../client/generated/api.js";
import { currentCredential, currentSession } from "./auth.js";

/**
 * The JSON API, typed by the same generated file as the CLI and the client
 * (`npm run client:generate`, from GET /openapi.json): the console cannot ask
 * for a route or read a field the API does not have.
 */
type Schemas = components["schemas"];
export type Job = Schemas["Job"];
export type Run = Schemas["Run"];
export type Preview = Schemas["Preview"];
export type CreateJob = Schemas["CreateJobRequest"];
export type EditJob = Schemas["EditJobRequest"];
type ErrorBody = Schemas["Error"];
export type FieldIssue = { readonly field: string; readonly message: string };

/** An answer in the API's error shape (docs/api.md, "Errors"). */
export class ApiProblem extends Error {
  override readonly name = "ApiProblem";
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly field: string | undefined,
    readonly issues: readonly FieldIssue[],
    readonly currentStatus: string | undefined,
  ) {
    super(message);
  }
}

/** Told when the API answers 401, so the console asks for credentials again. */
let onUnauthorized: () => void = () => undefined;
export function whenUnauthorized(handler: () => void): void {
  onUnauthorized = handler;
}

/**
 * `fetch` whose answers' `json()` keeps a number a double would change as its digits (a job's
 * payload holds the caller's numbers: a 64-bit id past 2^53), as the client's does
 * (client/exact-json.ts): the payload box shows them as written and an edit sends them back so.
 */
async function exactJsonFetch(request: Request): Promise<Response> {
  const response = await fetch(request);
  if (NULL_BODY_STATUSES.has(response.status)) return response;
  const text = await response.text();
  const headers = new Headers(response.headers);
  // openapi-fetch reads an answer of no stated length with JSON.parse, not with its json().
  headers.set("content-length", String(new TextEncoder().encode(text).length));
  // An error answer with no body of the API's shape is named by its URL (answer(), below).
  return exactJsonAnswer(
    text,
    { status: response.status, statusText: response.statusText, headers },
    response.url,
  );
}

const client = createClient<paths>({
  baseUrl: location.origin,
  fetch: exactJsonFetch,
  // A payload's number kept as its digits (a LosslessNumber) is sent as them.
  bodySerializer: (body: unknown) => writeJson(body),
});
client.use({
  onRequest({ request }) {
    const credential = currentCredential();
    if (credential) request.headers.set("Authorization", `Bearer ${credential.token}`);
    return request;
  },
});

/**
 * A 403 not in the API's error shape: answered before the request reached the scheduler. With the
 * JWT option that is API Gateway refusing a token whose `scope` (or `scp`) claim carries none of
 * the deployment's `jwtScopes` (docs/deploy.md), with a bare `{"message":"Forbidden"}` that told
 * the user nothing; a sign-in made before the deployment's scopes changed gets a token with the
 * new ones, and otherwise the provider does not grant the console's client one of them.
 */
const FORBIDDEN =
  "Forbidden (403), answered before the scheduler saw the request: this deployment requires every call's token to carry one of its scopes (its jwtScopes setting), and yours carries none. Sign out and in again; if it goes on, the identity provider does not grant the console one of those scopes (consoleScope): ask whoever runs the deployment.";

const PERSISTS = "Try again; if it goes on, tell whoever runs the deployment.";

/**
 * What an answer not in the API's error shape means, for the statuses API Gateway answers itself
 * with a bare `{"message": …}` that told the user nothing (docs/console.md, "Signing in"): 403, a
 * token without one of the `jwtScopes`; 413, a body over its payload limit, refused before the
 * scheduler saw it; 429, the deployment's rate limit (`apiRateLimit`, every tenant's requests
 * together) spent, with a `Retry-After` only when a proxy in front adds one; 502 and 504, the
 * API's function failed or ran out of time. null for any other status: shown as its URL and status.
 */
function gatewayProblem(response: Response): { code: string; message: string } | null {
  switch (response.status) {
    case 403:
      return { code: "forbidden", message: FORBIDDEN };
    case 413:
      return {
        code: "payload_too_large",
        message:
          "Request too large (413): API Gateway refused it before the scheduler saw it. Send less (a smaller payload).",
      };
    case 429: {
      const seconds = retryAfterSecondsOf(response.headers.get("retry-after"), Date.now());
      const when = seconds === undefined ? "" : ` in ${seconds} s`;
      return {
        code: "rate_limited",
        message: `Too many requests (429): this deployment's rate limit, which every tenant's requests share (apiRateLimit), is spent for now, and API Gateway refused the request before the scheduler saw it. Wait and try again${when}.`,
      };
    }
    case 502:
      return {
        code: "internal",
        message: `Bad gateway (502): the API's function failed before it answered. ${PERSISTS}`,
      };
    case 504:
      return {
        code: "internal",
        message: `Gateway timeout (504): the API's function did not answer in time. ${PERSISTS}`,
      };
    default:
      return null;
  }
}

/** Settles never: what waits on it does nothing more. */
const dropped = new Promise<never>(() => undefined);

/**
 * The answer's body, or an ApiProblem for an error answer. An answer that arrives after the session
 * that asked has ended (signed out, maybe someone else signed in) is dropped: a create's "Job …
 * created" and its move to the job's page, or a 401 signing the next user out, would act on the
 * next user's screen.
 */
async function answer<T>(
  call: Promise<{ data?: T; error?: unknown; response: Response }>,
): Promise<T> {
  const asked = currentSession();
  const { data, error, response } = await call;
  if (currentSession() !== asked) return dropped;
  if (response.ok && data !== undefined) return data;
  if (response.status === 401) onUnauthorized();
  const body = (error as Partial<ErrorBody> | undefined)?.error;
  // The API's own refusals (a quota's 403, a tenant's 429 rate_limited) come in its shape, with a
  // message of their own.
  const gateway = body === undefined ? gatewayProblem(response) : null;
  throw new ApiProblem(
    response.status,
    body?.code ?? gateway?.code ?? "internal",
    body?.message ?? gateway?.message ?? `${response.url}: ${response.status}`,
    body?.field,
    body?.issues ?? [],
    body?.currentStatus,
  );
}

const job = (id: string) => ({ path: { id } });

/**
 * A new Idempotency-Key, `<what>-<128 random bits in hex>`. Made with getRandomValues, which every
 * page has: crypto.randomUUID exists only in a secure context, and the sandbox also answers plain
 * http at API_URL's host, which need not be loopback.
 */
export function newIdempotencyKey(what: string): string {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return `${what}-${Array.from(bytes, (byte) => byte.toString(16).padStart(2, "0")).join("")}`;
}

export const api = {
  listJobs: (query: { status?: Job["status"] | ""; cursor?: string; limit?: number }) =>
    answer(
      client.GET("/jobs", {
        params: {
          query: {
            ...(query.status ? { status: query.status } : {}),
            ...(query.cursor ? { cursor: query.cursor } : {}),
            ...(query.limit ? { limit: query.limit } : {}),
          },
        },
      }),
    ),
  getJob: (id: string) => answer(client.GET("/jobs/{id}", { params: job(id) })),
  createJob: (body: CreateJob, idempotencyKey: string) =>
    answer(
      client.POST("/jobs", { body, params: { header: { "Idempotency-Key": idempotencyKey } } }),
    ),
  editJob: (id: string, version: number, body: EditJob) =>
    answer(
      client.PATCH("/jobs/{id}", {
        params: { ...job(id), header: { "If-Match": `"${version}"` } },
        body,
      }),
    ),
  changeStatus: (id: string, action: "pause" | "resume" | "cancel") =>
    answer(
      action === "pause"
        ? client.POST("/jobs/{id}/pause", { params: job(id) })
        : action === "resume"
          ? client.POST("/jobs/{id}/resume", { params: job(id) })
          : client.POST("/jobs/{id}/cancel", { params: job(id) }),
    ),
  trigger: (id: string, idempotencyKey: string) =>
    answer(
      client.POST("/jobs/{id}/trigger", {
        params: { ...job(id), header: { "Idempotency-Key": idempotencyKey } },
      }),
    ),
  cancelRun: (id: string, runId: string) =>
    answer(client.POST("/jobs/{id}/runs/{runId}/cancel", { params: { path: { id, runId } } })),
  listRuns: (id: string, query: { cursor?: string; limit?: number; status?: string }) =>
    answer(
      client.GET("/jobs/{id}/runs", {
        params: {
          ...job(id),
          query: {
            ...(query.cursor ? { cursor: query.cursor } : {}),
            ...(query.status ? { status: query.status } : {}),
            limit: query.limit,
          },
        },
      }),
    ),
  previewJob: (id: string, count: number) =>
    answer(client.GET("/jobs/{id}/preview", { params: { ...job(id), query: { count } } })),
  previewSchedule: (body: Schemas["PreviewRequest"]) =>
    answer(client.POST("/schedules/preview", { body })),
  listDeadLetters: (query: { cursor?: string; limit?: number }) =>
    answer(
      client.GET("/dead-letters", {
        params: {
          query: { ...(query.cursor ? { cursor: query.cursor } : {}), limit: query.limit },
        },
      }),
    ),
  // One key per dead run, not per click: a second click (a double click, or a stale page after an
  // answer that was lost) is the same replay, answered with its run rather than a 409.
  replay: (runId: string) =>
    answer(
      client.POST("/dead-letters/{runId}/replay", {
        params: { path: { runId }, header: { "Idempotency-Key": `console-replay-${runId}` } },
      }),
    ),
};
