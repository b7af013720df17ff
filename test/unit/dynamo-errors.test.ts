import {
  ConditionalCheckFailedException,
  TransactionCanceledException,
  TransactionConflictException,
  TransactionInProgressException,
} from "@aws-sdk/client-dynamodb";
import { describe, expect, it } from "vitest";
import { METRICS, MetricsRecorder, silentObservability } from "../../shared/observability.js";
import { refusedUnwritten } from "../../shared/quotas/usage.js";
import {
  conditionalWrite,
  isContention,
  isThrottling,
  isTransactionInProgress,
  isTransientFailure,
  MAX_CONTENTION_ATTEMPTS,
  retryOnContention,
  sentMoreThanOnce,
} from "../../shared/storage/dynamo-errors.js";

const cancelled = (...codes: string[]) =>
  new TransactionCanceledException({
    message: `Transaction cancelled [${codes.join(", ")}]`,
    $metadata: { httpStatusCode: 400 },
    CancellationReasons: codes.map((Code) => ({ Code })),
  });

describe("classifying DynamoDB write failures", () => {
  it("conflicts and throttling are contention; a failed condition is an answer, even beside a conflict", () => {
    expect(isContention(cancelled("None", "TransactionConflict"))).toBe(true);
    expect(isContention(cancelled("ThrottlingError", "None"))).toBe(true);
    expect(isContention(cancelled("ProvisionedThroughputExceeded"))).toBe(true);
    expect(
      isContention(new TransactionConflictException({ message: "ongoing", $metadata: {} })),
    ).toBe(true);
    expect(isContention(cancelled("ConditionalCheckFailed", "TransactionConflict"))).toBe(false);
    expect(isContention(cancelled("ValidationError"))).toBe(false);
    expect(isContention(new RangeError("year 13526"))).toBe(false);
  });

  it("throttling is the table's capacity, not another request's write: told apart from conflicts", () => {
    expect(isThrottling(cancelled("ThrottlingError", "None"))).toBe(true);
    expect(isThrottling(cancelled("TransactionConflict", "ProvisionedThroughputExceeded"))).toBe(
      true,
    );
    expect(
      isThrottling(Object.assign(new Error("slow down"), { name: "ThrottlingException" })),
    ).toBe(true);
    expect(isThrottling(cancelled("None", "TransactionConflict"))).toBe(false);
    expect(
      isThrottling(new TransactionConflictException({ message: "ongoing", $metadata: {} })),
    ).toBe(false);
  });

  it("a transaction still in progress under its token is waited out, but not taken for a refusal: its quota share stays", () => {
    const inProgress = new TransactionInProgressException({
      message: "Transaction with the given request token is already in progress.",
      $metadata: { httpStatusCode: 400 },
    });
    expect(isContention(inProgress)).toBe(true);
    expect(isTransactionInProgress(inProgress)).toBe(true);
    expect(refusedUnwritten(inProgress)).toBe(false);
    expect(refusedUnwritten(new Error("create failed", { cause: inProgress }))).toBe(false);
    expect(refusedUnwritten(cancelled("TransactionConflict"))).toBe(true);
    expect(isTransactionInProgress(cancelled("TransactionConflict"))).toBe(false);
  });

  it("transient failures are contention, 5xx, timeouts and dropped connections; a bad request is not", () => {
    expect(isTransientFailure(cancelled("TransactionConflict"))).toBe(true);
    const serverError = Object.assign(new Error("internal"), {
      name: "InternalServerError",
      $metadata: { httpStatusCode: 500 },
    });
    expect(isTransientFailure(serverError)).toBe(true);
    expect(isTransientFailure(Object.assign(new Error("reset"), { code: "ECONNRESET" }))).toBe(
      true,
    );
    const validation = Object.assign(new Error("Item size has exceeded the maximum"), {
      name: "ValidationException",
      $metadata: { httpStatusCode: 400 },
    });
    expect(isTransientFailure(validation)).toBe(false);
    expect(isTransientFailure(cancelled("ValidationError"))).toBe(false);
    expect(isTransientFailure(new RangeError("attempt 10000"))).toBe(false);
  });
});

describe("retryOnContention", () => {
  const engineWith = (metrics: MetricsRecorder) => ({
    random: () => 0,
    obs: { log: silentObservability.log, metrics },
  });

  it("sends the write again while it only meets contention, then returns its result", async () => {
    const metrics = new MetricsRecorder();
    let calls = 0;
    const result = await retryOnContention(engineWith(metrics), "claim", async () => {
      calls++;
      if (calls <= 3) throw cancelled("TransactionConflict");
      return "written";
    });
    expect([result, calls]).toEqual(["written", 4]);
    expect(metrics.sum(METRICS.writeContention, { operation: "claim" })).toBe(3);
  });

  it("gives up after its attempts, and never retries a failed condition", async () => {
    const metrics = new MetricsRecorder();
    let calls = 0;
    await expect(
      retryOnContention(engineWith(metrics), "claim", async () => {
        calls++;
        throw cancelled("ThrottlingError");
      }),
    ).rejects.toThrow(TransactionCanceledException);
    expect(calls).toBe(MAX_CONTENTION_ATTEMPTS);

    calls = 0;
    await expect(
      retryOnContention(engineWith(metrics), "claim", async () => {
        calls++;
        throw cancelled("ConditionalCheckFailed", "TransactionConflict");
      }),
    ).rejects.toThrow(TransactionCanceledException);
    expect(calls).toBe(1);
  });

  it("waits a full-jitter backoff drawn from the engine's random source", async () => {
    const metrics = new MetricsRecorder();
    const draws: number[] = [];
    const engine = {
      random: () => {
        draws.push(draws.length);
        return 0.5;
      },
      obs: { log: silentObservability.log, metrics },
    };
    let calls = 0;
    const started = Date.now();
    await retryOnContention(engine, "edit", async () => {
      if (++calls <= 2) throw cancelled("TransactionConflict");
    });
    // Half of 50 ms, then half of 100 ms.
    expect(draws).toHaveLength(2);
    expect(Date.now() - started).toBeGreaterThanOrEqual(70);
  });
});

describe("sentMoreThanOnce", () => {
  const failedCondition = (attempts?: number) =>
    Object.assign(new Error("The conditional request failed"), {
      name: "ConditionalCheckFailedException",
      $metadata: attempts === undefined ? {} : { attempts },
    });

  it("is true only when the SDK sent the request again", () => {
    expect(sentMoreThanOnce(failedCondition(2))).toBe(true);
    expect(sentMoreThanOnce(failedCondition(1))).toBe(false);
    expect(sentMoreThanOnce(failedCondition())).toBe(false);
    expect(sentMoreThanOnce(null)).toBe(false);
  });
});

describe("conditionalWrite", () => {
  const refused = () =>
    new ConditionalCheckFailedException({
      message: "The conditional request failed",
      $metadata: { httpStatusCode: 400 },
    });

  it("is true when the write applied", async () => {
    let sends = 0;
    await expect(conditionalWrite(async () => ++sends)).resolves.toBe(true);
    expect(sends).toBe(1);
  });

  it("is false when the write's condition failed", async () => {
    await expect(
      conditionalWrite(async () => {
        throw refused();
      }),
    ).resolves.toBe(false);
  });

  it("throws any other error as it came, a transaction cancelled for a condition among them", async () => {
    const throttled = Object.assign(new Error("slow down"), { name: "ThrottlingException" });
    await expect(
      conditionalWrite(async () => {
        throw throttled;
      }),
    ).rejects.toBe(throttled);
    const cancelledForCondition = cancelled("ConditionalCheckFailed");
    await expect(
      conditionalWrite(async () => {
        throw cancelledForCondition;
      }),
    ).rejects.toBe(cancelledForCondition);
  });

  it("reads the refusal after retryOnContention has waited out contention", async () => {
    const metrics = new MetricsRecorder();
    let sends = 0;
    const applied = await conditionalWrite(() =>
      retryOnContention(
        { random: () => 0, obs: { log: silentObservability.log, metrics } },
        "give-back",
        async () => {
          if (++sends === 1) throw cancelled("TransactionConflict");
          throw refused();
        },
      ),
    );
    expect([applied, sends]).toEqual([false, 2]);
  });
});
