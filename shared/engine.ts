import type { SQSClient } from "@aws-sdk/client-sqs";
import type { DynamoDBDocumentClient } from "@aws-sdk/lib-dynamodb";
import type { Clock } from "./clock.js";
import type { EngineSettings } from "./config.js";
import type { Observability } from "./observability.js";
import type { QueueUrls } from "./queue/work-queue.js";
import type { TableNames } from "./storage/tables.js";

/**
 * Everything the engine's operations need from the outside world, passed in
 * rather than reached for: clients, resource names, settings, time, randomness
 * and where to report. Handlers build one; tests build theirs.
 */
export interface Engine {
  readonly doc: DynamoDBDocumentClient;
  readonly sqs: SQSClient;
  readonly tables: TableNames;
  readonly queues: QueueUrls;
  readonly settings: EngineSettings;
  readonly clock: Clock;
  readonly random: () => number;
  readonly obs: Observability;
}
