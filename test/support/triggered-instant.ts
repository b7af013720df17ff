import { expect } from "vitest";
import type { Engine } from "../../shared/engine.js";
import { createJob, editJob } from "../../shared/jobs/index.js";
import type { Job, Run } from "../../shared/model.js";
import { type FieldIssue, ValidationError } from "../../shared/validation.js";
import { testJob } from "./engine-fixture.js";

/**
 * The edit that gives `job` (at its version) `run`'s time as its `runAt`, expected refused with a
 * single issue naming `schedule.runAt`: that issue.
 */
export async function refusedEditOnto(engine: Engine, job: Job, run: Run): Promise<FieldIssue> {
  const refused = await editJob(engine, job.tenantId, job.jobId, job.version, {
    schedule: { runAt: run.scheduledFor },
  }).catch((error: unknown) => error);
  expect(refused).toBeInstanceOf(ValidationError);
  const [issue, ...more] = (refused as ValidationError).issues;
  expect(more).toEqual([]);
  if (issue === undefined) throw new Error("a ValidationError without an issue");
  expect(issue.field).toBe("schedule.runAt");
  return issue;
}

/** A one-off due now (its run not yet claimed) and a job that runs after its success. */
export async function upstreamWithDependent(
  engine: Engine,
): Promise<{ readonly upstream: Job; readonly dependent: Job }> {
  const { job: upstream } = await createJob(
    engine,
    testJob({ schedule: { runAt: new Date().toISOString() } }),
  );
  const { job: dependent } = await createJob(
    engine,
    testJob({ schedule: { after: { jobs: [upstream.jobId], on: "success" } } }),
  );
  return { upstream, dependent };
}
