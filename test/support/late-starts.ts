import { afterAll, beforeAll } from "vitest";
import { offsetClock } from "../../shared/clock.js";
import type { JobContext, JobHandler } from "../../shared/execution/job-contract.js";
import { processRun } from "../../shared/execution/worker.js";
import type { Run } from "../../shared/model.js";
import { createEngineFixture, deliveryOfRun, type EngineFixture } from "./engine-fixture.js";

/**
 * A fixture for a describe whose runs start late: a worker on the engine's clock set to a chosen
 * instant, with a `recorded` job type that records the runs its handler ran.
 */
export function useLateStarts() {
  let fixture: EngineFixture | undefined;
  const ran: string[] = [];
  const handlers: Record<string, JobHandler> = {
    recorded: async (ctx: JobContext) => void ran.push(ctx.runId),
  };
  beforeAll(async () => {
    fixture = await createEngineFixture();
  });
  afterAll(() => fixture?.destroy());
  const f = (): EngineFixture => {
    if (!fixture) throw new Error("no fixture outside a test");
    return fixture;
  };

  /** Delivers `run` once to a worker whose clock reads `atMs`. */
  async function deliverAt(run: Run, atMs: number): Promise<void> {
    const { engine } = f();
    await processRun(
      {
        ...f().workerDeps("w", handlers),
        engine: { ...engine, clock: offsetClock(atMs - Date.now()) },
      },
      deliveryOfRun(engine, run),
    );
  }

  return {
    fixture: f,
    /** The runs whose handler ran since the last `forget`, by id. */
    ran: () => [...ran],
    forget: () => void ran.splice(0),
    deliverAt,
  };
}
