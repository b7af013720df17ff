import { AsyncLocalStorage } from "node:async_hooks";
import { DynamoDBClient } from "@aws-sdk/client-dynamodb";
import { LambdaClient } from "@aws-sdk/client-lambda";
import { SQSClient } from "@aws-sdk/client-sqs";
import type {
  HandlerExecutionContext,
  MiddlewareStack,
  SerializeHandler,
  SerializeHandlerArguments,
  SerializeHandlerOutput,
} from "@smithy/types";

/** How IAM names one request: `dynamodb:GetItem` on a table ARN, `/index/<name>` included. */
export interface Authorization {
  readonly action: string;
  /** The ARN IAM evaluates; null when this module does not know how IAM authorizes the call. */
  readonly resource: string | null;
}

/** One SDK command a handler sent, with what IAM checks for it. */
export interface RecordedCall {
  /** Whose call it was: the function the test was running when it was made. */
  readonly caller: string;
  /** `dynamodb:TransactWriteItems`: the API operation, for the failure message. */
  readonly operation: string;
  readonly authorizations: readonly Authorization[];
}

/** Names → ARNs of the resources a deployment has, as the handlers name them in requests. */
export interface ResourceArns {
  table(name: string): string;
  queue(url: string): string;
  lambdaFunction(nameOrArn: string): string;
}

type Input = Record<string, unknown>;

const keysOf = (value: unknown): string[] =>
  typeof value === "object" && value !== null ? Object.keys(value) : [];
const text = (value: unknown): string => (typeof value === "string" ? value : "");

function tableResource(arns: ResourceArns, input: Input): string {
  const table = arns.table(text(input.TableName));
  return typeof input.IndexName === "string" ? `${table}/index/${input.IndexName}` : table;
}

/**
 * How IAM authorizes each API operation: the action it checks and the
 * resource it checks it on. Most are `<service>:<Operation>` on the one
 * resource the request names; the rest are spelled out. An operation missing
 * here is reported (resource null) rather than guessed: add it when code
 * starts calling it.
 */
const AUTHORIZATION: Readonly<
  Record<string, (operation: string, input: Input, arns: ResourceArns) => Authorization[]>
> = {
  dynamodb(operation, input, arns) {
    const act = (name: string) => `dynamodb:${name}`;
    switch (operation) {
      case "GetItem":
      case "PutItem":
      case "UpdateItem":
      case "DeleteItem":
      case "Query":
      case "Scan":
      case "DescribeTable":
        return [{ action: act(operation), resource: tableResource(arns, input) }];
      case "BatchGetItem":
      case "BatchWriteItem":
        return keysOf(input.RequestItems).map((table) => ({
          action: act(operation),
          resource: arns.table(table),
        }));
      case "TransactWriteItems":
      case "TransactGetItems": {
        // No action of their own: each item is authorized as the single-item action it performs.
        const itemAction: Record<string, string> = {
          Put: "PutItem",
          Update: "UpdateItem",
          Delete: "DeleteItem",
          ConditionCheck: "ConditionCheckItem",
          Get: "GetItem",
        };
        const items = Array.isArray(input.TransactItems) ? input.TransactItems : [];
        return items.flatMap((item: unknown) =>
          keysOf(item).map((kind) => {
            const body = (item as Record<string, Input>)[kind] ?? {};
            return {
              action: act(itemAction[kind] ?? `<unknown transaction item ${kind}>`),
              resource: arns.table(text(body.TableName)),
            };
          }),
        );
      }
      default:
        return [{ action: act(operation), resource: null }];
    }
  },
  sqs(operation, input, arns) {
    // The batch operations are authorized by the single-message action.
    const action = operation.replace(/Batch$/, "");
    return [
      {
        action: `sqs:${action}`,
        resource: typeof input.QueueUrl === "string" ? arns.queue(input.QueueUrl) : null,
      },
    ];
  },
  lambda(operation, input, arns) {
    if (operation !== "Invoke") return [{ action: `lambda:${operation}`, resource: null }];
    const fn = arns.lambdaFunction(text(input.FunctionName));
    const qualifier = typeof input.Qualifier === "string" ? `:${input.Qualifier}` : "";
    return [{ action: "lambda:InvokeFunction", resource: `${fn}${qualifier}` }];
  },
};

/** What IAM checks for one call: `service` is the IAM prefix (`dynamodb`), `operation` the API name. */
export function authorizationsOf(
  service: string,
  operation: string,
  input: Input,
  arns: ResourceArns,
): Authorization[] {
  const authorize = AUTHORIZATION[service];
  return authorize
    ? authorize(operation, input, arns)
    : [{ action: `${service}:${operation}`, resource: null }];
}

/** `DynamoDBClient` → `dynamodb`: the IAM service prefix of each client the handlers use. */
const SERVICE_OF_CLIENT: Readonly<Record<string, string>> = {
  DynamoDBClient: "dynamodb",
  SQSClient: "sqs",
  LambdaClient: "lambda",
};

/** Answers a call instead of sending it, for a service no emulator stands in for. */
type Interceptor = (input: Input) => Record<string, unknown>;

export interface RecorderOptions {
  readonly arns: ResourceArns;
  /** Services that have an emulator; a recorded call to any other must be intercepted. */
  readonly emulated: readonly string[];
  /** `lambda:Invoke` → its answer. */
  readonly interceptors: Readonly<Record<string, Interceptor>>;
}

export interface AwsCallRecorder {
  readonly calls: readonly RecordedCall[];
  /** Runs `body` as `caller`: every SDK call made inside it (and in what it starts) is recorded. */
  as<T>(caller: string, body: () => Promise<T>): Promise<T>;
  /**
   * Runs `action` once, unrecorded, just before the first recorded `operation` ("dynamodb:PutItem")
   * whose input `when` accepts: what another process does in the middle of a handler's work.
   */
  before(operation: string, when: (input: Input) => boolean, action: () => Promise<void>): void;
  restore(): void;
}

type Send = (this: SmithyClient, ...args: unknown[]) => unknown;
interface SmithyClient {
  middlewareStack: MiddlewareStack<Input, object>;
}

const RECORDER_NAME = "iamConformanceRecorder";

/**
 * Records every command any AWS SDK client sends while a caller is set, with
 * an SDK middleware at the front of the serialize step: before endpoint
 * resolution, signing and the network (so it can answer for a service with no
 * emulator), and before the retry strategy (so it sees each command once). A
 * document client's input is not yet marshalled there, which changes no name
 * IAM looks at.
 *
 * The handlers build their clients at import and keep them private, so the
 * middleware is added to every client the first time it sends, by wrapping
 * the `send` of the base class all SDK clients share. Calls made outside
 * `as(...)` (the test's own set-up) pass through unrecorded.
 */
export function recordAwsCalls(options: RecorderOptions): AwsCallRecorder {
  const base: unknown = Object.getPrototypeOf(DynamoDBClient);
  for (const client of [SQSClient, LambdaClient]) {
    if (Object.getPrototypeOf(client) !== base) {
      throw new Error(`${client.name} does not share DynamoDBClient's base class`);
    }
  }
  const prototype = (base as { prototype: { send: Send } }).prototype;
  const originalSend = prototype.send;
  const callers = new AsyncLocalStorage<string>();
  const calls: RecordedCall[] = [];
  const instrumented = new WeakSet<object>();
  const hooks: {
    operation: string;
    when: (input: Input) => boolean;
    action: () => Promise<void>;
  }[] = [];

  const middleware =
    (next: SerializeHandler<Input, object>, context: HandlerExecutionContext) =>
    async (args: SerializeHandlerArguments<Input>): Promise<SerializeHandlerOutput<object>> => {
      const caller = callers.getStore();
      if (caller === undefined) return next(args);
      const clientName = context.clientName ?? "<unknown client>";
      const service = SERVICE_OF_CLIENT[clientName] ?? clientName;
      const operation = (context.commandName ?? "<unknown command>").replace(/Command$/, "");
      calls.push({
        caller,
        operation: `${service}:${operation}`,
        authorizations: authorizationsOf(service, operation, args.input, options.arns),
      });
      const hook = hooks.findIndex(
        (h) => h.operation === `${service}:${operation}` && h.when(args.input),
      );
      if (hook >= 0) {
        const [{ action }] = hooks.splice(hook, 1) as [(typeof hooks)[number]];
        await callers.exit(action);
      }
      const intercept = options.interceptors[`${service}:${operation}`];
      if (intercept) {
        return { output: { $metadata: {}, ...intercept(args.input) }, response: {} };
      }
      if (!options.emulated.includes(service)) {
        throw new Error(`${caller} called ${service}:${operation}, which has no emulator here`);
      }
      return next(args);
    };

  prototype.send = function send(this: SmithyClient, ...args: unknown[]) {
    // A document client shares its DynamoDB client's stack, so the stack is what is marked.
    if (!instrumented.has(this.middlewareStack)) {
      instrumented.add(this.middlewareStack);
      this.middlewareStack.add(middleware, {
        step: "serialize",
        priority: "high",
        name: RECORDER_NAME,
      });
    }
    return originalSend.apply(this, args);
  };

  return {
    calls,
    as: (caller, body) => callers.run(caller, body),
    before(operation, when, action) {
      hooks.push({ operation, when, action });
    },
    restore() {
      prototype.send = originalSend;
    },
  };
}
