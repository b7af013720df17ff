import { createJob, type NewJob } from "../../shared/jobs/index.js";
import { type EngineFixture, testJob } from "./engine-fixture.js";

/** A job on `schedule` of a type whose handler counts its calls, and a worker that runs it. */
export async function countedJob(f: EngineFixture, schedule: NewJob["schedule"]) {
  const calls = { count: 0 };
  const worker = f.workerDeps("worker", {
    counted: async () => {
      calls.count++;
    },
  });
  const { job } = await createJob(
    f.engine,
    testJob({ type: "counted", schedule, timeoutSeconds: 30 }),
  );
  return { job, worker, calls };
}

/** A one-off due now of a type whose handler counts its calls, and a worker that runs it. */
export const countedOneOffDueNow = (f: EngineFixture) =>
  countedJob(f, { runAt: new Date().toISOString() });
