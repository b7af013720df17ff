import type { Context, SQSBatchResponse, SQSEvent } from "aws-lambda";
import { asyncCallbacksFrom } from "../../shared/execution/async-callbacks.js";
import { builtInJobTypes } from "../../shared/execution/built-in-handlers.js";
import { processRecords } from "../../shared/execution/event-source.js";
import { handlerRegistry } from "../../shared/execution/job-contract.js";
import { allowPrivateTargetsFrom } from "../../shared/execution/private-targets.js";
import { engineFromEnv, powertoolsObservability } from "../../shared/runtime.js";
import { cachedSigningSecrets } from "../../shared/webhooks/secrets.js";
import { customJobTypes } from "./handlers/index.js";

const obs = powertoolsObservability("scheduler-worker");
const engine = engineFromEnv(obs);
const handlers = handlerRegistry([
  ...builtInJobTypes(
    {
      signingSecrets: cachedSigningSecrets(engine),
      allowPrivateTargets: allowPrivateTargetsFrom(process.env, false),
      ...asyncCallbacksFrom(process.env, engine.settings),
    },
    engine.clock,
  ),
  ...customJobTypes,
]);

/** SQS event source with ReportBatchItemFailures: only the records that failed come back. */
export async function handler(event: SQSEvent, context: Context): Promise<SQSBatchResponse> {
  const deps = {
    engine,
    handlers,
    workerId: `lambda:${context.awsRequestId}`,
    remainingMs: () => context.getRemainingTimeInMillis(),
  };
  try {
    return await processRecords(deps, event.Records);
  } finally {
    obs.metrics.publishStoredMetrics();
  }
}
