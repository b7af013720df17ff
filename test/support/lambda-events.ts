import { randomUUID } from "node:crypto";
import type {
  Context,
  EventBridgeEvent,
  SQSEvent,
  SQSRecord,
  SQSRecordAttributes,
} from "aws-lambda";
import type { ApiGatewayRequestContextV2 } from "hono/aws-lambda";

/** Events and context objects shaped as Lambda hands them to a handler. */

export interface LambdaIdentity {
  readonly functionName: string;
  readonly region: string;
  readonly account: string;
  readonly timeoutSeconds: number;
  readonly memoryMb?: number;
}

export function lambdaContext(fn: LambdaIdentity): Context {
  const deadline = Date.now() + fn.timeoutSeconds * 1000;
  const refuse = () => {
    throw new Error("callback-style completion is not used by these handlers");
  };
  return {
    callbackWaitsForEmptyEventLoop: true,
    functionName: fn.functionName,
    functionVersion: "$LATEST",
    invokedFunctionArn: `arn:aws:lambda:${fn.region}:${fn.account}:function:${fn.functionName}`,
    memoryLimitInMB: String(fn.memoryMb ?? 512),
    awsRequestId: randomUUID(),
    logGroupName: `/aws/lambda/${fn.functionName}`,
    logStreamName: `2026/11/30/[$LATEST]${randomUUID().replaceAll("-", "")}`,
    getRemainingTimeInMillis: () => Math.max(0, deadline - Date.now()),
    done: refuse,
    fail: refuse,
    succeed: refuse,
  };
}

/** What an EventBridge schedule rule delivers to its target. */
export function scheduledEvent(
  ruleArn: string,
  at: Date,
): EventBridgeEvent<"Scheduled Event", Record<string, never>> {
  const [, , , region = "", account = ""] = ruleArn.split(":");
  return {
    version: "0",
    id: randomUUID(),
    "detail-type": "Scheduled Event",
    source: "aws.events",
    account,
    time: `${at.toISOString().slice(0, 19)}Z`,
    region,
    resources: [ruleArn],
    detail: {},
  };
}

/** A message as ReceiveMessage returned it, with its system attributes. */
export interface ReceivedMessage {
  readonly MessageId?: string;
  readonly ReceiptHandle?: string;
  readonly Body?: string;
  readonly MD5OfBody?: string;
  readonly Attributes?: Partial<Record<string, string>>;
}

/** An SQS event source batch, built from messages really received from the queue. */
export function sqsEvent(queueArn: string, messages: readonly ReceivedMessage[]): SQSEvent {
  const region = queueArn.split(":")[3] ?? "";
  const Records = messages.map((m): SQSRecord => {
    const attributes: SQSRecordAttributes = {
      ApproximateReceiveCount: m.Attributes?.ApproximateReceiveCount ?? "1",
      SentTimestamp: m.Attributes?.SentTimestamp ?? String(Date.now()),
      SenderId: m.Attributes?.SenderId ?? "AROAEXAMPLE:scheduler",
      ApproximateFirstReceiveTimestamp:
        m.Attributes?.ApproximateFirstReceiveTimestamp ?? String(Date.now()),
    };
    if (m.MessageId === undefined || m.ReceiptHandle === undefined || m.Body === undefined) {
      throw new Error("a received message lacks its id, receipt handle or body");
    }
    return {
      messageId: m.MessageId,
      receiptHandle: m.ReceiptHandle,
      body: m.Body,
      attributes,
      messageAttributes: {},
      md5OfBody: m.MD5OfBody ?? "",
      eventSource: "aws:sqs",
      eventSourceARN: queueArn,
      awsRegion: region,
    };
  });
  return { Records };
}

/** An HTTP API (payload v2) request through the IAM authorizer, signed by `userArn`. */
export function httpApiEvent(
  method: string,
  path: string,
  options: {
    readonly userArn: string;
    readonly body?: unknown;
    readonly query?: string;
    readonly headers?: Record<string, string>;
  },
) {
  const account = options.userArn.split(":")[4] ?? "";
  const requestContext: ApiGatewayRequestContextV2 = {
    accountId: account,
    apiId: "api1",
    authentication: null,
    authorizer: {
      iam: {
        accessKey: "ASIAEXAMPLE",
        accountId: account,
        callerId: "AROAEXAMPLE:session-1",
        cognitoIdentity: null,
        principalOrgId: null,
        userArn: options.userArn,
        userId: "AROAEXAMPLE:session-1",
      },
    },
    domainName: "api1.execute-api.eu-central-1.amazonaws.com",
    domainPrefix: "api1",
    http: { method, path, protocol: "HTTP/1.1", sourceIp: "192.0.2.1", userAgent: "test" },
    requestId: randomUUID(),
    routeKey: "$default",
    stage: "$default",
    time: "30/Nov/2026:12:00:00 +0000",
    timeEpoch: Date.now(),
  };
  return {
    version: "2.0",
    routeKey: "$default",
    rawPath: path,
    rawQueryString: options.query ?? "",
    headers: {
      host: "api1.execute-api.eu-central-1.amazonaws.com",
      ...(options.body !== undefined ? { "content-type": "application/json" } : {}),
      ...options.headers,
    },
    requestContext,
    body: options.body !== undefined ? JSON.stringify(options.body) : null,
    isBase64Encoded: false,
  };
}
