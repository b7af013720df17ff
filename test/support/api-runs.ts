import type { Run } from "../../client/index.js";

/**
 * A run of `jobId` that ended `status` at its `attempt`, as the API answers it, for a local
 * server that stands in for the API.
 */
export const endedRun = (
  jobId: string,
  attempt: number,
  status: Run["status"],
  error: string | null,
  reason: string | null,
): Run => ({
  runId: `${jobId}-20300101T000000000-${attempt}`,
  jobId,
  scheduledFor: "2030-01-01T00:00:00.000Z",
  plannedFor: "2030-01-01T00:00:00.000Z",
  dueAt: "2030-01-01T00:00:00.000Z",
  attempt,
  status,
  priority: "normal",
  enqueuedAt: "2030-01-01T00:00:00.000Z",
  startedAt: "2030-01-01T00:00:00.100Z",
  finishedAt: "2030-01-01T00:00:01.100Z",
  durationMs: 1000,
  error,
  reason,
  workerId: "w-1",
  fence: attempt,
  jobVersion: 1,
  executedVersion: 1,
  replayedBy: null,
  trigger: null,
  cancelRequestedAt: null,
  cancelledBy: null,
});
