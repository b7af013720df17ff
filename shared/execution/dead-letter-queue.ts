import type { Engine } from "../engine.js";
import type { RunMessage } from "../model.js";
import { METRICS } from "../observability.js";
import { releaseBufferSlot } from "../storage/admission.js";
import { endUnownedRun } from "./run-endings.js";

/**
 * A message lands in the SQS redrive DLQ when workers received it
 * maxReceiveCount times without ever acknowledging it: the run crashed its
 * worker each time. Its run is marked DEAD so it is listed for replay.
 */
export async function handleCrashedRun(
  engine: Engine,
  message: RunMessage,
  receiveCount: number | null,
): Promise<void> {
  const times = receiveCount ? ` after ${receiveCount} deliveries` : "";
  const run = await endUnownedRun(
    engine,
    message,
    "DEAD",
    `worker crashed: the run never recorded a result${times}`,
    engine.clock(),
  );
  if (run) {
    // A buffer_one job's waiting run may be the one that died; the next overlap may wait again.
    await releaseBufferSlot(engine, run.jobId, run.runId);
    engine.obs.metrics.add(METRICS.runOutcome, 1, "Count", { status: "DEAD" });
    engine.obs.log.error("run dead-lettered by the redrive DLQ", { runId: run.runId });
  }
}
