import { useState } from "preact/hooks";
import { api, type Run } from "../api.js";
import { announce, ErrorMessage, messageOf, usePoll } from "../components.js";
import { formatInstant } from "../format.js";
import { Link } from "../router.js";

const PAGE_SIZE = 50;

export function DeadLettersPage() {
  const { data, error, reload } = usePoll(
    () => api.listDeadLetters({ limit: PAGE_SIZE }),
    3000,
    [],
  );
  // The first page is polled; older pages are read on demand and kept until replayed. The first
  // read of them keeps the first page as it was (newer dead letters push runs off the polled one,
  // which would fall between it and the older pages), and each page's cursor, null past the last.
  const [older, setOlder] = useState<{ items: Run[]; cursor: string | null; read: boolean }>({
    items: [],
    cursor: null,
    read: false,
  });
  const [replayed, setReplayed] = useState<Run | null>(null);
  const [replayError, setReplayError] = useState<unknown>(null);
  const firstIds = new Set(data?.items.map((run) => run.runId));
  const runs = [...(data?.items ?? []), ...older.items.filter((run) => !firstIds.has(run.runId))];
  const cursor = older.read ? older.cursor : (data?.nextCursor ?? null);

  const loadMore = async () => {
    if (cursor === null) return;
    setReplayError(null);
    try {
      const kept = older.read ? older.items : (data?.items ?? []);
      const page = await api.listDeadLetters({ limit: PAGE_SIZE, cursor });
      setOlder({ items: [...kept, ...page.items], cursor: page.nextCursor, read: true });
    } catch (caught) {
      setReplayError(caught);
    }
  };

  const replay = async (run: Run) => {
    setReplayError(null);
    try {
      const next = await api.replay(run.runId);
      setOlder((kept) => ({ ...kept, items: kept.items.filter((r) => r.runId !== run.runId) }));
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
            <th scope="col">Error</th>
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
              <td class="free-text">{run.error ?? run.reason ?? ""}</td>
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
      {cursor !== null ? (
        <button type="button" onClick={() => void loadMore()}>
          Load more dead letters
        </button>
      ) : null}
    </>
  );
}
