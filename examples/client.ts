import { isSchedulerApiError, SchedulerClient } from "serverless-scheduler/client";

/**
 * The typed client in a few lines, against the sandbox (`npm start`):
 * `npx tsx examples/client.ts`. SCHEDULER_API_URL and SCHEDULER_API_KEY
 * point it elsewhere.
 */
const client = new SchedulerClient({
  baseUrl: process.env.SCHEDULER_API_URL ?? "http://127.0.0.1:3000",
  auth: { kind: "bearer", key: process.env.SCHEDULER_API_KEY ?? "local-dev-key" },
});

const job = await client.jobs.create({
  name: "hello from the client",
  type: "noop",
  schedule: { runAt: new Date(Date.now() + 2000).toISOString() },
});
const run = await job.waitForRun({ timeoutMs: 30_000 });
console.log(`job ${job.id}: run ${run.runId} ${run.status} after ${run.durationMs} ms`);

try {
  await job.edit({ name: "renamed" }, { version: 99 });
} catch (error) {
  if (
    !isSchedulerApiError(error, "version_mismatch") &&
    !isSchedulerApiError(error, "illegal_transition")
  )
    throw error;
  console.log(`edit refused as expected: ${error.code}: ${error.message}`);
}
