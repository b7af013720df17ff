import createClient, { type Client, defaultPathSerializer } from "openapi-fetch";
import {
  BATCH,
  HEALTH,
  HEARTBEAT,
  JOB,
  JOB_PAGE,
  PREVIEW,
  QUOTAS,
  RUN,
  RUN_PAGE,
  SECRET,
} from "./answers.js";
import { authMiddleware, type ClientAuth, signedAttempts } from "./auth.js";
import { RequestWithSignal } from "./caller-signal.js";
import { NotAnIdError } from "./errors.js";
import { writeJson } from "./exact-json.js";
import type { components, paths } from "./generated/api.js";
import { JobHandle } from "./job-handle.js";
import { everyItem, type Page, type PagesRead } from "./paging.js";
import {
  ANSWERS,
  AnswerReader,
  callKey,
  pollForRun,
  type RequestOptions,
  signalOf,
  type WaitOptions,
} from "./requests.js";
import { type RetryOptions, retryingFetch } from "./retries.js";
import { boundedFetch, DEFAULT_TIMEOUT_MS } from "./transport.js";
import {
  type BatchCreateResult,
  FINAL_RUN_STATUSES,
  type Job,
  type JobStatus,
  type NewJob,
  type Preview,
  type QuotaOverride,
  type Run,
  type RunStatus,
  type Schedule,
  type TenantQuotas,
} from "./types.js";

/** What an async target reports when it completes the run it took over. */
export type RunCompletion = components["schemas"]["CompleteRunRequest"];
/** A heartbeat's answer: the lease's new end, and when the run times out. */
export type RunHeartbeat = components["schemas"]["RunHeartbeat"];

export interface SchedulerClientOptions {
  /** The API's URL: the sandbox's (http://127.0.0.1:3000) or the stack's ApiUrl output. */
  readonly baseUrl: string;
  readonly auth: ClientAuth;
  /** Replaces the global fetch (a proxy agent, a test double). */
  readonly fetch?: typeof fetch;
  /**
   * Retries of a 429, 502, 503 or 504 answer to a request that is safe to repeat (see RetryOptions:
   * by method, route or Idempotency-Key): 3 by default, each after the answer's Retry-After;
   * `{ attempts: 0 }` sends each request once.
   */
  readonly retry?: RetryOptions;
  /**
   * How long each request may take, its answer's body read to the end (default 30,000 ms; each
   * retry has its own): then it throws a RequestTimeoutError (`code` "timeout"). Requests safe to
   * repeat are retried after a timeout as after a 503; others may have been applied and are not.
   */
  readonly timeoutMs?: number;
}

export interface ListOptions extends RequestOptions {
  /** Items per request (1-100); the iterator fetches as many pages as the caller reads. */
  readonly pageSize?: number;
  /**
   * Told after each page the iterator reads (pages so far, items they held): a filtered listing
   * may read many empty pages before an item, and a caller can show it is still reading.
   */
  readonly onPage?: (read: PagesRead) => void;
}

export interface PageOptions {
  readonly limit?: number;
  readonly cursor?: string;
}

/** Which runs a listing returns: any of these statuses, occurrences in [from, to). */
export interface RunFilter {
  readonly status?: RunStatus | readonly RunStatus[];
  /** The earliest occurrence, inclusive (a Date, or an ISO-8601 instant with a zone). */
  readonly from?: Date | string;
  /** The end of the occurrence range, exclusive. */
  readonly to?: Date | string;
}

const instantText = (value: Date | string) => (value instanceof Date ? value.toISOString() : value);

/** The query parameters of a run filter. */
function runQuery(filter: RunFilter): { status?: string; from?: string; to?: string } {
  const statuses = filter.status === undefined ? [] : [filter.status].flat();
  return {
    ...(statuses.length > 0 ? { status: statuses.join(",") } : {}),
    ...(filter.from === undefined ? {} : { from: instantText(filter.from) }),
    ...(filter.to === undefined ? {} : { to: instantText(filter.to) }),
  };
}

/**
 * A request's path with each id one segment of it, as openapi-fetch writes them
 * (encodeURIComponent), but "", "." and "..", which it leaves as they are: the URL then resolves
 * a dot segment (and its escaped form, `%2e%2e`, alike), so a run id ".." given to a run's cancel
 * sent `POST /jobs/{id}/cancel` and cancelled the job. No job, run or tenant the API can be asked
 * about has such an id, so the request is refused before it is sent.
 */
const segmentsOnly = (pathname: string, params: Record<string, unknown>): string => {
  for (const [name, value] of Object.entries(params)) {
    if (value === "" || value === "." || value === "..") {
      throw new NotAnIdError(
        `${name}: ${JSON.stringify(value)} is no id (a URL reads it as a path, not a segment)`,
      );
    }
  }
  return defaultPathSerializer(pathname, params);
};

/**
 * The scheduler's HTTP API, typed from its OpenAPI document
 * (client/generated/api.ts). Every method throws a SchedulerApiError, typed
 * by `code`, when the API refuses.
 *
 * ```ts
 * const client = new SchedulerClient({ baseUrl, auth: { kind: "bearer", key } });
 * const job = await client.jobs.create({ type: "noop", schedule: { runAt } });
 * const run = await job.waitForRun();
 * ```
 */
export class SchedulerClient {
  /** The generated client itself, for anything the methods below do not cover. */
  readonly http: Client<paths>;
  readonly jobs: JobsApi;
  readonly runs: RunsApi;
  readonly deadLetters: DeadLettersApi;
  readonly schedules: SchedulesApi;
  readonly webhookSecret: WebhookSecretApi;
  readonly quotas: QuotasApi;
  /** Reads this client's answers, an error's `Retry-After` date on its clock (`retry.now`). */
  readonly [ANSWERS]: AnswerReader;
  /** The same API without the tenant's credentials: an async target's calls carry its run token. */
  private readonly runTokenHttp: Client<paths>;

  constructor(options: SchedulerClientOptions) {
    this[ANSWERS] = new AnswerReader(options.retry?.now ?? Date.now);
    const given = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
    // The API never redirects: a redirect is something else at the base URL (a custom domain's
    // http-to-https redirect, a proxy, a wrong host). Followed, a 301-303 turned a POST into a GET
    // whose answer passed for the job created, and a 307 or 308 sent the body (payload, target
    // headers) to the other host. Manual: the 3xx comes back and is an error (errorOf).
    const base: typeof fetch = (input, init) => given(input, { ...init, redirect: "manual" });
    const attempt = boundedFetch(base, options.timeoutMs ?? DEFAULT_TIMEOUT_MS);
    const http = (send: typeof fetch) =>
      createClient<paths>({
        baseUrl: options.baseUrl.replace(/\/+$/, ""),
        pathSerializer: segmentsOnly,
        // A payload's number kept as its digits (a LosslessNumber) is sent as them.
        bodySerializer: (body: unknown) => writeJson(body),
        // Keeps the caller's signal for the fetch layers below (caller-signal.ts).
        Request: RequestWithSignal,
        fetch: retryingFetch(send, options.retry),
      });
    // A SigV4 signature is made for each attempt, below the retries (signedAttempts).
    this.http = http(signedAttempts(options.auth, options.baseUrl, attempt));
    this.runTokenHttp = http(attempt);
    this.http.use(authMiddleware(options.auth));
    this.jobs = new JobsApi(this);
    this.runs = new RunsApi(this);
    this.deadLetters = new DeadLettersApi(this);
    this.schedules = new SchedulesApi(this);
    this.webhookSecret = new WebhookSecretApi(this);
    this.quotas = new QuotasApi(this);
  }

  async health(): Promise<{ status: "ok" }> {
    return this[ANSWERS].unwrap("GET /health", this.http.GET("/health"), HEALTH);
  }

  /**
   * For an async (long-job) target: extends the lease of the run it took over with a 202, using
   * the run token its delivery carried (X-Scheduler-Run-Token). No tenant credentials are sent, so
   * a target may use a client made with `auth: { kind: "none" }`. 409 (`stale_run_token`) once the
   * run ended, was cancelled or was started again.
   */
  runHeartbeat(runId: string, token: string): Promise<RunHeartbeat> {
    return this[ANSWERS].unwrap(
      "POST /runs/{runId}/heartbeat",
      this.runTokenHttp.POST("/runs/{runId}/heartbeat", {
        params: { path: { runId } },
        headers: { Authorization: `Bearer ${token}` },
      }),
      HEARTBEAT,
    );
  }

  /** For an async target: ends its run, succeeded or failed (the job's retry policy applies). */
  completeRun(runId: string, token: string, completion: RunCompletion): Promise<Run> {
    return this[ANSWERS].unwrap(
      "POST /runs/{runId}/complete",
      this.runTokenHttp.POST("/runs/{runId}/complete", {
        params: { path: { runId } },
        body: completion,
        headers: { Authorization: `Bearer ${token}` },
      }),
      RUN,
    );
  }

  /**
   * Waits until the run reaches a final status (or one of `until`), polling GET of the run; its
   * `signal` aborts the poll in flight too.
   */
  waitForRun(jobId: string, runId: string, options: WaitOptions = {}): Promise<Run> {
    const until = options.until ?? FINAL_RUN_STATUSES;
    return pollForRun(
      `run ${runId}`,
      async () => {
        const run = await this.runs.get(jobId, runId, signalOf(options));
        return { done: until.includes(run.status) ? run : null, seen: run };
      },
      options,
    );
  }
}

export interface CreateOptions {
  /**
   * The create's Idempotency-Key: the same key with the same body returns the first job instead
   * of a second one. Default the body's `idempotencyKey`, else a new random one per call, so the
   * client's retries of a lost answer (a 502, 504, timeout or broken connection) make one job.
   * Give your own to make a create you send again yourself (after the retries ran out) the same
   * one, for 24 hours. `false` sends none (a body carrying `idempotencyKey` is then refused before
   * it is sent): the create costs fewer writes (docs/scaling.md), and is sent once, a lost answer
   * failing with "it may have been applied".
   */
  readonly idempotencyKey?: string | false;
}

class JobsApi {
  constructor(private readonly client: SchedulerClient) {}

  /**
   * Schedules a job and returns its handle; the payload is typed by the job's type. Sent with an
   * Idempotency-Key (see `CreateOptions`), so a retry after a lost answer makes no second job.
   */
  async create(body: NewJob, options: CreateOptions = {}): Promise<JobHandle> {
    const option = options.idempotencyKey;
    const declined = option === false;
    if (declined && body.idempotencyKey !== undefined)
      throw new TypeError("idempotencyKey: false declines a key, but the body carries one");
    const given = declined ? undefined : (option ?? body.idempotencyKey);
    const { data, response } = await this.client[ANSWERS].unwrapWithResponse(
      "POST /jobs",
      this.client.http.POST("/jobs", {
        body,
        ...(declined
          ? {}
          : { params: { header: { "Idempotency-Key": given ?? callKey("create") } } }),
      }),
      JOB,
    );
    // Under a key of this call's own a 200 can only answer this call's earlier attempt, whose
    // answer was lost: the job is this call's. Under the caller's key it may be an earlier call's.
    const created =
      response.status === 201 || (!declined && given === undefined && response.status === 200);
    return new JobHandle(this.client, data.id, data, created);
  }

  /**
   * Schedules up to 25 jobs in one request (`POST /jobs:batch`), each with its
   * own result in the order given: `status` 201 (created) or 200 (the job an
   * earlier request with its `idempotencyKey` created) with `job`, or the
   * status and `error` POST /jobs would have answered for it alone. Only a
   * request that is not 1 to 25 jobs throws (a 400 naming `jobs`).
   */
  async createBatch(jobs: readonly NewJob[]): Promise<BatchCreateResult[]> {
    const { results } = await this.client[ANSWERS].unwrap(
      "POST /jobs:batch",
      this.client.http.POST("/jobs:batch", { body: { jobs: [...jobs] } }),
      BATCH,
    );
    return results;
  }

  /** A handle for a job by id, without a request. */
  handle(id: string): JobHandle {
    return new JobHandle(this.client, id);
  }

  /** Reads the job and returns its handle (which knows its version for edits). */
  async get(id: string, options: RequestOptions = {}): Promise<JobHandle> {
    const handle = this.handle(id);
    await handle.get(options);
    return handle;
  }

  /** Every job of the caller, newest first, over as many pages as are read. */
  list(options: ListOptions & { status?: JobStatus } = {}): AsyncGenerator<Job, void, undefined> {
    return everyItem(
      (cursor) =>
        this.page(
          {
            ...(options.status ? { status: options.status } : {}),
            ...(options.pageSize ? { limit: options.pageSize } : {}),
            ...(cursor ? { cursor } : {}),
          },
          signalOf(options),
        ),
      options.onPage,
    );
  }

  page(
    query: PageOptions & { status?: JobStatus } = {},
    options: RequestOptions = {},
  ): Promise<Page<Job>> {
    return this.client[ANSWERS].unwrap(
      "GET /jobs",
      this.client.http.GET("/jobs", { params: { query }, ...signalOf(options) }),
      JOB_PAGE,
    );
  }
}

class RunsApi {
  constructor(private readonly client: SchedulerClient) {}

  /**
   * Every run of a job, newest occurrence first, over as many pages as are
   * read; only runs of these statuses and occurrences when a filter is given.
   */
  list(jobId: string, options: ListOptions & RunFilter = {}): AsyncGenerator<Run, void, undefined> {
    return everyItem(
      (cursor) =>
        this.page(
          jobId,
          {
            ...runQuery(options),
            ...(options.pageSize ? { limit: options.pageSize } : {}),
            ...(cursor ? { cursor } : {}),
          },
          signalOf(options),
        ),
      options.onPage,
    );
  }

  /** One page; a filter's cursor is only taken with the same filter. */
  page(
    jobId: string,
    query: PageOptions & { status?: string; from?: string; to?: string } = {},
    options: RequestOptions = {},
  ): Promise<Page<Run>> {
    return this.client[ANSWERS].unwrap(
      "GET /jobs/{id}/runs",
      this.client.http.GET("/jobs/{id}/runs", {
        params: { path: { id: jobId }, query },
        ...signalOf(options),
      }),
      RUN_PAGE,
    );
  }

  get(jobId: string, runId: string, options: RequestOptions = {}): Promise<Run> {
    return this.client[ANSWERS].unwrap(
      "GET /jobs/{id}/runs/{runId}",
      this.client.http.GET("/jobs/{id}/runs/{runId}", {
        params: { path: { id: jobId, runId } },
        ...signalOf(options),
      }),
      RUN,
    );
  }

  /** Cancels one run (see `JobHandle.cancelRun`). */
  cancel(jobId: string, runId: string): Promise<Run> {
    return this.client[ANSWERS].unwrap(
      "POST /jobs/{id}/runs/{runId}/cancel",
      this.client.http.POST("/jobs/{id}/runs/{runId}/cancel", {
        params: { path: { id: jobId, runId } },
      }),
      RUN,
    );
  }
}

class DeadLettersApi {
  constructor(private readonly client: SchedulerClient) {}

  /** Dead runs not yet replayed, newest first. */
  list(options: ListOptions = {}): AsyncGenerator<Run, void, undefined> {
    return everyItem(
      (cursor) =>
        this.page(
          {
            ...(options.pageSize ? { limit: options.pageSize } : {}),
            ...(cursor ? { cursor } : {}),
          },
          signalOf(options),
        ),
      options.onPage,
    );
  }

  page(query: PageOptions = {}, options: RequestOptions = {}): Promise<Page<Run>> {
    return this.client[ANSWERS].unwrap(
      "GET /dead-letters",
      this.client.http.GET("/dead-letters", { params: { query }, ...signalOf(options) }),
      RUN_PAGE,
    );
  }

  /**
   * Runs the dead occurrence again as its next attempt; returns the new run. Sent with an
   * Idempotency-Key (see `ReplayOptions`), so a repeat of this call's request answers the run it
   * queued rather than a 409.
   */
  replay(runId: string, options: ReplayOptions = {}): Promise<Run> {
    const idempotencyKey = options.idempotencyKey ?? callKey("replay");
    return this.client[ANSWERS].unwrap(
      "POST /dead-letters/{runId}/replay",
      this.client.http.POST("/dead-letters/{runId}/replay", {
        params: { path: { runId }, header: { "Idempotency-Key": idempotencyKey } },
      }),
      RUN,
    );
  }
}

class SchedulesApi {
  constructor(private readonly client: SchedulerClient) {}

  /**
   * The schedule's next occurrences, in UTC and in its zone, from `from`
   * (default now; one before now starts at the first occurrence a job created
   * now would have), stopping where a job created now with `end` (its `endAt`,
   * `maxRuns`) would; a 400 names what is wrong.
   */
  preview(
    schedule: Schedule,
    count?: number,
    from?: Date | string,
    end: { readonly endAt?: Date | string; readonly maxRuns?: number } = {},
    options: RequestOptions = {},
  ): Promise<Preview> {
    return this.client[ANSWERS].unwrap(
      "POST /schedules/preview",
      this.client.http.POST("/schedules/preview", {
        body: {
          schedule,
          ...(count === undefined ? {} : { count }),
          ...(from === undefined ? {} : { from: instantText(from) }),
          ...(end.endAt === undefined ? {} : { endAt: instantText(end.endAt) }),
          ...(end.maxRuns === undefined ? {} : { maxRuns: end.maxRuns }),
        },
        ...signalOf(options),
      }),
      PREVIEW,
    );
  }
}

export interface ReplayOptions {
  /**
   * The replay's Idempotency-Key; default a new random one per call, so the client's retries of a
   * 429 or 503 repeat this replay instead of being refused as a second one. Give your own to make
   * a replay you send again yourself (after a timeout) the same one: a repeat answers the run it
   * queued for as long as the dead run and that run are kept.
   */
  readonly idempotencyKey?: string;
}

export interface RotateOptions {
  /**
   * The rotation's Idempotency-Key; default a new random one per call, so the client's retries
   * of a 429 or 503 repeat this rotation instead of making another. Give your own to make a
   * rotation you send again yourself (after a timeout) the same one: a repeat within 24 hours
   * answers the secret it made, and is refused (409) once a later rotation has replaced it.
   */
  readonly idempotencyKey?: string;
}

class WebhookSecretApi {
  constructor(private readonly client: SchedulerClient) {}

  /** The secret the caller's webhook deliveries are signed with (made on first use). */
  async get(options: RequestOptions = {}): Promise<string> {
    const answer = this.client.http.GET("/webhook-secret", signalOf(options));
    return (await this.client[ANSWERS].unwrap("GET /webhook-secret", answer, SECRET)).secret;
  }

  /**
   * A new secret; for 24 hours deliveries carry signatures of both. Sent with an Idempotency-Key
   * (see `RotateOptions`): rotating again by accident would cut off at once the secret receivers
   * still verify with.
   */
  async rotate(options: RotateOptions = {}): Promise<string> {
    const idempotencyKey = options.idempotencyKey ?? callKey("rotate");
    const answer = this.client.http.POST("/webhook-secret/rotate", {
      params: { header: { "Idempotency-Key": idempotencyKey } },
    });
    return (await this.client[ANSWERS].unwrap("POST /webhook-secret/rotate", answer, SECRET))
      .secret;
  }
}

class QuotasApi {
  constructor(private readonly client: SchedulerClient) {}

  /** The caller's quotas: what applies, its override, and its runs running now. */
  async get(options: RequestOptions = {}): Promise<TenantQuotas> {
    return this.client[ANSWERS].unwrap(
      "GET /quotas",
      this.client.http.GET("/quotas", signalOf(options)),
      QUOTAS,
    );
  }

  /** Any tenant's quotas; for the deployment's admin tenants only (403 `forbidden` otherwise). */
  async getTenant(tenantId: string, options: RequestOptions = {}): Promise<TenantQuotas> {
    return this.client[ANSWERS].unwrap(
      "GET /tenants/{tenantId}/quotas",
      this.client.http.GET("/tenants/{tenantId}/quotas", {
        params: { path: { tenantId } },
        ...signalOf(options),
      }),
      QUOTAS,
    );
  }

  /**
   * Replaces a tenant's override (admin tenants only): the quotas given apply from the next
   * create, start or request; those left out take the deployment's defaults; `{}` removes it.
   */
  async setTenant(tenantId: string, override: QuotaOverride): Promise<TenantQuotas> {
    return this.client[ANSWERS].unwrap(
      "PUT /tenants/{tenantId}/quotas",
      this.client.http.PUT("/tenants/{tenantId}/quotas", {
        params: { path: { tenantId } },
        body: override,
      }),
      QUOTAS,
    );
  }
}
