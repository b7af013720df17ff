import { LambdaClient } from "@aws-sdk/client-lambda";
import {
  AWS_TIMEOUTS,
  type AwsClientOptions,
  clientConfig,
  endpointFromEnv,
  timeoutsFor,
} from "./aws.js";

/**
 * The tick's invocations in flight at once: one per socket of its client's pool. An attempt's
 * limits count from its start, a wait for a free socket included (`AwsTimeouts`): a fan-out to
 * 1,024 shards all at once would have its last invocations wait through the first ones' rounds.
 */
export const LAMBDA_INVOKE_CONCURRENCY = 50;

/** Attempts at one Invoke (the SDK's default, said here so that its longest can be reckoned). */
const LAMBDA_INVOKE_ATTEMPTS = 3;

/**
 * The longest one Invoke against AWS takes: each attempt ends within its 5 s (`AWS_TIMEOUTS`), and
 * a second covers the SDK's backoff between them.
 */
export const LAMBDA_INVOKE_LONGEST_MS = LAMBDA_INVOKE_ATTEMPTS * AWS_TIMEOUTS.requestMs + 1_000;

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
  return new LambdaClient({
    ...clientConfig(
      { maxSockets: LAMBDA_INVOKE_CONCURRENCY, ...options },
      local,
      timeouts,
      timeouts.requestMs,
    ),
    maxAttempts: LAMBDA_INVOKE_ATTEMPTS,
  });
}
