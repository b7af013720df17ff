import type { Engine } from "../engine.js";
import type { FenceLostError } from "../errors.js";
import { METRICS, type RunLogKeys, runLogKeys } from "../observability.js";

/**
 * Tells why a worker's write of the run it ran was refused: another start took the run over (a
 * lost fence, counted), or a cancel ended it. A cancel ends a run whose start is still unwritten
 * (QUEUED to everyone else) at once, so its worker lost nothing to another, and an operator
 * counting lost fences must not see it.
 */
export function reportLostRun(engine: Engine, run: RunLogKeys, error: FenceLostError): void {
  const { found } = error.context;
  if (found?.status === "CANCELLED") {
    engine.obs.log.info("the run was cancelled while it ran; this worker writes nothing more", {
      ...runLogKeys(run),
    });
    return;
  }
  engine.obs.metrics.add(METRICS.fenceLost, 1, "Count", { component: "worker" });
  engine.obs.log.warn("another worker took the run over; this one writes nothing more", {
    ...runLogKeys(run),
    found,
  });
}
