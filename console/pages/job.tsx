import { useEffect, useRef, useState } from "preact/hooks";
import { writeJson } from "../../client/exact-json.js";
import { runWhy } from "../../client/run-why.js";
import {
  ApiProblem,
  api,
  type EditJob,
  type FieldIssue,
  type Job,
  newIdempotencyKey,
  type Run,
} from "../api.js";
import {
  announce,
  ErrorMessage,
  ErrorSummary,
  messageOf,
  StatusBadge,
  useLivePollInterval,
  usePoll,
} from "../components.js";
import {
  formatDuration,
  formatInstant,
  formatOccurrence,
  jobTitle,
  jobTitleInline,
  listOf,
  scheduleInWords,
  zoneOf,
} from "../format.js";
import { isolable } from "../isolable.js";
import {
  changesBetween,
  changesOnto,
  formFromJob,
  issuesOf,
  JobFields,
  type JobForm,
} from "../job-form.js";
import { usePagedPoll } from "../paging.js";
import { Link } from "../router.js";
import { afterInWords } from "../schedule-form.js";
import { unclearTrigger } from "../unclear-trigger.js";

const RUN_STATUSES = ["queued", "running", "succeeded", "failed", "dead", "skipped", "cancelled"];

export function JobPage({ id }: { id: string }) {
  const job = usePoll(() => api.getJob(id), useLivePollInterval(2000), [id]);
  const [actionError, setActionError] = useState<unknown>(null);
  // An action under way: the action buttons wait for its answer, so a double click on "Trigger
  // now" queues one run, not two (a trigger's repeat queues another). Marked aria-disabled, not
  // disabled, which would take the keyboard's focus off the button pressed.
  const [acting, setActing] = useState(false);
  const actingNow = useRef(false);
  // Whether a trigger of this job had an unclear outcome (console/unclear-trigger.ts): its key is
  // kept across pages, and "Trigger now" repeats it. Forgotten once a trigger is answered, or
  // refused (a 4xx queues nothing).
  const [triggerUnclear, setTriggerUnclear] = useState(() => unclearTrigger(id).key() !== null);
  // Left for another page: an action's answer that comes after shows nothing there.
  const stillShown = useRef(true);
  useEffect(
    () => () => {
      stillShown.current = false;
    },
    [],
  );
  const current = job.data;

  if (job.error instanceof ApiProblem && job.error.status === 404) {
    return (
      <>
        <h1 tabIndex={-1}>Job not found</h1>
        <p>
          No job <code>{isolable(id)}</code> for you. <Link href="/console">All jobs</Link>
        </p>
      </>
    );
  }
  if (current === null) {
    return (
      <>
        <h1 tabIndex={-1}>Job</h1>
        <ErrorMessage error={job.error} />
        <p>Loading…</p>
      </>
    );
  }

  const act = async (label: string, action: () => Promise<unknown>) => {
    // Set at once, not at the next render, which a second click may come before.
    if (actingNow.current) return;
    actingNow.current = true;
    setActing(true);
    setActionError(null);
    try {
      await action();
      // Left for another page: announced with the job's name, to be told apart from that page's.
      if (!stillShown.current) {
        announce(`${label}: ${jobTitleInline(current)}`);
        return;
      }
      announce(label);
      await job.reload();
    } catch (caught) {
      if (stillShown.current) setActionError(caught);
      else announce(`${jobTitleInline(current)}: ${messageOf(caught)}`);
    } finally {
      actingNow.current = false;
      if (stillShown.current) setActing(false);
    }
  };
  const trigger = async () => {
    const unclear = unclearTrigger(id);
    const key = unclear.key() ?? newIdempotencyKey("console-trigger");
    unclear.keep(key);
    try {
      await api.trigger(id, key);
      unclear.forget();
    } catch (caught) {
      if (caught instanceof ApiProblem && caught.status < 500) unclear.forget();
      throw caught;
    } finally {
      if (stillShown.current) setTriggerUnclear(unclear.key() !== null);
    }
  };
  const zone = zoneOf(current.schedule);
  const ended = current.status === "cancelled" || current.status === "completed";

  return (
    <>
      <h1 tabIndex={-1}>
        <bdi>{jobTitle(current)}</bdi> <StatusBadge status={current.status} />
      </h1>
      <p class="hint">
        {current.type} job <code>{isolable(current.id)}</code>, version {current.version}
      </p>
      <fieldset class="actions">
        <legend class="visually-hidden">Job actions</legend>
        {current.status === "active" ? (
          <button
            type="button"
            aria-disabled={acting}
            onClick={() => void act("Job paused", () => api.changeStatus(id, "pause"))}
          >
            Pause
          </button>
        ) : null}
        {current.status === "paused" ? (
          <button
            type="button"
            aria-disabled={acting}
            onClick={() => void act("Job resumed", () => api.changeStatus(id, "resume"))}
          >
            Resume
          </button>
        ) : null}
        {!ended ? (
          <button
            type="button"
            aria-disabled={acting}
            onClick={() => void act("Run queued", trigger)}
          >
            Trigger now
          </button>
        ) : null}
        {!ended ? (
          <button
            type="button"
            class="danger"
            aria-disabled={acting}
            onClick={() => {
              if (
                confirm(`Cancel ${jobTitleInline(current)} for good? Queued runs are cancelled.`)
              ) {
                void act("Job cancelled", () => api.changeStatus(id, "cancel"));
              }
            }}
          >
            Cancel job
          </button>
        ) : null}
      </fieldset>
      {triggerUnclear && !acting ? (
        <p class="notice">
          A trigger of this job got no clear answer: it may have queued a run. "Trigger now" sends
          it again with the same Idempotency-Key, answered with that run if it did.
        </p>
      ) : null}
      <ErrorMessage error={actionError} />

      <div class="columns">
        <section aria-labelledby="schedule-title">
          <h2 id="schedule-title">Schedule</h2>
          <dl>
            <dt>Schedule</dt>
            <dd>{scheduleInWords(current.schedule)}</dd>
            <dt>Next run</dt>
            <dd>{formatInstant(current.nextRunAt, zone)}</dd>
            <dt>Last run</dt>
            <dd>
              {current.lastRun ? (
                <>
                  <StatusBadge status={current.lastRun.status} />{" "}
                  {formatInstant(current.lastRun.finishedAt, zone)}
                </>
              ) : (
                "none yet"
              )}
            </dd>
          </dl>
          {ended ? <p>No more runs: the job is {current.status}.</p> : <NextRuns job={current} />}
        </section>
        <Policies job={current} />
      </div>
      {ended ? null : <EditSection job={current} onSaved={() => void job.reload()} />}
      <RunsTimeline id={id} zone={zone} />
    </>
  );
}

function NextRuns({ job: { id, version, schedule } }: { job: Job }) {
  const { data, error } = usePoll(() => api.previewJob(id, 10), 60_000, [id, version]);
  const none = "after" in schedule ? afterInWords(schedule.after) : "No more occurrences.";
  return (
    <section aria-labelledby="next-runs-title">
      <h3 id="next-runs-title">Next runs</h3>
      <ErrorMessage error={error} />
      {data && data.occurrences.length === 0 ? <p>{none}</p> : null}
      <ol class="next-runs">
        {data?.occurrences.map((o) => (
          <li key={o.utc}>
            <time dateTime={o.utc}>{formatOccurrence(o, data.timezone)}</time>
          </li>
        ))}
      </ol>
    </section>
  );
}

function Policies({ job }: { job: Job }) {
  const p = job.policies;
  return (
    <section aria-labelledby="policies-title">
      <h2 id="policies-title">Policies</h2>
      <dl>
        <dt>Retries</dt>
        <dd>
          {p.retry.maxAttempts} attempts in all, backoff from {p.retry.initialDelaySeconds} s up to{" "}
          {p.retry.maxDelaySeconds} s
        </dd>
        <dt>Missed occurrences</dt>
        <dd>{p.misfirePolicy}</dd>
        <dt>While a run is still running</dt>
        <dd>
          {p.overlapPolicy}
          {p.overlapPolicy === "allow" ? ` (up to ${p.maxConcurrent} at once)` : ""}
        </dd>
        <dt>Queued runs after a schedule change</dt>
        <dd>{p.inFlight}</dd>
        <dt>Priority</dt>
        <dd>{job.priority}</dd>
        <dt>Timeout</dt>
        <dd>{job.timeoutSeconds} s</dd>
        {job.target ? (
          <>
            <dt>Webhook</dt>
            <dd>
              <code>{isolable(job.target.url)}</code>
            </dd>
          </>
        ) : null}
      </dl>
    </section>
  );
}

interface Conflict {
  /** The job as it is now, changed by someone else since the form was opened. */
  readonly theirs: Job;
  readonly theirChanges: EditJob;
  readonly mine: EditJob;
}

const partLabel = (part: string) => part.replace(/([A-Z])/g, " $1").toLowerCase();
const show = (value: unknown) => (typeof value === "string" ? value : writeJson(value));

/**
 * A change as the conflict shows it. A target's header values are often the receiver's
 * credentials, which the console shows nowhere else: here each is "…", its name kept.
 */
function shownChange(part: string, value: unknown): string {
  if (part !== "target" || typeof value !== "object" || value === null || !("headers" in value))
    return show(value);
  const headers = value.headers as Readonly<Record<string, string>> | undefined;
  return show({
    ...value,
    headers: Object.fromEntries(Object.keys(headers ?? {}).map((name) => [name, "…"])),
  });
}

/**
 * Edit at the version the form was opened on (If-Match). A 412 means the job
 * changed meanwhile: the console shows what changed on each side and lets the
 * user apply their changes to the new version or drop them.
 */
function EditSection({ job, onSaved }: { job: Job; onSaved: () => void }) {
  const [base, setBase] = useState<{ job: Job; form: JobForm } | null>(null);
  const [form, setForm] = useState<JobForm | null>(null);
  const [issues, setIssues] = useState<FieldIssue[]>([]);
  const [error, setError] = useState<unknown>(null);
  const [conflict, setConflict] = useState<Conflict | null>(null);
  const [busy, setBusy] = useState(false);

  const open = (from: Job) => {
    const opened = formFromJob(from);
    setBase({ job: from, form: opened });
    setForm(opened);
    setIssues([]);
    setError(null);
    setConflict(null);
  };
  const close = () => {
    setBase(null);
    setForm(null);
    setConflict(null);
  };

  const save = async (version: number, changes: EditJob) => {
    setBusy(true);
    setIssues([]);
    setError(null);
    try {
      await api.editJob(job.id, version, changes);
      announce("Changes saved");
      close();
      onSaved();
    } catch (caught) {
      if (caught instanceof ApiProblem && caught.status === 412 && base && form) {
        const theirs = await api.getJob(job.id);
        setConflict({
          theirs,
          theirChanges: changesBetween(base.form, formFromJob(theirs)),
          mine: changesOnto(changes, theirs),
        });
      } else {
        const found = issuesOf(caught);
        setIssues(found);
        setError(found.length > 0 ? null : caught);
      }
    } finally {
      setBusy(false);
    }
  };

  if (base === null || form === null) {
    return (
      <section aria-labelledby="edit-title">
        <h2 id="edit-title">Edit</h2>
        <button type="button" onClick={() => open(job)}>
          Edit job
        </button>
      </section>
    );
  }

  const submit = (event: Event) => {
    event.preventDefault();
    let changes: EditJob;
    try {
      changes = changesBetween(base.form, form);
    } catch (caught) {
      setIssues(issuesOf(caught));
      return;
    }
    if (Object.keys(changes).length === 0) {
      setError(new Error("Nothing to save: the form is as the job was."));
      return;
    }
    void save(base.job.version, changes);
  };

  return (
    <section aria-labelledby="edit-title">
      <h2 id="edit-title">Edit (from version {base.job.version})</h2>
      {conflict ? (
        <div class="conflict" role="alert" aria-labelledby="conflict-title">
          <h3 id="conflict-title">This job changed while you were editing it</h3>
          <p>
            You opened it at version {base.job.version}; it is now at version{" "}
            {conflict.theirs.version}, so your changes were not saved (the API answered 412: the
            If-Match version is stale).
          </p>
          <ChangeList title="Changed meanwhile by someone else" changes={conflict.theirChanges} />
          <ChangeList title="Your changes" changes={conflict.mine} />
          {Object.keys(conflict.mine).some((part) => part in conflict.theirChanges) ? (
            <p>
              Both of you changed{" "}
              {Object.keys(conflict.mine)
                .filter((part) => part in conflict.theirChanges)
                .map(partLabel)
                .join(", ")}
              : applying yours replaces theirs.
            </p>
          ) : null}
          <div class="actions">
            <button
              type="button"
              disabled={busy}
              onClick={() => {
                setBase({ job: conflict.theirs, form: formFromJob(conflict.theirs) });
                void save(conflict.theirs.version, conflict.mine);
              }}
            >
              Apply my changes to version {conflict.theirs.version}
            </button>
            <button type="button" onClick={() => open(conflict.theirs)}>
              Discard my changes and edit version {conflict.theirs.version}
            </button>
          </div>
        </div>
      ) : null}
      <form onSubmit={submit} aria-label="Edit job" noValidate>
        <ErrorSummary issues={issues} title="The changes were not saved" />
        <ErrorMessage error={error} />
        <JobFields form={form} onChange={setForm} issues={issues} />
        <div class="actions">
          <button type="submit" disabled={busy}>
            Save changes
          </button>
          <button type="button" onClick={close}>
            Close without saving
          </button>
        </div>
      </form>
    </section>
  );
}

function ChangeList({ title, changes }: { title: string; changes: EditJob }) {
  const entries = Object.entries(changes);
  return (
    <>
      <h4>{title}</h4>
      {entries.length === 0 ? (
        <p>nothing the form shows (another setting or a lifecycle change)</p>
      ) : (
        <ul>
          {entries.map(([part, value]) => (
            <li key={part}>
              {partLabel(part)}: <code>{isolable(shownChange(part, value))}</code>
            </li>
          ))}
        </ul>
      )}
    </>
  );
}

/**
 * The job's runs, newest occurrence first, refreshed every two seconds;
 * filtered by status on the server, so a job's queued future runs do not push
 * its finished ones off the page.
 */
function RunsTimeline({ id, zone }: { id: string; zone: string }) {
  const [hidden, setHidden] = useState<ReadonlySet<string>>(new Set());
  const shownStatuses = RUN_STATUSES.filter((status) => !hidden.has(status));
  const status = hidden.size === 0 ? undefined : shownStatuses.join(",");
  // Older pages belong to the job and the filter they were read under.
  const listing = usePagedPoll({
    read: (cursor) =>
      shownStatuses.length === 0
        ? Promise.resolve({ items: [], nextCursor: null })
        : api.listRuns(id, {
            limit: 50,
            ...(cursor ? { cursor } : {}),
            ...(status ? { status } : {}),
          }),
    idOf: (run: Run) => run.runId,
    // The listing's order, newest highest: the occurrence, then the attempt.
    orderOf: (run: Run) => `${run.scheduledFor}#${String(run.attempt).padStart(4, "0")}`,
    intervalMs: useLivePollInterval(2000),
    filter: JSON.stringify([id, status ?? null]),
  });
  const { first: data, error, items: runs } = listing;
  const shown = runs.filter((run) => !hidden.has(run.status));
  const loadOlder = async () => {
    try {
      await listing.loadOlder();
    } catch (caught) {
      announce(messageOf(caught));
    }
  };
  const cancelRun = async (run: Run) => {
    try {
      const asked = await api.cancelRun(id, run.runId);
      announce(
        asked.status === "cancelled"
          ? "Run cancelled"
          : "Cancel requested: the run stops at its next heartbeat",
      );
    } catch (caught) {
      announce(messageOf(caught));
    }
  };
  return (
    <section aria-labelledby="runs-title">
      <h2 id="runs-title">Runs</h2>
      <fieldset class="filters">
        <legend>Show runs that are</legend>
        {RUN_STATUSES.map((status) => (
          <label key={status} class="inline">
            <input
              type="checkbox"
              checked={!hidden.has(status)}
              onChange={(event) => {
                const next = new Set(hidden);
                if (event.currentTarget.checked) next.delete(status);
                else next.add(status);
                setHidden(next);
              }}
            />{" "}
            {status}
          </label>
        ))}
      </fieldset>
      <ErrorMessage error={error} />
      <table>
        <caption class="visually-hidden">
          Runs, newest occurrence first; updated every two seconds
        </caption>
        <thead>
          <tr>
            <th scope="col">Occurrence</th>
            <th scope="col">Attempt</th>
            <th scope="col">Status</th>
            <th scope="col">Started</th>
            <th scope="col">Took</th>
            <th scope="col">Detail</th>
            <th scope="col">
              <span class="visually-hidden">Actions</span>
            </th>
          </tr>
        </thead>
        <tbody>
          {shown.map((run) => (
            <tr key={run.runId} data-run-id={run.runId}>
              <th scope="row">
                {formatInstant(run.scheduledFor, zone)}
                {run.plannedFor !== run.scheduledFor ? (
                  <small> (planned {formatInstant(run.plannedFor, zone)})</small>
                ) : null}
              </th>
              <td>{run.attempt}</td>
              <td>
                <StatusBadge status={run.status} />
              </td>
              <td>{formatInstant(run.startedAt, zone)}</td>
              <td>{formatDuration(run.durationMs)}</td>
              <td class="free-text">{runWhy(run) ?? ""}</td>
              <td>
                {run.status === "queued" || run.status === "running" ? (
                  run.cancelRequestedAt ? (
                    "cancelling…"
                  ) : (
                    <button type="button" onClick={() => void cancelRun(run)}>
                      Cancel
                    </button>
                  )
                ) : null}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      {data && shown.length === 0 ? (
        <p>{noRunsText(status === undefined ? null : shownStatuses, listing.more)}</p>
      ) : null}
      {listing.more ? (
        <button type="button" onClick={() => void loadOlder()}>
          Load older runs
        </button>
      ) : null}
    </section>
  );
}

/**
 * What an empty timeline says; `statuses` are the filter's, null unfiltered. A filtered page of
 * GET /jobs/{id}/runs gives up after ten reads, so it may hold none with older runs left to read:
 * that is no proof that none matches.
 */
function noRunsText(statuses: readonly string[] | null, more: boolean): string {
  if (statuses?.length === 0) return "No runs with these statuses.";
  const which = statuses === null ? "runs" : `${listOf(statuses)} runs`;
  if (more) return `No ${which} among the newest read: Load older runs reads older ones.`;
  return statuses === null ? "No runs yet." : `No ${which}.`;
}
