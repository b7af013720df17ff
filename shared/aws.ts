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
  /**
   * How long one attempt of a call may wait before the SDK gives it up and retries (AwsTimeouts).
   * Default: AWS_TIMEOUTS against AWS, EMULATOR_TIMEOUTS against an endpoint override.
   */
  timeouts?: Partial<AwsTimeouts>;
}

/**
 * Limits on one attempt of a call. A connection can die without a reset (AWS's network drops it
 * silently): with no limit, the SDK waits on it until its Lambda's own timeout. Past a limit the
 * attempt fails as a `TimeoutError`, which the SDK's standard retry takes as transient and sends
 * again on a new connection (DynamoDB 4 attempts in all, SQS 3, 50 ms-based jittered backoff).
 */
interface AwsTimeouts {
  /** To open the TCP connection, counted from the attempt's start (a wait for a free socket counts). */
  connectionMs: number;
  /**
   * For the answer's headers from the attempt's start, and also the longest silence on the socket
   * while the body comes (SQS: plus the longest long poll, see SQS_LONGEST_WAIT_SECONDS). A long
   * poll's ReceiveMessage is given its wait on top (`longPollTimeoutMs`).
   */
  requestMs: number;
}

/**
 * AWS answers DynamoDB and SQS in milliseconds, and a TCP connect that needs a lost SYN sent again
 * takes about a second: 3 s and 5 s leave room for that, and stay short enough for the API: a read
 * whose storage went silent has failed all 4 attempts after about 4 × 5 s, and answers its 503
 * before API Gateway's 29 s answers a 504 for it (10 s would leave the 504).
 */
export const AWS_TIMEOUTS: AwsTimeouts = { connectionMs: 3_000, requestMs: 5_000 };

/**
 * An endpoint override is taken for an emulator (DynamoDB Local, fauxqs, LocalStack), as for the
 * credentials and region, and an emulator sharing a loaded machine is slow: the tests' heaviest
 * files (two cores shared with other test runs, load 8) had attempts of 2-3 s, their wait for a socket
 * included, and one cut at 5 s. Cutting such an attempt sends it again into the same load, so the
 * limits here only end a call to an emulator that hung.
 */
const EMULATOR_TIMEOUTS: AwsTimeouts = { connectionMs: 10_000, requestMs: 20_000 };

/** The longest WaitTimeSeconds SQS accepts on a ReceiveMessage. */
const SQS_LONGEST_WAIT_SECONDS = 20;

/** The request timeout each SQS client was built with, for its long polls (`longPollTimeoutMs`). */
const sqsRequestTimeouts = new WeakMap<SQSClient, number>();

/**
 * The request timeout for one ReceiveMessage that long-polls `waitSeconds`: SQS holds its answer
 * for up to the wait, so the client's request timeout counts from the wait's end.
 */
export function longPollTimeoutMs(sqs: SQSClient, waitSeconds: number): number {
  const requestMs = sqsRequestTimeouts.get(sqs) ?? AWS_TIMEOUTS.requestMs;
  return waitSeconds * 1000 + requestMs;
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

/**
 * The endpoint override the SDK picks up for this service from the environment: the service's own
 * variable before `AWS_ENDPOINT_URL` (an empty one is unset); undefined when neither is set.
 */
export function endpointFromEnv(
  service: "DYNAMODB" | "SQS" | "LAMBDA",
  env: NodeJS.ProcessEnv = process.env,
): string | undefined {
  return env[`AWS_ENDPOINT_URL_${service}`] || env.AWS_ENDPOINT_URL || undefined;
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

function requestHandler(
  maxSockets: number,
  timeouts: AwsTimeouts,
  socketIdleMs: number,
): NodeHttpHandler {
  // One handler per client: client.destroy() destroys its handler's agents,
  // so sharing would let one client close another's sockets.
  return new NodeHttpHandler({
    httpAgent: new HttpAgent({ keepAlive: true, maxSockets }),
    httpsAgent: new HttpsAgent({ keepAlive: true, maxSockets }),
    connectionTimeout: timeouts.connectionMs,
    // Without throwOnRequestTimeout the handler only logs a warning when it passes.
    requestTimeout: timeouts.requestMs,
    throwOnRequestTimeout: true,
    // The request timeout ends with the headers; a body that stops coming is cut by the silence.
    socketTimeout: socketIdleMs,
  });
}

/** One attempt's limits for a client: AWS's, or an emulator's when its endpoint is overridden. */
export function timeoutsFor(options: AwsClientOptions, local: boolean): AwsTimeouts {
  return { ...(local ? EMULATOR_TIMEOUTS : AWS_TIMEOUTS), ...options.timeouts };
}

/**
 * A client's endpoint, region, credentials and request handler. Emulators accept any signature,
 * but the SDK still refuses to send without credentials and a region; real AWS keeps the SDK's
 * default chains.
 */
export function clientConfig(
  options: AwsClientOptions,
  local: boolean,
  timeouts: AwsTimeouts,
  socketIdleMs: number,
) {
  const region =
    options.region ??
    (local && !process.env.AWS_REGION && !process.env.AWS_PROFILE ? LOCAL_REGION : undefined);
  return {
    ...(options.endpoint !== undefined ? { endpoint: options.endpoint } : {}),
    ...(region !== undefined ? { region } : {}),
    ...(local && !credentialsInEnv() ? { credentials: LOCAL_CREDENTIALS } : {}),
    requestHandler: requestHandler(
      options.maxSockets ?? DEFAULT_MAX_SOCKETS,
      timeouts,
      socketIdleMs,
    ),
  };
}

/**
 * Builds the three clients the engine uses. Callers own them: call
 * `dynamo.destroy()` / `sqs.destroy()` when done so keep-alive sockets don't
 * hold the process open (`doc` shares `dynamo`'s handler).
 */
export function createAwsClients(options: AwsClientOptions = {}): AwsClients {
  const explicit = options.endpoint !== undefined;
  const dynamoLocal = explicit || endpointFromEnv("DYNAMODB") !== undefined;
  const dynamoTimeouts = timeoutsFor(options, dynamoLocal);
  const dynamo = new DynamoDBClient(
    clientConfig(options, dynamoLocal, dynamoTimeouts, dynamoTimeouts.requestMs),
  );
  const sqsLocal = explicit || endpointFromEnv("SQS") !== undefined;
  // With an endpoint override every request goes to that endpoint. Left on, the SDK sends each
  // request to the host in its QueueUrl when that differs from an endpoint taken from the
  // environment, and emulators write host names into their URLs (fauxqs `sqs.<region>.localhost`,
  // LocalStack `sqs.<region>.localhost.localstack.cloud`) that need not resolve where tests run.
  const sqsTimeouts = timeoutsFor(options, sqsLocal);
  const sqs = new SQSClient({
    // A long poll's socket is silent for its wait: the SQS side's silence limit allows the longest.
    ...clientConfig(
      options,
      sqsLocal,
      sqsTimeouts,
      SQS_LONGEST_WAIT_SECONDS * 1000 + sqsTimeouts.requestMs,
    ),
    ...(sqsLocal ? { useQueueUrlAsEndpoint: false } : {}),
  });
  sqsRequestTimeouts.set(sqs, sqsTimeouts.requestMs);
  const doc = DynamoDBDocumentClient.from(dynamo, documentTranslateConfig);
  return { dynamo, doc, sqs };
}
