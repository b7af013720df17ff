import { InvokeCommand, LambdaClient } from "@aws-sdk/client-lambda";
import { ENV, requireEnv } from "../../shared/config.js";
import { reap } from "../../shared/dispatch/reaper.js";
import { engineFromEnv, powertoolsObservability } from "../../shared/runtime.js";

const obs = powertoolsObservability("scheduler-tick");
const engine = engineFromEnv(obs);
const lambda = new LambdaClient({});
const dispatcher = requireEnv(ENV.dispatcherFunction);

/**
 * Once a minute: one asynchronous dispatcher invocation per shard (each with
 * Lambda's own retries and on-failure destination), then the reaper.
 */
export async function handler() {
  const shards = Array.from({ length: engine.settings.maxShardCount }, (_, shard) => shard);
  try {
    await Promise.all(
      shards.map((shard) =>
        lambda.send(
          new InvokeCommand({
            FunctionName: dispatcher,
            InvocationType: "Event",
            Payload: new TextEncoder().encode(JSON.stringify({ shard })),
          }),
        ),
      ),
    );
    const reaped = await reap(engine);
    obs.log.info("tick", { shards: shards.length, ...reaped });
    return { shards: shards.length, ...reaped };
  } finally {
    obs.metrics.publishStoredMetrics();
  }
}
