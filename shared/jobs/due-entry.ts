import type { Engine } from "../engine.js";
import type { DueEntry, Job } from "../model.js";
import { dueEntryKey } from "../storage/due-entries.js";

/** The due entry of the job's first attempt of the occurrence at `at`, filed as of `now`. */
export function dueEntryFor(engine: Engine, job: Job, at: Date, now: Date): DueEntry {
  return {
    key: dueEntryKey(job.jobId, at, 1, now, engine.settings.shardCount),
    kind: "occurrence",
    jobId: job.jobId,
    tenantId: job.tenantId,
    dueAt: at.toISOString(),
    scheduledFor: at.toISOString(),
    attempt: 1,
    jobVersion: job.version,
    priority: job.priority,
    schedule: job.schedule,
    misfire: job.policies.misfire,
  };
}
