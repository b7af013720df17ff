import {
  isSchedulerApiError,
  SchedulerClient,
  VersionConflictError,
} from "serverless-scheduler/client";

/**
 * The typed client's tour in docs/cli.md ("The client"), which test/api/doc-examples.test.ts
 * holds to this file: against the sandbox (`npm start`), `npx tsx examples/client-tour.ts`;
 * test/unit/client-examples.test.ts holds it to SCHEDULER_API_URL and SCHEDULER_API_KEY.
 */
// SCHEDULER_API_URL and SCHEDULER_API_KEY point it elsewhere (a sandbox's --port, a stage)
const client = new SchedulerClient({
  baseUrl: process.env.SCHEDULER_API_URL ?? "http://127.0.0.1:3000",
  auth: { kind: "bearer", key: process.env.SCHEDULER_API_KEY ?? "local-dev-key" },
});

// create returns a handle: the job as last seen, and what can be done to it
const job = await client.jobs.create(
  {
    name: "weekday report",
    type: "noop",
    schedule: { cron: "30 9 * * 1-5", timezone: "Europe/Berlin" },
  },
  { idempotencyKey: "weekday-report" }, // a repeat returns the same job (job.created === false)
);
await job.pause();
await job.resume();
const run = await job.trigger(); // the queued run
await job.waitForRun({ runId: run.runId, timeoutMs: 30_000 }); // polls until a final status
const extra = await job.trigger();
try {
  await job.cancelRun(extra.runId); // queued: cancelled now; running: cancelled within a heartbeat
} catch (error) {
  if (!isSchedulerApiError(error, "illegal_transition")) throw error; // it ended first
}
await job.pause({ running: "cancel" }); // runs in progress are cancelled too (default "finish")

try {
  await job.edit({ name: "renamed" }); // If-Match: the version the handle last saw
} catch (error) {
  if (error instanceof VersionConflictError) {
    // 412: someone changed it since. error.currentVersion is the version now.
    await job.get();
    await job.edit({ name: "renamed" });
  } else throw error;
}

for await (const r of job.runs({ pageSize: 100 })) console.log(r.status); // every page
// Replays every dead letter. One whose job was cancelled or deleted is refused (409) and stays
// listed until it expires: it must not stop the others.
for await (const dead of client.deadLetters.list()) {
  try {
    await client.deadLetters.replay(dead.runId);
  } catch (error) {
    const refused =
      isSchedulerApiError(error, "not_replayable") ||
      isSchedulerApiError(error, "illegal_transition");
    if (!refused) throw error;
  }
}

try {
  await client.schedules.preview({ cron: "0 9 * * *", timezone: "CET" });
} catch (error) {
  if (isSchedulerApiError(error, "validation_failed")) console.log(error.field, error.issues);
}
