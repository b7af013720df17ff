import { useState } from "preact/hooks";
import { runWhy } from "../../client/run-why.js";
import { api, type Run } from "../api.js";
import { announce, ErrorMessage, messageOf, useLivePollInterval } from "../components.js";
import { formatInstant } from "../format.js";
import { usePagedPoll } from "../paging.js";
import { Link } from "../router.js";

const PAGE_SIZE = 50;

export function DeadLettersPage() {
  // Older pages are kept until their dead letters are replayed.
  const listing = usePagedPoll({
    read: (cursor) => api.listDeadLetters({ limit: PAGE_SIZE, ...(cursor ? { cursor } : {}) }),
    idOf: (run: Run) => run.runId,
    // The listing's order, newest highest: when the run died, then its id.
    orderOf: (run: Run) => `${run.finishedAt ?? ""}#${run.runId}`,
    intervalMs: useLivePollInterval(3000),
    filter: "",
  });
  const { first: data, error, reload, items: runs } = listing;
  const [replayed, setReplayed] = useState<Run | null>(null);
  const [replayError, setReplayError] = useState<unknown>(null);

  const loadMore = async () => {
    setReplayError(null);
    try {
      await listing.loadOlder();
    } catch (caught) {
      setReplayError(caught);
    }
  };

  const replay = async (run: Run) => {
    setReplayError(null);
    try {
      const next = await api.replay(run.runId);
      listing.drop(run.runId);
      setReplayed(next);
      announce(`Replayed: attempt ${next.attempt} of the occurrence is queued`);
      await reload();
    } catch (caught) {
      setReplayError(caught);
      announce(messageOf(caught));
    }
  };

  return (
    <>
      <h1 tabIndex={-1}>Dead letters</h1>
      <p>
        Runs that failed for good and are not replayed yet, newest first. A replay runs the
        occurrence again as its next attempt.
      </p>
      {replayed ? (
        <p class="notice">
          Replayed: attempt {replayed.attempt} is {replayed.status}.{" "}
          <Link href={`/console/jobs/${replayed.jobId}`}>Follow it on its job</Link>
        </p>
      ) : null}
      <ErrorMessage error={replayError ?? error} />
      <table>
        <caption class="visually-hidden">Dead letters; updated every few seconds</caption>
        <thead>
          <tr>
            <th scope="col">Job</th>
            <th scope="col">Occurrence</th>
            <th scope="col">Attempt</th>
            <th scope="col">Died</th>
            <th scope="col">Reason</th>
            <th scope="col">
              <span class="visually-hidden">Action</span>
            </th>
          </tr>
        </thead>
        <tbody>
          {runs.map((run) => (
            <tr key={run.runId} data-run-id={run.runId}>
              <th scope="row">
                <Link href={`/console/jobs/${run.jobId}`}>{run.jobId}</Link>
              </th>
              <td>{formatInstant(run.scheduledFor, "UTC")}</td>
              <td>{run.attempt}</td>
              <td>{formatInstant(run.finishedAt, "UTC")}</td>
              <td class="free-text">{runWhy(run) ?? ""}</td>
              <td>
                <button
                  type="button"
                  aria-label={`Replay the run of ${run.jobId} at ${run.scheduledFor}`}
                  onClick={() => void replay(run)}
                >
                  Replay
                </button>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      {data && runs.length === 0 ? <p>No dead letters.</p> : null}
      {listing.more ? (
        <button type="button" onClick={() => void loadMore()}>
          Load more dead letters
        </button>
      ) : null}
    </>
  );
}
