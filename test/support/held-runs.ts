import { expect } from "vitest";
import type { Engine } from "../../shared/engine.js";
import type { JobContext } from "../../shared/execution/job-contract.js";
import { cancelJob, createJob, deleteJob, pauseJob } from "../../shared/jobs/index.js";
import type { Job, Run } from "../../shared/model.js";
import { recordAdmission } from "../../shared/storage/admission.js";
import { type EngineFixture, testJob } from "./engine-fixture.js";

/** A handler's wait until `release` is called: held runs end only once the case has looked. */
export function held(): { released: Promise<void>; release: () => void } {
  let release = () => {};
  const released = new Promise<void>((resolve) => {
    release = resolve;
  });
  return { released, release };
}

/** A handler that runs until `release` is called (or its signal aborts), recording each call. */
export function heldHandler() {
  const contexts: JobContext[] = [];
  const { released, release } = held();
  const handler = async (ctx: JobContext) => {
    contexts.push(ctx);
    await Promise.race([
      released,
      new Promise((resolve) => ctx.signal.addEventListener("abort", resolve, { once: true })),
    ]);
  };
  return { handler, contexts, release };
}

/** The job's one run: asserts it has exactly one. */
export async function runOf(f: EngineFixture, jobId: string): Promise<Run> {
  const runs = (await f.runs()).filter((r) => r.jobId === jobId);
  expect(runs).toHaveLength(1);
  const [run] = runs;
  if (!run) throw new Error("no run");
  return run;
}

/** A new job (testJob) whose run `run-a` its admission records as started, leased for a minute. */
export async function jobHoldingRunA(engine: Engine) {
  const { job } = await createJob(engine, testJob());
  const leaseUntil = new Date(Date.now() + 60_000);
  await recordAdmission(
    engine,
    job,
    { kind: "start", runId: "run-a", leaseUntil },
    { dropped: [] },
  );
  return { job, leaseUntil };
}

/**
 * The writes that end a job's runs under way, by name, for `it.each`: a job cancel, a delete and a
 * pause with running: "cancel", each on the engine `engine()` gives when it runs.
 */
export const runEndings = (engine: () => Engine) =>
  [
    ["a job cancel", (job: Job) => cancelJob(engine(), job.tenantId, job.jobId)],
    ["a delete", (job: Job) => deleteJob(engine(), job.tenantId, job.jobId)],
    [
      'a pause with running: "cancel"',
      (job: Job) => pauseJob(engine(), job.tenantId, job.jobId, { running: "cancel" }),
    ],
  ] as const;
