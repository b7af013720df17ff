import { InvokeCommand, LambdaClient } from "@aws-sdk/client-lambda";
import type { Context } from "aws-lambda";
import { ENV, requireEnv } from "../../shared/config.js";
import { reap } from "../../shared/dispatch/reaper.js";
import { dispatcherEvent, readTickShards, shardsOf } from "../../shared/dispatch/tick-shards.js";
import { engineFromEnv, powertoolsObservability } from "../../shared/runtime.js";

const obs = powertoolsObservability("scheduler-tick");
const engine = engineFromEnv(obs);
const lambda = new LambdaClient({});
const dispatcher = requireEnv(ENV.dispatcherFunction);

/**
 * Once a minute: one asynchronous dispatcher invocation per shard the stage has run with (each
 * with Lambda's own retries and on-failure destination), then the reaper, within what is left of
 * the invocation's time (it stops short of it, and the next tick goes on where it stopped).
 */
export async function handler(_event: unknown, context: Context) {
  try {
    const tickShards = await readTickShards(engine, engine.clock());
    const shards = shardsOf(tickShards);
    await Promise.all(
      shards.map((shard) =>
        lambda.send(
          new InvokeCommand({
            FunctionName: dispatcher,
            InvocationType: "Event",
            Payload: new TextEncoder().encode(JSON.stringify(dispatcherEvent(shard, tickShards))),
          }),
        ),
      ),
    );
    const reaped = await reap(engine, {
      shards: tickShards,
      remainingMs: () => context.getRemainingTimeInMillis(),
    });
    obs.log.info("tick", {
      shards: shards.length,
      configuredShards: engine.settings.maxShardCount,
      ...reaped,
    });
    return { shards: shards.length, ...reaped };
  } finally {
    obs.metrics.publishStoredMetrics();
  }
}
