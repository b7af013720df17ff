import { JOB, PREVIEW, RUN } from "./answers.js";
import { isSchedulerApiError, VersionConflictError } from "./errors.js";
import {
  ANSWERS,
  callKey,
  pollForRun,
  type RequestOptions,
  signalOf,
  type WaitOptions,
} from "./requests.js";
import { followsUnclearAttempt } from "./retries.js";
import { LOOK_BACK_MS, pagedRunPolls, unsureUpTo } from "./run-follow.js";
import type { ListOptions, RunFilter, SchedulerClient } from "./scheduler-client.js";
import {
  type EditJobRequest,
  FINAL_RUN_STATUSES,
  type Job,
  type Preview,
  type Run,
} from "./types.js";

/**
 * How `JobHandle.delete()` ended: `"deleted"`, the API answered that it deleted the job; `"gone"`,
 * a retry after an attempt with no clear answer found no such job, which that attempt may have
 * deleted or which never existed.
 */
export type DeleteOutcome = "deleted" | "gone";

export interface EditOptions {
  /**
   * The version the edit is based on (sent as If-Match). Default: the
   * version this handle last saw, or the job's current one read first.
   */
  readonly version?: number;
}

export interface TriggerOptions {
  /**
   * The trigger's Idempotency-Key: the same key on the same job within 24 hours returns the first
   * trigger's run. Default a new random one per call, so the client's retries of a lost answer (a
   * 502, 504, timeout or broken connection) queue one run. Give your own to make a trigger you
   * send again yourself (after the retries ran out) the same one. `false` sends none: the trigger
   * costs fewer writes (docs/scaling.md), and is sent once, a lost answer failing with "it may have
   * been applied".
   */
  readonly idempotencyKey?: string | false;
}

/** Runs a page `waitForRun` without a `runId` reads, the most the API gives. */
const WAIT_PAGE = 100;

export interface WaitForRunOptions extends WaitOptions {
  /**
   * The run to wait for. Without it: the next run of the job to reach a
   * status waited for, one that had not reached it when the wait began (the
   * first run of a job just created, the run a trigger queued, …).
   */
  readonly runId?: string;
}

/**
 * One job: its id, the job as last seen, and what can be done to it. Every
 * method that answers with the job updates `job`, so an edit after a pause
 * sends the version the pause returned.
 */
export class JobHandle {
  #job: Job | undefined;

  constructor(
    private readonly client: SchedulerClient,
    readonly id: string,
    job?: Job,
    /**
     * True only for a handle `jobs.create` answered with a new job: 201, or, under the key the
     * client made for that call, the 200 that answers a retry with the job its first attempt made
     * (the answer to that attempt lost). False when create found the job an earlier request with
     * the caller's idempotency key made, and for a handle that only reads the job (`jobs.get`,
     * `jobs.handle`).
     */
    readonly created = false,
  ) {
    this.#job = job;
  }

  /** The job as last seen by this handle; undefined until read. */
  get job(): Job | undefined {
    return this.#job;
  }

  #seen(job: Job): Job {
    this.#job = job;
    return job;
  }

  /** Reads the job again. */
  async get(options: RequestOptions = {}): Promise<Job> {
    return this.#seen(
      await this.client[ANSWERS].unwrap(
        "GET /jobs/{id}",
        this.client.http.GET("/jobs/{id}", {
          params: { path: { id: this.id } },
          ...signalOf(options),
        }),
        JOB,
      ),
    );
  }

  /**
   * Pauses the job. Runs in progress finish (`running: "finish"`, the default),
   * or with `running: "cancel"` each ends CANCELLED within a heartbeat.
   */
  async pause(options: { running?: "finish" | "cancel" } = {}): Promise<Job> {
    return this.#seen(
      await this.client[ANSWERS].unwrap(
        "POST /jobs/{id}/pause",
        this.client.http.POST("/jobs/{id}/pause", {
          params: { path: { id: this.id } },
          ...(options.running ? { body: { running: options.running } } : {}),
        }),
        JOB,
      ),
    );
  }

  async resume(): Promise<Job> {
    return this.#seen(
      await this.client[ANSWERS].unwrap(
        "POST /jobs/{id}/resume",
        this.client.http.POST("/jobs/{id}/resume", { params: { path: { id: this.id } } }),
        JOB,
      ),
    );
  }

  /** Stops the job for good: queued runs end cancelled, running runs within a heartbeat. */
  async cancel(): Promise<Job> {
    return this.#seen(
      await this.client[ANSWERS].unwrap(
        "POST /jobs/{id}/cancel",
        this.client.http.POST("/jobs/{id}/cancel", { params: { path: { id: this.id } } }),
        JOB,
      ),
    );
  }

  /**
   * Cancels the job and removes it (queued runs end cancelled). Its runs stay
   * readable through `runs()` and `run()` until they expire. Resolves
   * `"deleted"` when the API answered that it deleted the job. A second delete
   * throws a `not_found` error, as for any job that does not exist. A retry's
   * `not_found`, after an attempt that timed out or that API Gateway answered
   * 502 or 504, resolves `"gone"`: there is no such job now, and that attempt
   * may have deleted it, but the client cannot tell that from an id that never
   * named a job (a deleted job with no runs left answers as one that never was).
   */
  async delete(): Promise<DeleteOutcome> {
    const { error, response } = await this.client.http.DELETE("/jobs/{id}", {
      params: { path: { id: this.id } },
    });
    if (response.ok) return "deleted";
    const refused = this.client[ANSWERS].errorOf(response, error, "DELETE /jobs/{id}");
    if (refused.is("not_found") && followsUnclearAttempt(response)) return "gone";
    throw refused;
  }

  /**
   * Cancels one run of this job: a queued run comes back CANCELLED; a running
   * one comes back RUNNING with `cancelRequestedAt`, and its worker ends it
   * CANCELLED within a heartbeat (wait with `waitForRun`). A run already CANCELLED
   * comes back as it stands (a repeat answers the same); one that ended otherwise
   * throws a `SchedulerApiError` with code `illegal_transition` (409).
   */
  cancelRun(runId: string): Promise<Run> {
    return this.client.runs.cancel(this.id, runId);
  }

  /**
   * One extra run now, outside the schedule; returns the queued run. Sent with
   * an Idempotency-Key (see `TriggerOptions`): a trigger repeated within 24
   * hours under it (the client's retry after a lost answer, or yours with your
   * key) returns the run the first one queued instead of queueing another.
   */
  trigger(options: TriggerOptions = {}): Promise<Run> {
    return this.client[ANSWERS].unwrap(
      "POST /jobs/{id}/trigger",
      this.client.http.POST("/jobs/{id}/trigger", {
        params: {
          path: { id: this.id },
          ...(options.idempotencyKey === false
            ? {}
            : { header: { "Idempotency-Key": options.idempotencyKey ?? callKey("trigger") } }),
        },
      }),
      RUN,
    );
  }

  /**
   * Changes the job at a version (If-Match). When the job changed since, the
   * API answers 412 and this throws a VersionConflictError with the current
   * version: read the job again, decide, and edit at that version. An edit
   * answered 503, 502 or 504, or left unanswered, is sent again at the same
   * If-Match: the API answers it with the job that edit made, written once
   * (a 412 once another edit has followed).
   */
  async edit(changes: EditJobRequest, options: EditOptions = {}): Promise<Job> {
    const version = options.version ?? this.#job?.version ?? (await this.get()).version;
    try {
      const { data } = await this.client[ANSWERS].unwrapWithResponse(
        "PATCH /jobs/{id}",
        this.client.http.PATCH("/jobs/{id}", {
          params: { path: { id: this.id }, header: { "If-Match": `"${version}"` } },
          body: changes,
        }),
        JOB,
      );
      return this.#seen(data);
    } catch (error) {
      if (!isSchedulerApiError(error, "version_mismatch")) throw error;
      throw new VersionConflictError(error.message, version, error.currentVersion);
    }
  }

  /**
   * The job's next occurrences, in UTC and in its zone, from `from` (default now; one before now
   * starts at the earliest occurrence the job has not run yet).
   */
  preview(count?: number, from?: Date | string, options: RequestOptions = {}): Promise<Preview> {
    const query = {
      ...(count === undefined ? {} : { count }),
      ...(from === undefined ? {} : { from: from instanceof Date ? from.toISOString() : from }),
    };
    return this.client[ANSWERS].unwrap(
      "GET /jobs/{id}/preview",
      this.client.http.GET("/jobs/{id}/preview", {
        params: { path: { id: this.id }, query },
        ...signalOf(options),
      }),
      PREVIEW,
    );
  }

  /**
   * Every run of the job, newest occurrence first, fetching pages as they are
   * read; `status`, `from` and `to` filter on the server.
   */
  runs(options: ListOptions & RunFilter = {}): AsyncGenerator<Run, void, undefined> {
    return this.client.runs.list(this.id, options);
  }

  run(runId: string, options: RequestOptions = {}): Promise<Run> {
    return this.client.runs.get(this.id, runId, options);
  }

  /**
   * Waits for a run to reach a final status (or one of `until`) and returns
   * it. Without `runId` the first poll reads the job's newest page of runs
   * (100), and further pages only down to the occurrences 2 minutes before the
   * wait began (on the client's clock, `retry.now`: the occurrences are the
   * API's time), so its requests do not grow with the job's history; each later
   * one reads only the runs that can have changed since (pagedRunPolls). A run
   * not ended of an occurrence older than both is not waited for: wait for it
   * by its `runId`.
   */
  async waitForRun(options: WaitForRunOptions = {}): Promise<Run> {
    if (options.runId !== undefined) return this.client.waitForRun(this.id, options.runId, options);
    const until = options.until ?? FINAL_RUN_STATUSES;
    // The look-backs are set against runs' occurrences, the API's time: on the client's clock.
    const now = this.client[ANSWERS].now;
    const poll = pagedRunPolls(
      (from) =>
        this.runs({
          pageSize: WAIT_PAGE,
          ...(from === undefined ? {} : { from }),
          ...signalOf(options),
        }),
      now() - LOOK_BACK_MS,
      WAIT_PAGE,
      now,
    );
    const reached = (run: Run) => until.includes(run.status);
    const first = await poll();
    // The runs that had reached a status waited for when the wait began, and those seen before
    // they reached one (reaching it, each is news, at any occurrence).
    const reachedBefore = new Set(first.filter(reached).map((run) => run.runId));
    const notYet = new Set<string>();
    // A run the polls after the first find where it may not have read every run, first seen
    // having reached a status, may have reached it before the wait began.
    const unsure = unsureUpTo(first, WAIT_PAGE);
    const isNews = (run: Run) =>
      !reachedBefore.has(run.runId) &&
      (notYet.has(run.runId) || Date.parse(run.scheduledFor) > unsure);
    const note = (runs: readonly Run[]) => {
      for (const run of runs) if (!reached(run)) notYet.add(run.runId);
    };
    note(first);
    return pollForRun(
      `the next run of job ${this.id}`,
      async () => {
        const runs = await poll();
        const fresh = runs.filter((run) => reached(run) && isNews(run));
        note(runs);
        return { done: fresh.at(-1) ?? null, seen: null };
      },
      options,
    );
  }
}
