import { createJob } from "../../shared/jobs/index.js";
import { type EngineFixture, testJob } from "./engine-fixture.js";

/** A one-off due now of a type whose handler counts its calls, and a worker that runs it. */
export async function countedOneOffDueNow(f: EngineFixture) {
  const calls = { count: 0 };
  const worker = f.workerDeps("worker", {
    counted: async () => {
      calls.count++;
    },
  });
  const { job } = await createJob(
    f.engine,
    testJob({ type: "counted", schedule: { runAt: new Date().toISOString() }, timeoutSeconds: 30 }),
  );
  return { job, worker, calls };
}
