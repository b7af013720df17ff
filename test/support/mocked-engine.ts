import { DynamoDBClient } from "@aws-sdk/client-dynamodb";
import type { SQSClient } from "@aws-sdk/client-sqs";
import { DynamoDBDocumentClient } from "@aws-sdk/lib-dynamodb";
import type { Clock } from "../../shared/clock.js";
import { DEFAULT_SETTINGS, type EngineSettings } from "../../shared/config.js";
import type { Engine } from "../../shared/engine.js";
import { type Observability, silentObservability } from "../../shared/observability.js";

/**
 * An engine over clients that never reach a service (unit tests mock them with
 * aws-sdk-client-mock): table and queue names of their own, the default settings unless given.
 */
export function mockedEngine(parts: {
  readonly sqs: SQSClient;
  readonly clock: Clock;
  readonly doc?: DynamoDBDocumentClient;
  readonly settings?: EngineSettings;
  readonly obs?: Observability;
}): Engine {
  return {
    doc: parts.doc ?? DynamoDBDocumentClient.from(new DynamoDBClient({ region: "us-east-1" })),
    sqs: parts.sqs,
    tables: { jobs: "jobs", runs: "runs", webhookSecrets: "secrets" },
    queues: { high: "queue-high", normal: "queue-normal", low: "queue-low" },
    settings: parts.settings ?? DEFAULT_SETTINGS,
    clock: parts.clock,
    random: Math.random,
    obs: parts.obs ?? silentObservability,
  };
}
