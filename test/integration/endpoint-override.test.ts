import { ReceiveMessageCommand, SendMessageCommand } from "@aws-sdk/client-sqs";
import { HttpRequest } from "@smithy/core/protocols";
import { afterAll, beforeAll, expect, inject, it } from "vitest";
import { type AwsClients, createAwsClients } from "../../shared/aws.js";
import {
  createQueue,
  createTestClients,
  deleteQueue,
  type TestClients,
  testNamespace,
} from "../support/namespace.js";

/**
 * Deployed handlers take their endpoint from the environment (AWS_ENDPOINT_URL_SQS, or
 * AWS_ENDPOINT_URL for LocalStack), never from code. Every request must go to that endpoint,
 * whatever host an emulator wrote into its queue URLs (fauxqs `sqs.<region>.localhost`,
 * LocalStack `sqs.<region>.localhost.localstack.cloud`), which need not resolve where tests run.
 */
const saved = { ...process.env };
let testClients: TestClients;
let fromEnvironment: AwsClients;
let queueUrl: string;

beforeAll(async () => {
  testClients = createTestClients();
  queueUrl = (await createQueue(testClients.sqs, testNamespace("endpoint").name("q"))).url;
  process.env.AWS_ENDPOINT_URL_SQS = inject("sqsEndpoint");
  fromEnvironment = createAwsClients();
});

afterAll(async () => {
  process.env = saved;
  fromEnvironment.sqs.destroy();
  fromEnvironment.dynamo.destroy();
  await deleteQueue(testClients.sqs, queueUrl);
  testClients.destroy();
});

it("an SQS client configured from the environment sends to that endpoint, not to the queue URL's host", async () => {
  // fauxqs names its queues at sqs.<region>.localhost:<port>, LocalStack by default at
  // sqs.<region>.localhost.localstack.cloud:4566: neither is the endpoint's host.
  const endpoint = new URL(inject("sqsEndpoint"));
  const hosts: string[] = [];
  fromEnvironment.sqs.middlewareStack.add(
    (next) => async (args) => {
      if (HttpRequest.isInstance(args.request)) {
        hosts.push(`${args.request.hostname}:${args.request.port ?? ""}`);
      }
      return next(args);
    },
    { step: "finalizeRequest", name: "observeHost" },
  );
  await fromEnvironment.sqs.send(new SendMessageCommand({ QueueUrl: queueUrl, MessageBody: "hi" }));
  expect(hosts).toEqual([`${endpoint.hostname}:${endpoint.port}`]);
  const { Messages = [] } = await testClients.sqs.send(
    new ReceiveMessageCommand({ QueueUrl: queueUrl, WaitTimeSeconds: 1 }),
  );
  expect(Messages.map((m) => m.Body)).toEqual(["hi"]);
});
