import { get } from "node:http";
import { createServer, type Socket } from "node:net";
import { GetItemCommand } from "@aws-sdk/client-dynamodb";
import { InvokeCommand } from "@aws-sdk/client-lambda";
import { SendMessageCommand } from "@aws-sdk/client-sqs";
import { afterAll, beforeAll, describe, expect, inject, it, vi } from "vitest";
import { startLocalServer } from "../../shared/api/local-server.js";
import { AWS_TIMEOUTS, createAwsClients } from "../../shared/aws.js";
import { systemClock } from "../../shared/clock.js";
import { DEFAULT_SETTINGS } from "../../shared/config.js";
import type { Engine } from "../../shared/engine.js";
import { createLambdaClient } from "../../shared/lambda-client.js";
import { silentObservability } from "../../shared/observability.js";
import { receiveRuns } from "../../shared/queue/work-queue.js";
import { isTransientFailure } from "../../shared/storage/dynamo-errors.js";
import { JOB_TYPES, KEY_A, TENANT_A } from "../api/support.js";
import {
  createQueue,
  createTestClients,
  deleteQueue,
  type TestClients,
  testNamespace,
} from "../support/namespace.js";

/**
 * On AWS a connection can go dead without a reset: the request is sent and nothing ever comes back.
 * These servers accept and then do just that, before the answer's headers ("silent") or after them,
 * partway through the body ("stalled body"). A call to them ends with a timeout the SDK retries,
 * within a bound, rather than waiting for its Lambda's own timeout.
 */
type Behaviour = "silent" | "stalled body" | "late";

/** How long the "late" server takes to answer: past AWS_TIMEOUTS' request limit. */
const LATE_MS = 6_000;

interface StallingServer {
  readonly endpoint: string;
  /** Connections accepted: one per attempt the SDK made. */
  connections(): number;
  close(): Promise<void>;
}

async function startStallingServer(behaviour: Behaviour): Promise<StallingServer> {
  const sockets = new Set<Socket>();
  let accepted = 0;
  const server = createServer((socket) => {
    accepted += 1;
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    socket.on("error", () => {});
    socket.once("data", () => {
      if (behaviour === "stalled body") {
        // Headers promising a body, and the first byte of it: the rest never comes.
        socket.write(
          "HTTP/1.1 200 OK\r\nContent-Type: application/x-amz-json-1.0\r\nContent-Length: 64\r\n\r\n{",
        );
      } else if (behaviour === "late") {
        // An empty GetItem answer (no item), as a slow emulator would give it.
        const answer = () =>
          socket.end(
            "HTTP/1.1 200 OK\r\nContent-Type: application/x-amz-json-1.0\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
          );
        setTimeout(answer, LATE_MS);
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("no port");
  return {
    endpoint: `http://127.0.0.1:${address.port}`,
    connections: () => accepted,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

type Outcome =
  | { readonly state: "pending"; readonly elapsedMs: number }
  | { readonly state: "fulfilled"; readonly elapsedMs: number; readonly value: unknown }
  | { readonly state: "rejected"; readonly elapsedMs: number; readonly error: unknown };

/** How `call` ended, or that it had not by `boundMs`: a hang fails its test rather than the file. */
async function outcomeWithin(call: Promise<unknown>, boundMs: number): Promise<Outcome> {
  const started = Date.now();
  let timer: NodeJS.Timeout | undefined;
  const pending = new Promise<"pending">((resolve) => {
    timer = setTimeout(() => resolve("pending"), boundMs);
  });
  try {
    const settled = await Promise.race([
      call.then(
        (value: unknown) => ({ state: "fulfilled" as const, value }),
        (error: unknown) => ({ state: "rejected" as const, error }),
      ),
      pending,
    ]);
    const elapsedMs = Date.now() - started;
    return settled === "pending" ? { state: "pending", elapsedMs } : { ...settled, elapsedMs };
  } finally {
    clearTimeout(timer);
  }
}

const errorName = (outcome: Outcome) =>
  outcome.state === "rejected" && outcome.error instanceof Error ? outcome.error.name : null;

const attemptsOf = (outcome: Outcome) =>
  outcome.state === "rejected"
    ? (outcome.error as { $metadata?: { attempts?: number } }).$metadata?.attempts
    : undefined;

/** The timers' own setTimeout, taken before any case fakes it. */
const realSetTimeout = globalThis.setTimeout;

/**
 * Waits for `settling` with setTimeout and clearTimeout faked, moving their clock on `stepMs` at a
 * time, with a real pause after each step for the sockets' I/O (which the faked timers leave real):
 * timeouts of seconds pass in a fraction of the time. `settling` must settle within a bound of its
 * own on the faked clock (`outcomeWithin`'s), and its timers be set once the clock is faked.
 */
async function onFakedTimers<T>(start: () => Promise<T>, stepMs = 100, pauseMs = 10): Promise<T> {
  vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
  try {
    let settled = false;
    const settling = start().finally(() => {
      settled = true;
    });
    while (!settled) {
      await vi.advanceTimersByTimeAsync(stepMs);
      await new Promise((resolve) => realSetTimeout(resolve, pauseMs));
    }
    return await settling;
  } finally {
    vi.useRealTimers();
  }
}

/** GET `url` (node:http, whose client sets no timer of its own): its status and parsed body. */
function getJson(url: string, headers: Record<string, string>) {
  return new Promise<{ status: number | undefined; body: unknown }>((resolve, reject) => {
    get(url, { headers }, (reply) => {
      const chunks: Buffer[] = [];
      reply.on("data", (chunk: Buffer) => chunks.push(chunk));
      reply.on("end", () => {
        try {
          resolve({
            status: reply.statusCode,
            body: JSON.parse(Buffer.concat(chunks).toString("utf8")),
          });
        } catch (error) {
          reject(error);
        }
      });
      reply.on("error", reject);
    }).on("error", reject);
  });
}

/** Short timeouts, so that the SDK's four attempts against a dead server take seconds. */
const SHORT = { connectionMs: 1_000, requestMs: 1_000 };

/** Registers what the test it is given to ends with (its context's `onTestFinished`). */
type AtTestEnd = (cleanup: () => Promise<void> | void) => void;

/** Clients with `options` pointed at a new stalling server, both closed when the test ends. */
async function stallingClients(atEnd: AtTestEnd, behaviour: Behaviour, options = {}) {
  const server = await startStallingServer(behaviour);
  const made = createAwsClients({ endpoint: server.endpoint, ...options });
  atEnd(async () => {
    made.dynamo.destroy();
    made.sqs.destroy();
    await server.close();
  });
  return { server, ...made };
}

// Each case waits out real timeouts against its own server (or queue): side by side, they take
// their longest case's time.
describe.concurrent("storage that stops answering", () => {
  describe("a DynamoDB call to a server that stops answering", () => {
    for (const behaviour of ["silent", "stalled body"] as const) {
      it(`ends with a retryable timeout after the SDK's attempts (${behaviour})`, async ({
        onTestFinished,
      }) => {
        const { server, dynamo } = await stallingClients(onTestFinished, behaviour, {
          timeouts: SHORT,
        });
        const outcome = await outcomeWithin(
          dynamo.send(new GetItemCommand({ TableName: "jobs", Key: { pk: { S: "JOB#1" } } })),
          15_000,
        );
        expect(outcome.state).toBe("rejected");
        expect(errorName(outcome)).toBe("TimeoutError");
        // The SDK's standard retry took the timeout as transient and tried again on a new connection.
        expect(attemptsOf(outcome)).toBe(4);
        expect(server.connections()).toBe(4);
        expect(outcome.state === "rejected" && isTransientFailure(outcome.error)).toBe(true);
      });
    }
  });

  describe("an SQS call to a server that stops answering", () => {
    // A body that stalls is cut by the SQS socket's silence limit, which allows the longest long poll
    // (20 s) on top of the request timeout: three such attempts are too long for a test.
    it("ends with a retryable timeout after the SDK's attempts (silent)", async ({
      onTestFinished,
    }) => {
      const { server, sqs } = await stallingClients(onTestFinished, "silent", { timeouts: SHORT });
      const outcome = await outcomeWithin(
        sqs.send(
          new SendMessageCommand({
            QueueUrl: `${server.endpoint}/000000000000/q`,
            MessageBody: "x",
          }),
        ),
        15_000,
      );
      expect(outcome.state).toBe("rejected");
      expect(errorName(outcome)).toBe("TimeoutError");
      expect(attemptsOf(outcome)).toBe(3);
      expect(server.connections()).toBe(3);
    });
  });

  describe("the tick's dispatcher invocation to a server that stops answering", () => {
    // The tick settles every invocation before its reaper runs: one Invoke waited on until the
    // tick's own timeout would keep that minute's reaper from running.
    it("ends with a retryable timeout after the SDK's attempts (silent)", async ({
      onTestFinished,
    }) => {
      const server = await startStallingServer("silent");
      const lambda = createLambdaClient({ endpoint: server.endpoint, timeouts: SHORT });
      onTestFinished(async () => {
        lambda.destroy();
        await server.close();
      });
      const outcome = await outcomeWithin(
        lambda.send(
          new InvokeCommand({ FunctionName: "dispatcher", InvocationType: "Event", Payload: "{}" }),
        ),
        15_000,
      );
      expect(outcome.state).toBe("rejected");
      expect(errorName(outcome)).toBe("TimeoutError");
      expect(attemptsOf(outcome)).toBe(3);
      expect(server.connections()).toBe(3);
    });
  });

  describe("an emulator (an endpoint override)", () => {
    it("is waited for past the request limit deployed on AWS: a slow answer is not cut and sent again", async ({
      onTestFinished,
    }) => {
      const { server, dynamo } = await stallingClients(onTestFinished, "late");
      const outcome = await outcomeWithin(
        dynamo.send(new GetItemCommand({ TableName: "jobs", Key: { pk: { S: "JOB#1" } } })),
        LATE_MS + 5_000,
      );
      expect(outcome.state === "rejected" ? String(outcome.error) : outcome.state).toBe(
        "fulfilled",
      );
      expect(outcome.elapsedMs).toBeGreaterThan(AWS_TIMEOUTS.requestMs);
      expect(server.connections()).toBe(1);
    });
  });

  describe("a long poll", () => {
    let testClients: TestClients;
    let queueUrl: string;

    beforeAll(async () => {
      testClients = createTestClients();
      queueUrl = (await createQueue(testClients.sqs, testNamespace("poll").name("q"))).url;
    });

    afterAll(async () => {
      await deleteQueue(testClients.sqs, queueUrl);
      testClients.destroy();
    });

    it("is not cut by a request timeout shorter than its wait", async ({ onTestFinished }) => {
      const shortLived = createAwsClients({ endpoint: inject("sqsEndpoint"), timeouts: SHORT });
      onTestFinished(() => {
        shortLived.dynamo.destroy();
        shortLived.sqs.destroy();
      });
      const outcome = await outcomeWithin(
        receiveRuns(shortLived.sqs, queueUrl, { max: 1, waitSeconds: 3 }),
        15_000,
      );
      expect(outcome.state === "rejected" ? String(outcome.error) : outcome.state).toBe(
        "fulfilled",
      );
      // An empty queue answers at the wait's end: the poll waited it out.
      expect(outcome.elapsedMs).toBeGreaterThanOrEqual(2_500);
    });
  });
});

// Its timers are faked (for the worker's process): after the cases above, not beside them.
describe("the API with its storage gone silent", () => {
  // Its SDK's four attempts each wait out the 5 s request limit: on the faked clock, the 25 s
  // bound too, they take about two seconds.
  it("answers a read 503 busy well inside API Gateway's 29 s, with the timeouts deployed on AWS", async ({
    onTestFinished,
  }) => {
    const { doc, sqs, server } = await stallingClients(onTestFinished, "silent", {
      timeouts: AWS_TIMEOUTS,
    });
    const engine: Engine = {
      doc,
      sqs,
      tables: { jobs: "jobs", runs: "runs", webhookSecrets: "webhook-secrets" },
      queues: {
        high: `${server.endpoint}/000000000000/high`,
        normal: `${server.endpoint}/000000000000/normal`,
        low: `${server.endpoint}/000000000000/low`,
      },
      settings: DEFAULT_SETTINGS,
      clock: systemClock,
      random: Math.random,
      obs: silentObservability,
    };
    const api = await startLocalServer({
      engine,
      jobTypes: JOB_TYPES,
      env: { SCHEDULER_API_KEYS: `${KEY_A}=${TENANT_A}` },
    });
    try {
      const outcome = await onFakedTimers(() =>
        outcomeWithin(
          getJson(`${api.url}/jobs/job-1`, { Authorization: `Bearer ${KEY_A}` }),
          25_000,
        ),
      );
      expect(outcome.state).toBe("fulfilled");
      expect(outcome.state === "fulfilled" && outcome.value).toMatchObject({
        status: 503,
        body: { error: { code: "busy" } },
      });
    } finally {
      await api.close();
    }
  }, 40_000);
});
