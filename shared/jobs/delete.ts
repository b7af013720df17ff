import type { Engine } from "../engine.js";
import { deleteEndedJob } from "../storage/job-delete.js";
import { endJob } from "./cancel.js";

/**
 * Deletes a job: cancels it as `cancelJob` does (its due entry goes, its
 * queued runs end CANCELLED; a COMPLETED job stays completed), then removes
 * its item, so it is no longer read, listed, edited or triggered. Its runs
 * stay until their TTL and are still read through the run history, which
 * takes the tenant from the runs themselves. The cancel comes first: a delete
 * that dies in between leaves a cancelled job, and a repeat finishes it. Runs
 * that are RUNNING at the time finish without touching the job (their job
 * writes are conditioned on its item existing), and a worker that later
 * receives one of the job's runs ends it CANCELLED.
 */
export async function deleteJob(engine: Engine, tenantId: string, jobId: string): Promise<void> {
  const ended = await endJob(engine, tenantId, jobId, "delete");
  await deleteEndedJob(engine, ended);
}
