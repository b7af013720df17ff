import { Agent as HttpAgent } from "node:http";
import { Agent as HttpsAgent } from "node:https";
import { DynamoDBClient } from "@aws-sdk/client-dynamodb";
import { SQSClient } from "@aws-sdk/client-sqs";
import { DynamoDBDocumentClient, type TranslateConfig } from "@aws-sdk/lib-dynamodb";
import { NodeHttpHandler } from "@smithy/node-http-handler";

export interface AwsClientOptions {
  /**
   * Overrides the endpoint of every client. When absent, the SDK resolves it
   * itself, which (verified in the installed SDK 3.1169, @smithy/core) honours
   * `AWS_ENDPOINT_URL_DYNAMODB` / `AWS_ENDPOINT_URL_SQS` before `AWS_ENDPOINT_URL`,
   * so LocalStack or emulators work with no code change.
   */
  endpoint?: string;
  region?: string;
  /** Per-client socket pool size; a dispatcher fanning out sends needs more than the default. */
  maxSockets?: number;
}

export interface AwsClients {
  dynamo: DynamoDBClient;
  doc: DynamoDBDocumentClient;
  sqs: SQSClient;
}

const DEFAULT_MAX_SOCKETS = 50;
const LOCAL_REGION = "us-east-1";
const LOCAL_CREDENTIALS = { accessKeyId: "local", secretAccessKey: "local" };

/**
 * Marshalling choices for the Document client:
 * - removeUndefinedValues: optional fields (error, reason, finishedAt…) are
 *   spread into items as `undefined`; without this the SDK throws instead of
 *   omitting them.
 * - convertEmptyValues stays false: DynamoDB accepts empty strings in non-key
 *   attributes, and turning them into NULL would change what we read back.
 * - wrapNumbers stays false: our numbers (fences, counters, epoch ms) fit in
 *   a JS double, so plain `number` is safe and simpler to use.
 * - convertClassInstanceToMap stays false: items are plain objects; a class
 *   instance reaching storage is a bug that should fail loudly.
 */
const documentTranslateConfig: TranslateConfig = {
  marshallOptions: {
    removeUndefinedValues: true,
    convertEmptyValues: false,
    convertClassInstanceToMap: false,
  },
  unmarshallOptions: { wrapNumbers: false },
};

/** Whether the SDK will pick up an endpoint override for this service from the environment. */
function endpointInEnv(service: "DYNAMODB" | "SQS"): boolean {
  return Boolean(process.env[`AWS_ENDPOINT_URL_${service}`] || process.env.AWS_ENDPOINT_URL);
}

function credentialsInEnv(): boolean {
  const env = process.env;
  return Boolean(
    env.AWS_ACCESS_KEY_ID ||
      env.AWS_PROFILE ||
      env.AWS_WEB_IDENTITY_TOKEN_FILE ||
      env.AWS_CONTAINER_CREDENTIALS_FULL_URI ||
      env.AWS_CONTAINER_CREDENTIALS_RELATIVE_URI,
  );
}

function requestHandler(maxSockets: number): NodeHttpHandler {
  // One handler per client: client.destroy() destroys its handler's agents,
  // so sharing would let one client close another's sockets.
  return new NodeHttpHandler({
    httpAgent: new HttpAgent({ keepAlive: true, maxSockets }),
    httpsAgent: new HttpsAgent({ keepAlive: true, maxSockets }),
  });
}

/**
 * Builds the three clients the engine uses. Callers own them: call
 * `dynamo.destroy()` / `sqs.destroy()` when done so keep-alive sockets don't
 * hold the process open (`doc` shares `dynamo`'s handler).
 */
export function createAwsClients(options: AwsClientOptions = {}): AwsClients {
  const maxSockets = options.maxSockets ?? DEFAULT_MAX_SOCKETS;
  const config = (local: boolean) => {
    // Emulators accept any signature, but the SDK still refuses to send without
    // credentials and a region; real AWS keeps the SDK's default chains.
    const region =
      options.region ??
      (local && !process.env.AWS_REGION && !process.env.AWS_PROFILE ? LOCAL_REGION : undefined);
    return {
      ...(options.endpoint !== undefined ? { endpoint: options.endpoint } : {}),
      ...(region !== undefined ? { region } : {}),
      ...(local && !credentialsInEnv() ? { credentials: LOCAL_CREDENTIALS } : {}),
      requestHandler: requestHandler(maxSockets),
    };
  };
  const explicit = options.endpoint !== undefined;
  const dynamo = new DynamoDBClient(config(explicit || endpointInEnv("DYNAMODB")));
  const sqsLocal = explicit || endpointInEnv("SQS");
  // With an endpoint override every request goes to that endpoint. Left on, the SDK sends each
  // request to the host in its QueueUrl when that differs from an endpoint taken from the
  // environment, and emulators write host names into their URLs (fauxqs `sqs.<region>.localhost`,
  // LocalStack `sqs.<region>.localhost.localstack.cloud`) that need not resolve where tests run.
  const sqs = new SQSClient({
    ...config(sqsLocal),
    ...(sqsLocal ? { useQueueUrlAsEndpoint: false } : {}),
  });
  const doc = DynamoDBDocumentClient.from(dynamo, documentTranslateConfig);
  return { dynamo, doc, sqs };
}
