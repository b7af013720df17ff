import {
  InternalServerError,
  TransactionCanceledException,
  TransactionConflictException,
  TransactionInProgressException,
} from "@aws-sdk/client-dynamodb";
import type {
  BatchGetCommandInput,
  BatchGetCommandOutput,
  BatchWriteCommandInput,
  BatchWriteCommandOutput,
  DynamoDBDocumentClient,
} from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../../shared/engine.js";
import { createTestClients, type TestClients } from "./namespace.js";

/** Reasons DynamoDB gives for a cancelled transaction that the emulator cannot be made to give. */
export type InjectedReason =
  | "TransactionConflict"
  | "ThrottlingError"
  | "ProvisionedThroughputExceeded"
  | "ValidationError";

const REASON_MESSAGES: Record<InjectedReason, string> = {
  TransactionConflict: "Transaction is ongoing for the item",
  ThrottlingError:
    "Throughput exceeds the current capacity for one or more global secondary indexes",
  ProvisionedThroughputExceeded:
    "The level of configured provisioned throughput for the table was exceeded",
  ValidationError: "Item size has exceeded the maximum allowed size",
};

type Input = Record<string, unknown>;
type TransactItem = Record<string, { TableName?: string } | undefined>;

export interface FaultPlan {
  /** The DynamoDB operation to fail, by its API name. */
  readonly operation: "TransactWriteItems" | "UpdateItem" | "PutItem" | "Query";
  /** How many matching requests fail before the rest pass through. */
  readonly times: number;
  /** Only requests this accepts count (the document client's input, before marshalling). */
  readonly match?: (input: Input) => boolean;
  /** TransactWriteItems: the reason on the item the conflict is placed on (the others say None). */
  readonly reason?: InjectedReason;
  /** TransactWriteItems: which item conflicts; the first by default. */
  readonly conflictOn?: (item: TransactItem, index: number) => boolean;
  /** UpdateItem, PutItem and Query: the error to throw; a TransactionConflictException by default. */
  readonly error?: () => Error;
}

export interface FaultyEngine {
  readonly engine: Engine;
  /** Requests failed so far, by operation. */
  readonly injected: { count: number };
  destroy(): void;
}

/**
 * An engine like `base` whose process dies at a run's FAILED ending, its one write failing: after
 * the next attempt's put, which stays QUEUED waiting for an ending that never came.
 */
export const dyingAtFailedEnding = (base: Engine): FaultyEngine =>
  withFaults(base, {
    operation: "UpdateItem",
    times: 1,
    match: (input) =>
      (input.ExpressionAttributeValues as Record<string, unknown> | undefined)?.[":status"] ===
      "FAILED",
    error: () => new Error("process died"),
  });

/**
 * An engine like `base` whose DynamoDB client fails the first `times` matching
 * requests the way DynamoDB does under contention (the emulator serializes
 * transactions, so it never does), then passes every request through.
 */
export function withFaults(base: Engine, plan: FaultPlan): FaultyEngine {
  const clients = createTestClients({ maxSockets: 64 });
  const injected = { count: 0 };
  clients.doc.middlewareStack.add(
    (next, context) => async (args) => {
      const input = args.input as Input;
      const command = context.commandName ?? "";
      if (
        injected.count < plan.times &&
        command.startsWith(plan.operation) &&
        (plan.match?.(input) ?? true)
      ) {
        injected.count++;
        throw failureFor(plan, input);
      }
      return next(args);
    },
    { step: "initialize", name: "injectDynamoFaults" },
  );
  return {
    engine: { ...base, doc: clients.doc },
    injected,
    destroy: () => clients.destroy(),
  };
}

/**
 * An engine like `base` whose runs' heartbeats fail once `hold()` was called (the worker logs each
 * and beats again). A handler that cancels its own run or job and then fails needs its failure's
 * write, not a beat, to meet the cancel: a beat that saw it first ends the run CANCELLED at once,
 * without the failure's error or next attempt, which a loaded machine's slow cancel allows.
 */
export function withHeartbeatsHeld(base: Engine): FaultyEngine & { hold(): void } {
  let held = false;
  const faulty = withFaults(base, {
    operation: "UpdateItem",
    times: Number.MAX_SAFE_INTEGER,
    match: (input) =>
      held && String(input.UpdateExpression).includes("#status = :running, leaseUntil ="),
    error: () => new Error("heartbeat held by the test"),
  });
  return {
    ...faulty,
    hold: () => {
      held = true;
    },
  };
}

function failureFor(plan: FaultPlan, input: Input): Error {
  if (plan.operation !== "TransactWriteItems") {
    return (
      plan.error?.() ??
      new TransactionConflictException({
        message: "Transaction is ongoing for the item",
        $metadata: { httpStatusCode: 400 },
      })
    );
  }
  const reason = plan.reason ?? "TransactionConflict";
  const items = (input.TransactItems as TransactItem[] | undefined) ?? [];
  const conflictAt = Math.max(0, plan.conflictOn ? items.findIndex(plan.conflictOn) : 0);
  const reasons = items.map((_, i) =>
    i === conflictAt ? { Code: reason, Message: REASON_MESSAGES[reason] } : { Code: "None" },
  );
  return new TransactionCanceledException({
    message: `Transaction cancelled, please refer cancellation reasons for specific reasons [${reasons
      .map((r) => r.Code)
      .join(", ")}]`,
    $metadata: { httpStatusCode: 400 },
    CancellationReasons: reasons,
  });
}

/** The table an item of a transaction writes or checks. */
export function tableOf(item: TransactItem): string | undefined {
  return Object.values(item).find((op) => op?.TableName !== undefined)?.TableName;
}

export interface LostAnswerPlan {
  /** The DynamoDB operation whose answer is lost, by its API name. */
  readonly operation: "TransactWriteItems" | "UpdateItem" | "PutItem" | "DeleteItem";
  /** How many matching requests apply and then lose their answer. */
  readonly times: number;
  /** Only requests this accepts count (the request as sent: attribute values marshalled). */
  readonly match?: (input: Input) => boolean;
  /** What happens between such a request's write and its lost answer (another caller's write). */
  readonly meanwhile?: () => Promise<unknown>;
  /** What the caller's SDK sees instead of the answer: a 500 by default (see `timedOutAnswer`). */
  readonly error?: () => Error;
}

/**
 * The error the clients' request handler (@smithy/node-http-handler with throwOnRequestTimeout)
 * gives an attempt whose answer did not come within its request timeout: no HTTP status, and the
 * SDK sends the request again only after the timeout, seconds after an applied write, where a
 * 500 comes back at once.
 */
export function timedOutAnswer(): Error {
  return Object.assign(
    new Error(
      "@smithy/node-http-handler - [ERROR] a request has exceeded the configured 5000 ms requestTimeout.",
    ),
    { name: "TimeoutError", code: "ETIMEDOUT" },
  );
}

/**
 * An engine like `base` whose DynamoDB client loses the answer of the first `times` matching
 * requests after DynamoDB applied them: the request goes through, and the caller's SDK sees a 500
 * instead of the answer, as after a dropped connection or a server error past the commit. The
 * fault sits inside the SDK's retry loop, so the SDK sends the request again, as it does for a
 * real 500: a conditional write then meets its own earlier write.
 */
export function withLostAnswers(base: Engine, plan: LostAnswerPlan): FaultyEngine {
  const clients = createTestClients({ maxSockets: 64 });
  const injected = { count: 0 };
  clients.dynamo.middlewareStack.add(
    (next, context) => async (args) => {
      const input = args.input as Input;
      if (
        injected.count < plan.times &&
        context.commandName === `${plan.operation}Command` &&
        (plan.match?.(input) ?? true)
      ) {
        injected.count++;
        await next(args);
        await plan.meanwhile?.();
        throw (
          plan.error?.() ??
          new InternalServerError({
            message: "answer lost after the write was applied",
            $metadata: { httpStatusCode: 500 },
          })
        );
      }
      return next(args);
    },
    { step: "finalizeRequest", priority: "low", name: "loseDynamoAnswers" },
  );
  return {
    engine: { ...base, doc: clients.doc },
    injected,
    destroy: () => clients.destroy(),
  };
}

export interface InProgressPlan {
  /** How many matching transactions apply and then lose their answer. */
  readonly times: number;
  /**
   * How many sends of such a transaction's token after it are answered TransactionInProgressException
   * (the first still being applied, as DynamoDB answers a repeat that overtakes it); the sends after
   * those pass through, and DynamoDB, which remembers the token, answers them without writing again.
   */
  readonly inProgressAnswers: number;
  /** Only requests this accepts count (the request as sent: attribute values marshalled). */
  readonly match?: (input: Input) => boolean;
}

/**
 * An engine like `base` whose DynamoDB client loses the answer of the first `times` matching
 * TransactWriteItems after DynamoDB applied them (a dropped connection, a timeout), with the repeats
 * of the same `ClientRequestToken` that follow answered `TransactionInProgressException` while the
 * first is taken to be still in progress. The SDK's own retries resend the token (its standard
 * retries take that exception for throttling); a transaction sent again under another token is
 * another request, and meets the first one's write.
 */
export function withTransactionsInProgress(base: Engine, plan: InProgressPlan): FaultyEngine {
  const clients = createTestClients({ maxSockets: 64 });
  const injected = { count: 0 };
  const inProgress = new Map<string, number>();
  clients.dynamo.middlewareStack.add(
    (next, context) => async (args) => {
      if (context.commandName !== "TransactWriteItemsCommand") return next(args);
      // The serialized body (a string adapter over its bytes): the token the SDK filled in.
      const sent = (args.request as { body?: unknown } | undefined)?.body;
      const body = sent instanceof Uint8Array ? new TextDecoder().decode(sent) : String(sent);
      const token = String(
        (JSON.parse(body) as { ClientRequestToken?: unknown }).ClientRequestToken,
      );
      const left = inProgress.get(token);
      if (left !== undefined && left > 0) {
        inProgress.set(token, left - 1);
        throw new TransactionInProgressException({
          message: "Transaction with the given request token is already in progress.",
          $metadata: { httpStatusCode: 400 },
        });
      }
      if (
        left === undefined &&
        injected.count < plan.times &&
        (plan.match?.(args.input as Input) ?? true)
      ) {
        injected.count++;
        await next(args);
        inProgress.set(token, plan.inProgressAnswers);
        throw new InternalServerError({
          message: "answer lost after the write was applied",
          $metadata: { httpStatusCode: 500 },
        });
      }
      return next(args);
    },
    { step: "finalizeRequest", priority: "low", name: "transactionsInProgress" },
  );
  return {
    engine: { ...base, doc: clients.doc },
    injected,
    destroy: () => clients.destroy(),
  };
}

export type SqsFaultPlan =
  | {
      /** SendMessageBatch: SQS refuses every entry (`Failed`), or accepts the batch and its answer is lost. */
      readonly operation: "SendMessageBatch";
      readonly kind: "refuseEntries" | "loseAnswer";
      /** How many matching requests meet the fault. */
      readonly times: number;
    }
  | {
      /** ChangeMessageVisibility on a receipt handle SQS no longer takes (the message was received again, or deleted). */
      readonly operation: "ChangeMessageVisibility";
      readonly kind: "expiredReceipt";
      readonly times: number;
    };

export interface FaultySqsEngine {
  readonly engine: Engine;
  /** Requests faulted so far. */
  readonly injected: { count: number };
  destroy(): void;
}

/**
 * An engine like `base` whose SQS client faults one operation the way the emulator never does:
 * SendMessageBatch with every entry refused in the answer's `Failed` list (SQS's partial failure,
 * here of all entries), or accepted with its answer lost (a 500 after SQS took the messages; the
 * SDK sends the batch again); ChangeMessageVisibility refused for a receipt handle that expired.
 */
export function withSqsFaults(base: Engine, plan: SqsFaultPlan): FaultySqsEngine {
  const clients = createTestClients({ maxSockets: 64 });
  const injected = { count: 0 };
  clients.sqs.middlewareStack.add(
    (next, context) => async (args) => {
      if (injected.count >= plan.times || context.commandName !== `${plan.operation}Command`)
        return next(args);
      injected.count++;
      if (plan.kind === "expiredReceipt")
        throw injectedSqsError("ReceiptHandleIsInvalid", "the receipt handle has expired", 400);
      if (plan.kind === "loseAnswer") {
        await next(args);
        throw injectedSqsError("InternalError", "SQS took the batch; its answer was lost", 500);
      }
      return refusedBatch((args.input as Input).Entries as { Id?: string }[] | undefined);
    },
    { step: "finalizeRequest", priority: "low", name: "injectSqsFaults" },
  );
  return {
    engine: { ...base, sqs: clients.sqs },
    injected,
    destroy: () => clients.destroy(),
  };
}

/** An error the caller of SQS sees from an injected fault, named as SQS names it. */
export function injectedSqsError(name: string, message: string, status: number): Error {
  return Object.assign(new Error(`injected SQS fault: ${message}`), {
    name,
    $fault: status >= 500 ? "server" : "client",
    $metadata: { httpStatusCode: status },
  });
}

/** SendMessageBatch's answer when SQS refuses every entry (its partial failure, of all entries). */
export function refusedBatch(entries: readonly { readonly Id?: string }[] | undefined) {
  return {
    response: {},
    output: {
      $metadata: { httpStatusCode: 200 },
      Successful: [],
      Failed: (entries ?? []).map((entry) => ({
        Id: entry.Id,
        SenderFault: false,
        Code: "InternalError",
        Message: "injected SQS fault: the entry was refused",
      })),
    },
  };
}

/**
 * Clients whose every request hangs once a run's admission (its entry in the job's `activeRuns`)
 * has been written: a worker that died mid-run. The caller destroys them.
 */
export function clientsDyingAfterAdmission(): TestClients {
  const dying = createTestClients();
  let dead = false;
  dying.doc.middlewareStack.add(
    (next, context) => async (args) => {
      if (dead) return new Promise<never>(() => undefined);
      const input: object = args.input;
      const update = "UpdateExpression" in input ? String(input.UpdateExpression) : "";
      const result = await next(args);
      if (context.commandName === "UpdateItemCommand" && update.includes("activeRuns.#runId ="))
        dead = true;
      return result;
    },
    { step: "initialize", name: "dieAfterTheAdmission" },
  );
  return dying;
}

/**
 * Until `restore()`, every BatchGetItem `doc` sends is answered as DynamoDB answers one under
 * throttling: none of its keys read, all of them UnprocessedKeys (the emulator never does).
 */
export function leaveBatchGetsUnprocessed(doc: DynamoDBDocumentClient): BatchesLeftUnprocessed {
  return leaveBatchesUnprocessed(doc, "BatchGetItem", (input) => ({
    $metadata: {},
    Responses: {},
    UnprocessedKeys: (input as BatchGetCommandInput).RequestItems,
  }));
}

/**
 * Until `restore()`, every BatchWriteItem `doc` sends is answered as DynamoDB answers one under
 * throttling: none of its items written, all of them UnprocessedItems (the emulator never does).
 */
export function leaveBatchWritesUnprocessed(doc: DynamoDBDocumentClient): BatchesLeftUnprocessed {
  return leaveBatchesUnprocessed(doc, "BatchWriteItem", (input) => ({
    $metadata: {},
    UnprocessedItems: (input as BatchWriteCommandInput).RequestItems,
  }));
}

interface BatchesLeftUnprocessed {
  /** The requests answered so far. */
  readonly requests: () => number;
  /** The time from each request answered to the next, in ms. */
  readonly waits: () => number[];
  restore(): void;
}

/**
 * Where the waits between a batch request's rounds stray from `expected`: a wait shorter than its
 * own (a timer may fire a millisecond early), or longer than one and a half times it plus
 * `slackMs`, what a busy machine's event loop may add. Waits that doubled once too often (twice
 * each expected) stray from 400 ms on.
 */
export function strayWaits(
  waits: readonly number[],
  expected: readonly number[],
  slackMs = 100,
): string[] {
  const stray =
    waits.length === expected.length ? [] : [`${waits.length} waits, not ${expected.length}`];
  expected.forEach((ms, i) => {
    const wait = waits[i];
    if (wait !== undefined && (wait < ms - 2 || wait > ms * 1.5 + slackMs))
      stray.push(`wait ${i + 1}: ${Math.round(wait)} ms, not ${ms} ms`);
  });
  return stray;
}

function leaveBatchesUnprocessed(
  doc: DynamoDBDocumentClient,
  operation: "BatchGetItem" | "BatchWriteItem",
  answer: (input: unknown) => BatchGetCommandOutput | BatchWriteCommandOutput,
): BatchesLeftUnprocessed {
  const name = `leave${operation}Unprocessed`;
  const answeredAt: number[] = [];
  doc.middlewareStack.add(
    (next, context) => async (args) => {
      if (context.commandName !== `${operation}Command`) return next(args);
      answeredAt.push(performance.now());
      const output = answer(args.input);
      return { output, response: {} } as Awaited<ReturnType<typeof next>>;
    },
    { step: "initialize", name },
  );
  return {
    requests: () => answeredAt.length,
    waits: () => answeredAt.slice(1).map((at, i) => at - (answeredAt[i] ?? at)),
    restore: () => doc.middlewareStack.remove(name),
  };
}
