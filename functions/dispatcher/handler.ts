import type { Context } from "aws-lambda";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import { shardOfDispatcherEvent } from "../../shared/dispatch/tick-shards.js";
import { engineFromEnv, powertoolsObservability } from "../../shared/runtime.js";

const obs = powertoolsObservability("scheduler-dispatcher");
const engine = engineFromEnv(obs);

/** One pass over one shard; the tick invokes this asynchronously once per shard. */
export async function handler(event: { shard?: unknown; shardCount?: unknown }, context: Context) {
  const shard = shardOfDispatcherEvent(event, engine.settings);
  if (shard === null) {
    throw new Error(`dispatcher invoked without a valid shard: ${JSON.stringify(event)}`);
  }
  try {
    const result = await dispatchShard(engine, shard, context.awsRequestId);
    obs.log.info("dispatcher pass", { ...result });
    return result;
  } finally {
    obs.metrics.publishStoredMetrics();
  }
}
