import { LambdaClient } from "@aws-sdk/client-lambda";
import { type AwsClientOptions, clientConfig, endpointFromEnv, timeoutsFor } from "./aws.js";

/**
 * The tick's invocations in flight at once: one per socket of its client's pool. An attempt's
 * limits count from its start, a wait for a free socket included (`AwsTimeouts`): a fan-out to
 * 1,024 shards all at once would have its last invocations wait through the first ones' rounds.
 */
export const LAMBDA_INVOKE_CONCURRENCY = 50;

/**
 * The tick's Lambda client, for its dispatcher invocations, with the limits on one attempt that
 * the engine's clients have (`AwsTimeouts`, ./aws.ts): the tick waits for every invocation before
 * its reaper runs, and an Invoke whose connection died without a reset would otherwise be waited
 * on until the tick's own timeout, that minute's reaper never run. Its own module, so that the
 * other functions' bundles hold no Lambda client.
 */
export function createLambdaClient(options: AwsClientOptions = {}): LambdaClient {
  const local = options.endpoint !== undefined || endpointFromEnv("LAMBDA") !== undefined;
  const timeouts = timeoutsFor(options, local);
  return new LambdaClient(
    clientConfig(
      { maxSockets: LAMBDA_INVOKE_CONCURRENCY, ...options },
      local,
      timeouts,
      timeouts.requestMs,
    ),
  );
}
