import { InvokeCommand } from "@aws-sdk/client-lambda";
import type { Context } from "aws-lambda";
import { ENV, requireEnv } from "../../shared/config.js";
import { fanOutTick } from "../../shared/dispatch/tick-fan-out.js";
import { createLambdaClient } from "../../shared/lambda-client.js";
import { engineFromEnv, powertoolsObservability } from "../../shared/runtime.js";

const obs = powertoolsObservability("scheduler-tick");
const engine = engineFromEnv(obs);
const lambda = createLambdaClient();
const dispatcher = requireEnv(ENV.dispatcherFunction);

/**
 * Once a minute (`fanOutTick`): one asynchronous dispatcher invocation per shard the stage has run
 * with, then the reaper, within what is left of the invocation's time.
 */
export async function handler(_event: unknown, context: Context) {
  try {
    const { shards, reaped } = await fanOutTick(engine, {
      invoke: (event) =>
        lambda.send(
          new InvokeCommand({
            FunctionName: dispatcher,
            InvocationType: "Event",
            Payload: new TextEncoder().encode(JSON.stringify(event)),
          }),
        ),
      remainingMs: () => context.getRemainingTimeInMillis(),
    });
    obs.log.info("tick", { shards, configuredShards: engine.settings.maxShardCount, ...reaped });
    return { shards, ...reaped };
  } finally {
    obs.metrics.publishStoredMetrics();
  }
}
