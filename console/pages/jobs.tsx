import { useRef, useState } from "preact/hooks";
import { writeJson } from "../../client/exact-json.js";
import { api, type FieldIssue, type Job, newIdempotencyKey } from "../api.js";
import {
  announce,
  ErrorMessage,
  ErrorSummary,
  messageOf,
  StatusBadge,
  useLivePollInterval,
} from "../components.js";
import { formatInstant, jobTitle, jobTitleInline, scheduleInWords, zoneOf } from "../format.js";
import { createBody, emptyForm, issuesOf, JobFields, type JobForm } from "../job-form.js";
import { usePagedPoll } from "../paging.js";
import { Link, navigate } from "../router.js";

const STATUSES: readonly Job["status"][] = ["active", "paused", "cancelled", "completed"];

export function JobsPage({ jobTypes }: { jobTypes: readonly string[] }) {
  const [status, setStatus] = useState<Job["status"] | "">("");
  const listing = usePagedPoll({
    read: (cursor) => api.listJobs({ status, limit: 50, ...(cursor ? { cursor } : {}) }),
    idOf: (job: Job) => job.id,
    // Job ids are ULIDs: the listing's order, newest highest.
    orderOf: (job: Job) => job.id,
    intervalMs: useLivePollInterval(3000),
    filter: status,
  });
  const { first: data, error, items: jobs } = listing;
  // A refused read of an older page (a 429, the network) is shown until the next try.
  const [loadError, setLoadError] = useState<unknown>(null);

  const loadMore = async () => {
    setLoadError(null);
    try {
      await listing.loadOlder();
    } catch (caught) {
      setLoadError(caught);
      announce(messageOf(caught));
    }
  };

  return (
    <>
      <h1 tabIndex={-1}>Jobs</h1>
      <details class="create">
        <summary>Create a job</summary>
        <CreateJobForm jobTypes={jobTypes} />
      </details>
      <section aria-labelledby="jobs-title">
        <h2 id="jobs-title">Your jobs</h2>
        <label for="status-filter">Status</label>{" "}
        <select
          id="status-filter"
          value={status}
          onChange={(event) => {
            setStatus(STATUSES.find((s) => s === event.currentTarget.value) ?? "");
            setLoadError(null);
          }}
        >
          <option value="">all</option>
          {STATUSES.map((s) => (
            <option key={s} value={s}>
              {s}
            </option>
          ))}
        </select>
        <ErrorMessage error={loadError ?? error} />
        <table>
          <caption class="visually-hidden">Jobs, newest first; updated every few seconds</caption>
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Status</th>
              <th scope="col">Schedule</th>
              <th scope="col">Next run</th>
              <th scope="col">Last run</th>
            </tr>
          </thead>
          <tbody>
            {jobs.map((job) => (
              <tr key={job.id}>
                <th scope="row">
                  <Link href={`/console/jobs/${job.id}`}>
                    <bdi>{jobTitle(job)}</bdi>
                  </Link>
                  <span class="hint"> {job.type}</span>
                </th>
                <td>
                  <StatusBadge status={job.status} />
                </td>
                <td>{scheduleInWords(job.schedule)}</td>
                <td>{formatInstant(job.nextRunAt, zoneOf(job.schedule))}</td>
                <td>
                  {job.lastRun ? (
                    <>
                      <StatusBadge status={job.lastRun.status} />{" "}
                      {formatInstant(job.lastRun.finishedAt, zoneOf(job.schedule))}
                    </>
                  ) : (
                    "—"
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
        {data && jobs.length === 0 ? <p>{noJobsText(status, listing.more)}</p> : null}
        {listing.more ? (
          <button type="button" onClick={() => void loadMore()}>
            Load more jobs
          </button>
        ) : null}
      </section>
    </>
  );
}

/**
 * What an empty listing says. A page of GET /jobs reads at most 100 jobs, so a filtered page may
 * hold none with older jobs left to read: that is no proof that none matches.
 */
function noJobsText(status: Job["status"] | "", more: boolean): string {
  const which = status === "" ? "jobs" : `${status} jobs`;
  if (more) return `No ${which} among the newest read: Load more jobs reads older ones.`;
  return status === "" ? "No jobs yet." : `No ${which}.`;
}

function CreateJobForm({ jobTypes }: { jobTypes: readonly string[] }) {
  const [form, setForm] = useState<JobForm>(() =>
    emptyForm(jobTypes.includes("noop") ? "noop" : (jobTypes[0] ?? "")),
  );
  const [issues, setIssues] = useState<FieldIssue[]>([]);
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  // The key of the last create sent, with its body. The same body sent again (a press of Create
  // after an error: an answer lost on the way back, a 502 or 504 of a create that was applied)
  // is the same create, answered with the job it made; a changed body is a create of its own.
  const lastSent = useRef<{ readonly body: string; readonly key: string } | null>(null);

  const submit = async (event: Event) => {
    event.preventDefault();
    setBusy(true);
    try {
      const body = createBody(form);
      const text = writeJson(body);
      if (lastSent.current?.body !== text)
        lastSent.current = { body: text, key: newIdempotencyKey("console-create") };
      const job = await api.createJob(body, lastSent.current.key);
      // Answered: the next press, of this body too, is a create of its own.
      lastSent.current = null;
      announce(`Job ${jobTitleInline(job)} created`);
      navigate(`/console/jobs/${job.id}`);
    } catch (caught) {
      const found = issuesOf(caught);
      setIssues(found);
      setError(found.length > 0 ? null : caught);
    } finally {
      setBusy(false);
    }
  };

  return (
    <form onSubmit={(event) => void submit(event)} aria-label="Create a job" noValidate>
      <ErrorSummary issues={issues} title="The job was not created" />
      <ErrorMessage error={error} />
      <JobFields form={form} onChange={setForm} issues={issues} jobTypes={jobTypes} />
      <button type="submit" disabled={busy}>
        Create job
      </button>
    </form>
  );
}
